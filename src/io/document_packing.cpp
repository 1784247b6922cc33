#include "io/document_packing.hpp"

#include <algorithm>
#include <map>
#include <numeric>

#include "core/error.hpp"

namespace exa::io {

std::vector<std::int64_t> text_document_starts(const TokenStore& bytes) {
  std::vector<std::int64_t> starts{0};
  const std::int64_t n = bytes.size();
  for (std::int64_t p = 2; p < n; ++p)
    if (bytes.at(p) != '\n' && bytes.at(p - 1) == '\n' && bytes.at(p - 2) == '\n') starts.push_back(p);
  return starts;
}

std::vector<DocumentPiece> document_pieces(const std::vector<std::int64_t>& starts, std::int64_t begin,
                                           std::int64_t end, std::int64_t T, std::int64_t* documents,
                                           std::int64_t* split) {
  std::vector<DocumentPiece> pieces;
  std::int64_t n_docs = 0, n_split = 0;
  auto it = std::upper_bound(starts.begin(), starts.end(), begin);
  std::int64_t a = begin;
  for (;;) {
    const std::int64_t e = it == starts.end() ? end : std::min(*it, end);
    if (e > a) {
      ++n_docs;
      if (e - a > T) ++n_split;
      for (std::int64_t p = a; p < e; p += T) {
        const std::int64_t n = std::min(T, e - p);
        pieces.push_back({p, std::int32_t(n), std::uint8_t(p + n < e)});
      }
    }
    if (it == starts.end() || *it >= end) break;
    a = *it++;
  }
  if (documents) *documents = n_docs;
  if (split) *split = n_split;
  return pieces;
}

void piece_rows(const TokenStore& tokens, const DocumentPiece& piece, std::int32_t* inputs, std::int32_t* targets) {
  const std::int64_t p = piece.start, n = piece.len;
  tokens.copy(p, n, inputs);
  if (n > 1) tokens.copy(p + 1, n - 1, targets);
  targets[n - 1] = piece.more ? std::int32_t(tokens.at(p + n)) : -1;
}

DocumentPacking::DocumentPacking(const std::vector<std::int64_t>& starts, std::int64_t begin, std::int64_t end,
                                 std::int64_t T)
    : T_(T) {
  EXA_REQUIRE(T >= 1 && begin >= 0 && end > begin, "sequence packing: no tokens in [{}, {}) to pack", begin, end);
  EXA_REQUIRE(!starts.empty() && starts.front() == 0 && std::is_sorted(starts.begin(), starts.end()),
              "sequence packing: document starts must begin at 0 and increase");
  const std::vector<DocumentPiece> pieces = document_pieces(starts, begin, end, T, &documents_, &split_);
  // Best-fit decreasing; ties keep the data's order (stable sort), and among
  // open sequences with equal room the first opened takes the piece.
  std::vector<std::int64_t> order(pieces.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](std::int64_t x, std::int64_t y) { return pieces[std::size_t(x)].len > pieces[std::size_t(y)].len; });
  std::multimap<std::int64_t, std::int64_t> room;  // room left -> sequence
  std::vector<std::vector<std::int64_t>> seqs;
  for (const std::int64_t k : order) {
    const std::int64_t n = pieces[std::size_t(k)].len;
    auto fit = room.lower_bound(n);
    std::int64_t s;
    std::int64_t left;
    if (fit == room.end()) {
      s = std::int64_t(seqs.size());
      seqs.emplace_back();
      left = T - n;
    } else {
      s = fit->second;
      left = fit->first - n;
      room.erase(fit);
    }
    seqs[std::size_t(s)].push_back(k);
    if (left > 0) room.emplace(left, s);
    filled_ += n;
  }
  first_.reserve(seqs.size() + 1);
  first_.push_back(0);
  for (const auto& sq : seqs) {
    for (const std::int64_t k : sq) pieces_.push_back(pieces[std::size_t(k)]);
    first_.push_back(std::int64_t(pieces_.size()));
  }
}

std::int64_t DocumentPacking::valid_targets(std::int64_t s) const {
  EXA_ASSERT(s >= 0 && s < sequences());
  std::int64_t n = 0;
  for (std::int64_t k = first_[std::size_t(s)]; k < first_[std::size_t(s) + 1]; ++k) n += pieces_[std::size_t(k)].targets();
  return n;
}

std::int64_t DocumentPacking::filled(std::int64_t s) const {
  EXA_ASSERT(s >= 0 && s < sequences());
  std::int64_t n = 0;
  for (std::int64_t k = first_[std::size_t(s)]; k < first_[std::size_t(s) + 1]; ++k) n += pieces_[std::size_t(k)].len;
  return n;
}

void DocumentPacking::fill(const TokenStore& tokens, std::int64_t s, const PackedRows& out) const {
  EXA_ASSERT(s >= 0 && s < sequences());
  std::int64_t row = 0;
  for (std::int64_t k = first_[std::size_t(s)]; k < first_[std::size_t(s) + 1]; ++k) {
    const DocumentPiece& piece = pieces_[std::size_t(k)];
    const std::int64_t n = piece.len;
    piece_rows(tokens, piece, out.inputs + row, out.targets + row);
    for (std::int64_t t = row; t < row + n; ++t) {
      out.doc_start[t] = std::int32_t(row);
      out.doc_end[t] = std::int32_t(row + n);
    }
    row += n;
  }
  for (std::int64_t t = row; t < T_; ++t) {
    out.inputs[t] = 0;
    out.targets[t] = -1;
    out.doc_start[t] = std::int32_t(row);
    out.doc_end[t] = std::int32_t(T_);
  }
}

}  // namespace exa::io
