// Sequence packing is exact: a packed micro-batch (documents, their masks
// and restarted positions) gives each document the loss it gets alone, and
// the packed gradient is the sum of the documents' gradients, each run as
// a sequence of its own (padded, unpacked). In double, with a MoE layer
// that drops nothing (capacity_factor = 0) and no batch-level router loss,
// so nothing couples the documents but what the mask must cut.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <vector>

#include "model/stage_model.hpp"
#include "model_test_util.hpp"

using namespace exa::model;
using namespace exa::test;

namespace {

using Ids = Kokkos::View<std::int32_t**, exa::Layout, exa::Device>;

struct HostBatch {
  std::int64_t B = 0, T = 0;
  std::vector<std::int32_t> in, tg, start, end;
};

// Each document's tokens, from a fixed pseudo-random stream.
std::vector<std::vector<std::int32_t>> documents(const std::vector<std::vector<int>>& lengths, std::int64_t V) {
  std::vector<std::vector<std::int32_t>> docs;
  std::uint64_t s = 12345;
  for (const auto& seq : lengths)
    for (int n : seq) {
      std::vector<std::int32_t> d;
      for (int i = 0; i < n; ++i) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        d.push_back(std::int32_t((s >> 33) % std::uint64_t(V)));
      }
      docs.push_back(d);
    }
  return docs;
}

// Rows [row, row + n) of sequence b hold document d: targets the next token
// of the document, -1 after its last.
void put(HostBatch& h, std::int64_t b, std::int64_t row, const std::vector<std::int32_t>& d, bool documents) {
  const std::int64_t n = std::int64_t(d.size());
  for (std::int64_t i = 0; i < n; ++i) {
    const std::size_t at = std::size_t(b * h.T + row + i);
    h.in[at] = d[std::size_t(i)];
    h.tg[at] = i + 1 < n ? d[std::size_t(i + 1)] : -1;
    if (documents) {
      h.start[at] = std::int32_t(row);
      h.end[at] = std::int32_t(row + n);
    }
  }
}

HostBatch empty(std::int64_t B, std::int64_t T) {
  HostBatch h{B, T, std::vector<std::int32_t>(std::size_t(B * T), 0), std::vector<std::int32_t>(std::size_t(B * T), -1),
              std::vector<std::int32_t>(std::size_t(B * T), 0), std::vector<std::int32_t>(std::size_t(B * T), 0)};
  return h;
}

Ids device(const std::vector<std::int32_t>& v, std::int64_t B, std::int64_t T) {
  Ids d("ids", B, T);
  auto h = Kokkos::create_mirror_view(d);
  for (std::size_t i = 0; i < v.size(); ++i) h.data()[i] = v[i];
  Kokkos::deep_copy(d, h);
  return d;
}

struct Result {
  std::vector<double> row_ce;  // eval: each row's cross-entropy
  exa::View1<double> grads;
};

// Forward, backward (loss = sum over valid targets / denom) and eval of one batch.
Result run(StageModel<double>& model, const ModelConfig& cfg, const exa::View1<double>& values, const HostBatch& h,
        bool documents, double denom) {
  const auto w = bind_flat(cfg, values);
  Result r{{}, exa::View1<double>("grads", values.extent(0))};
  const auto g = bind_flat(cfg, r.grads);
  StageModel<double>::Input in;
  in.tokens = device(h.in, h.B, h.T);
  in.targets = device(h.tg, h.B, h.T);
  if (documents) in.documents = {device(h.start, h.B, h.T), device(h.end, h.B, h.T)};
  in.ce_denominator = denom;
  auto& c = model.forward(w, in);
  model.backward(c, w, g, 1.0);
  exa::View1<double> ce("ce", h.B * h.T);
  model.eval(w, in, in.targets, ce);
  r.row_ce = host(ce);
  return r;
}

}  // namespace

TEST(PackedDocuments, EachDocumentGetsWhatItGetsAlone) {
  ModelConfig cfg = small();
  cfg.aux_coef = 0;  // the router's batch-level losses couple the documents
  cfg.z_coef = 0;
  cfg.capacity_factor = 0;
  const std::int64_t T = cfg.seq_len, V = cfg.vocab_size;
  const std::vector<std::vector<int>> lengths{{5, 1, 7, 3}, {9, 4, 2}};  // each sequence's documents, 16 rows or fewer
  const auto docs = documents(lengths, V);
  const auto values = random_flat<double>(cfg, 31);
  double valid = 0;
  for (const auto& d : docs) valid += double(d.size()) - 1;

  // Packed: both sequences in one micro-batch; the second ends in padding
  // (a document of its own with no targets).
  HostBatch packed = empty(2, T);
  std::size_t k = 0;
  std::vector<std::pair<std::int64_t, std::int64_t>> where;  // (sequence, first row) of each document
  for (std::int64_t b = 0; b < 2; ++b) {
    std::int64_t row = 0;
    for (std::size_t j = 0; j < lengths[std::size_t(b)].size(); ++j, ++k) {
      put(packed, b, row, docs[k], true);
      where.emplace_back(b, row);
      row += std::int64_t(docs[k].size());
    }
    for (std::int64_t t = row; t < T; ++t) {
      packed.start[std::size_t(b * T + t)] = std::int32_t(row);
      packed.end[std::size_t(b * T + t)] = std::int32_t(T);
    }
  }
  StageModel<double> model(cfg);
  const Result p = run(model, cfg, values, packed, true, valid);

  // Alone: each document at the start of a sequence of its own, padded,
  // with the causal mask only (the padding comes after it).
  exa::View1<double> sum("sum", values.extent(0));
  double worst_loss = 0;
  for (std::size_t d = 0; d < docs.size(); ++d) {
    HostBatch one = empty(1, T);
    put(one, 0, 0, docs[d], false);
    const Result a = run(model, cfg, values, one, false, valid);
    {
      auto hs = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), sum);
      const auto ha = host(a.grads);
      for (std::size_t i = 0; i < ha.size(); ++i) hs(i) += ha[i];
      Kokkos::deep_copy(sum, hs);
    }
    double alone = 0, in_pack = 0;
    const auto [b, row] = where[d];
    for (std::size_t i = 0; i < docs[d].size(); ++i) {
      alone += a.row_ce[i];
      in_pack += p.row_ce[std::size_t(b * T + row) + i];
    }
    worst_loss = std::max(worst_loss, std::fabs(alone - in_pack) / std::max(1e-30, std::fabs(alone)));
  }
  // Gradients: worst over tensors of max |packed - sum| / max |sum|.
  const auto hp = host(p.grads), hs = host(sum);
  const auto specs = parameter_specs(cfg);
  const auto off = flat_offsets(specs);
  double worst_grad = 0;
  for (std::size_t i = 0; i < specs.size(); ++i) {
    double diff = 0, mag = 0;
    for (std::int64_t e = off[i]; e < off[i] + specs[i].numel(); ++e) {
      diff = std::max(diff, std::fabs(hp[std::size_t(e)] - hs[std::size_t(e)]));
      mag = std::max(mag, std::fabs(hs[std::size_t(e)]));
    }
    worst_grad = std::max(worst_grad, mag > 0 ? diff / mag : diff);
  }
  std::printf("packed vs one by one (%zu documents): worst per-document loss %.3e, worst gradient %.3e relative\n",
              docs.size(), worst_loss, worst_grad);
  EXPECT_LE(worst_loss, 1e-10);
  EXPECT_LE(worst_grad, 1e-10);
}

// Without the documents the same packed rows attend across documents, and
// the losses differ: the mask is what the exactness above rests on.
TEST(PackedDocuments, WithoutTheMaskDocumentsLeak) {
  ModelConfig cfg = small();
  cfg.aux_coef = 0;
  cfg.z_coef = 0;
  const std::int64_t T = cfg.seq_len;
  const auto docs = documents({{6, 10}}, cfg.vocab_size);
  const auto values = random_flat<double>(cfg, 32);
  HostBatch h = empty(1, T);
  put(h, 0, 0, docs[0], true);
  put(h, 0, 6, docs[1], true);
  StageModel<double> model(cfg);
  const Result masked = run(model, cfg, values, h, true, 14);
  const Result leaky = run(model, cfg, values, h, false, 14);
  double first = 0, second = 0;
  for (std::int64_t t = 0; t < 6; ++t) first = std::max(first, std::fabs(masked.row_ce[t] - leaky.row_ce[t]));
  for (std::int64_t t = 6; t < T; ++t) second = std::max(second, std::fabs(masked.row_ce[t] - leaky.row_ce[t]));
  EXPECT_LE(first, 1e-12);  // the first document sees nothing else either way
  EXPECT_GT(second, 1e-6);  // the second one's rows saw the first document
}

// Micro-batches of different shapes and valid-target counts (token
// budgets): with the step's count split evenly as each one's denominator
// (what the trainer passes), the mean of their losses is the mean over
// every valid target, computed here by hand from each row's
// cross-entropy, and the accumulated gradient is that mean's gradient
// (the same as one micro-batch holding every row, up to rounding).
TEST(PackedDocuments, TheStepLossIsTheMeanOverAllValidTargets) {
  ModelConfig cfg = small();
  cfg.aux_coef = 0;
  cfg.z_coef = 0;
  cfg.capacity_factor = 0;
  const auto values = random_flat<double>(cfg, 33);
  const auto docs = documents({{16, 16}, {7, 8, 5, 3}}, cfg.vocab_size);
  // A: 2 x 16, full documents (15 targets each); B: 4 x 8, shorter ones.
  HostBatch a = empty(2, 16), b = empty(4, 8);
  put(a, 0, 0, docs[0], false);
  put(a, 1, 0, docs[1], false);
  for (int r = 0; r < 4; ++r) put(b, r, 0, docs[std::size_t(2 + r)], false);
  const double n_valid = 15 + 15 + 6 + 7 + 4 + 2;  // 49
  const double denom = n_valid / 2;                  // two micro-batches share the step's count
  StageModel<double> model(cfg);
  const auto w = bind_flat(cfg, values);
  exa::View1<double> grads("grads", values.extent(0));
  const auto g = bind_flat(cfg, grads);
  double loss = 0, by_hand = 0;
  for (const HostBatch* h : {&a, &b}) {
    StageModel<double>::Input in;
    in.tokens = device(h->in, h->B, h->T);
    in.targets = device(h->tg, h->B, h->T);
    in.ce_denominator = denom;
    auto& c = model.forward(w, in);
    loss += c.result.loss.ce / 2;  // the trainer's mean over micro-batches
    model.backward(c, w, g, 0.5);  // and its backward seed
    exa::View1<double> ce("ce", h->B * h->T);
    model.eval(w, in, in.targets, ce);
    for (double x : host(ce)) by_hand += x;
  }
  by_hand /= n_valid;
  std::printf("token mean over two micro-batches: %.15f, by hand %.15f\n", loss, by_hand);
  EXPECT_NEAR(loss, by_hand, 1e-13 * by_hand);
  // The same rows as one micro-batch of 6 x 16 (B's sequences padded to
  // 16 rows) with its own mean: the same gradient.
  HostBatch all = empty(6, 16);
  for (int r = 0; r < 6; ++r) put(all, r, 0, docs[std::size_t(r)], false);
  const Result one = run(model, cfg, values, all, false, 0);
  const auto h1 = host(one.grads), h2 = host(grads);
  double diff = 0, mag = 0;
  for (std::size_t i = 0; i < h1.size(); ++i) {
    diff = std::max(diff, std::fabs(h1[i] - h2[i]));
    mag = std::max(mag, std::fabs(h1[i]));
  }
  EXPECT_LE(diff, 1e-12 * mag);
}
