#pragma once
// Sequence packing (data.documents = "packed"; docs/architecture.md,
// "Sequence packing"): whole documents laid into sequences of T tokens.
//
// The documents of a token range [begin, end) (one training or validation
// split) are cut into pieces of at most T tokens: a document longer than T
// is the only one split, into T-token pieces and a rest. The pieces are
// placed best-fit decreasing: longest first, each into the open sequence
// with the least room that still holds it, else into a new one. The result
// depends only on the document starts, the range and T, so every rank and
// every layout builds the same sequences, and a restart finds them again.
//
// A sequence's rows are its pieces one after another, then padding. Each
// piece's rows form a document for the attention mask and RoPE (positions
// restart at 0). Targets: row t predicts the token after it within its
// document; the last row of a piece predicts the next token only when the
// piece is not its document's end (a split document goes on), else its
// target is -1 (ignored): no row ever predicts across a document boundary.
// Padding rows hold token 0, target -1, and are a document of their own.
#include <cstdint>
#include <vector>

#include "io/token_store.hpp"

namespace exa::io {

// A text's document starts, as byte offsets: a document begins at offset 0
// and at each byte that is not a newline right after an empty line
// (tokenizer.hpp's rule: blank lines separate documents).
std::vector<std::int64_t> text_document_starts(const TokenStore& bytes);

// One document's tokens [start, start + len), all of it or a piece of at
// most T of a longer one; `more` when the document goes on after it. Its
// rows' targets are the next tokens of the document; the last row's only
// when `more` (else it has none).
struct DocumentPiece {
  std::int64_t start = 0;
  std::int32_t len = 0;
  std::uint8_t more = 0;
  std::int64_t targets() const { return len - 1 + more; }
};

// The documents that overlap [begin, end), clipped to it, in order, each
// cut into pieces of at most T tokens. `documents` and `split` (when
// given) count the documents and those longer than T.
std::vector<DocumentPiece> document_pieces(const std::vector<std::int64_t>& starts, std::int64_t begin,
                                           std::int64_t end, std::int64_t T, std::int64_t* documents = nullptr,
                                           std::int64_t* split = nullptr);

// A piece's rows from `tokens`: len inputs and len targets.
void piece_rows(const TokenStore& tokens, const DocumentPiece& piece, std::int32_t* inputs, std::int32_t* targets);

// One packed sequence's rows: inputs, targets, and the start and end row
// of each row's document (end exclusive), each [T].
struct PackedRows {
  std::int32_t* inputs;
  std::int32_t* targets;
  std::int32_t* doc_start;
  std::int32_t* doc_end;
};

class DocumentPacking {
 public:
  DocumentPacking() = default;
  // `starts`: increasing document starts of the whole token store (the
  // first 0); the documents are clipped to [begin, end). exa::Error when
  // the range holds no token.
  DocumentPacking(const std::vector<std::int64_t>& starts, std::int64_t begin, std::int64_t end, std::int64_t T);

  std::int64_t seq_len() const { return T_; }
  std::int64_t sequences() const { return std::int64_t(first_.size()) - 1; }
  std::int64_t documents() const { return documents_; }
  std::int64_t split_documents() const { return split_; }
  // Rows that hold tokens, over all sequences (the rest is padding).
  std::int64_t filled_rows() const { return filled_; }
  // Targets that count in the loss in sequence s, and its rows that hold
  // tokens.
  std::int64_t valid_targets(std::int64_t s) const;
  std::int64_t filled(std::int64_t s) const;
  // Sequence s's rows from `tokens`.
  void fill(const TokenStore& tokens, std::int64_t s, const PackedRows& out) const;

 private:
  std::int64_t T_ = 0, documents_ = 0, split_ = 0, filled_ = 0;
  std::vector<std::int64_t> first_;    // [sequences + 1]: each sequence's first piece
  std::vector<DocumentPiece> pieces_;  // by sequence, in their order within it
};

}  // namespace exa::io
