#pragma once
// Vocabulary parallelism (docs/architecture.md, "Tensor parallelism"): the
// embedding [V,d] and the LM head [V,d] split on V over the TP group, rank r
// holding rows [r V/tp, (r+1) V/tp) of both (the same rows when tied).
//
//   embedding  each rank looks up the ids of its own rows (0 elsewhere) and
//              the pieces are summed; the backward scatters the (replicated)
//              output gradient into its own rows, no communication (under
//              sequence parallelism a reduce-scatter, and an allgather of
//              the gradient).
//   loss head  logits over this rank's columns only; the row max (a max
//              allreduce), then the sum of exponentials and the target logit
//              (one sum allreduce of both) make the cross-entropy, so the
//              full logits are never gathered. The backward is the softmax
//              minus the one-hot on the own columns, then the head's
//              column-parallel input gradient (allreduced).
#include <memory>

#include "core/error.hpp"
#include "model/seams/embedding_lookup.hpp"
#include "model/seams/linear.hpp"
#include "model/seams/lora_ops.hpp"
#include "model/seams/loss_head.hpp"
#include "parallel/tensor/tp_comm.hpp"
#include "parallel/tensor/vocab_kernels.hpp"

namespace exa::parallel::tensor {

template <class T, class D = Device>
class VocabParallelEmbedding final : public model::EmbeddingLookup<T, D> {
 public:
  using typename model::EmbeddingLookup<T, D>::V2;
  using typename model::EmbeddingLookup<T, D>::Ids;
  using typename model::EmbeddingLookup<T, D>::W2;
  using typename model::EmbeddingLookup<T, D>::Adapter;

  VocabParallelEmbedding(std::shared_ptr<const TpComm> tp, std::int64_t vocab_begin)
      : tp_(std::move(tp)), v0_(vocab_begin) {}

  // Under sequence parallelism out holds this rank's rows of the sequence:
  // the pieces are reduce-scattered instead of allreduced. An adapter's B
  // is split by vocabulary like the table: its rows of this rank's tokens
  // times A join the piece before the reduction.
  void forward(const Ids& tokens, const W2& table, const V2& out, const Adapter& ad = {}) const override {
    const std::size_t n = tokens.extent(0);
    const V2 piece = out.extent(0) == n ? out : rows(n, out.extent(1));
    vocab::lookup(table, tokens, v0_, piece);
    if (ad) model::lora::table_forward(rows_of_b(tokens, ad), ad, piece);
    if (out.extent(0) == n) {
      tp_->allreduce(out);
      return;
    }
    auto r = tp_->ireduce_scatter_rows(piece, out);
    TpComm::wait(r);
  }
  // The adapter's dA from this rank's tokens only (B's rows of the others
  // are zero here): a partial sum the TP gradient reduction adds up.
  void backward(const Ids& tokens, const V2& dout, const W2& dtable, const Adapter& ad = {}) const override {
    const std::size_t n = tokens.extent(0);
    if (dtable.data() == nullptr && !ad) return;  // frozen, no adapter
    V2 full = dout;
    if (dout.extent(0) != n) {
      full = rows(n, dout.extent(1));
      tp_->allgather_rows(dout, full);
    }
    if (dtable.data() != nullptr) vocab::scatter_add(tokens, full, v0_, dtable);
    if (!ad) return;
    const auto g = model::lora::table_backward(rows_of_b(tokens, ad), full, ad, lora_);
    vocab::scatter_add(tokens, g, v0_, ad.db);
  }

 private:
  V2 rows(std::size_t n, std::size_t d) const {
    if (full_.extent(0) != n || full_.extent(1) != d) full_ = V2("exa::tp::embedding_rows", n, d);
    return full_;
  }
  // B's rows of this rank's tokens, zero for the others [N, r].
  typename model::Linear<T, D>::Act rows_of_b(const Ids& tokens, const Adapter& ad) const {
    const auto hb = model::lora::scratch(lora_.h, tokens.extent(0), ad.b.extent(1));
    vocab::lookup(ad.b, tokens, v0_, hb);
    return hb;
  }
  std::shared_ptr<const TpComm> tp_;
  std::int64_t v0_;
  mutable V2 full_;
  mutable model::lora::Scratch<T, D> lora_;  // the adapter's products
};

template <class T, class D = Device>
class VocabParallelLossHead final : public model::LossHead<T, D> {
 public:
  using typename model::LossHead<T, D>::V1;
  using typename model::LossHead<T, D>::V2;
  using typename model::LossHead<T, D>::W2;
  using typename model::LossHead<T, D>::Adapter;
  using Context = model::StageContext<T, D>;

  // `column`: the column-parallel Linear of the same TP group.
  VocabParallelLossHead(std::shared_ptr<const TpComm> tp, std::shared_ptr<const model::Linear<T, D>> column,
                        std::int64_t vocab_begin)
      : tp_(std::move(tp)), proj_(std::move(column)), v0_(vocab_begin) {}

  kernels::CrossEntropySum forward(Context& c, const W2& w, const Adapter& ad = {}) const override {
    proj_->forward(c.hf, w, c.logits, false, ad);
    kernels::CrossEntropySum s;
    s.loss_sum = reduce_ce(c, V1());
    s.n_valid = valid(c);
    return s;
  }
  void backward(Context& c, const W2& w, double loss_scale, const V2& dhf, const W2& dw,
                const Adapter& ad = {}) const override {
    if (c.distill.on())
      kernels::distill::ce_grad(c.logits, c.targets, c.ce_lse, c.distill.lse, c.distill.teacher.probs, c.distill.tau,
                                c.distill.coef, v0_, loss_scale, c.n_valid);
    else
      vocab::grad(c.logits, c.targets, c.ce_lse, v0_, loss_scale, c.n_valid);
    proj_->backward(c.hf, w, c.logits, dhf, dw, false, ad);
  }
  void eval(Context& c, const W2& w, const V1& ce, const Adapter& ad = {}) const override {
    proj_->forward(c.hf, w, c.logits, false, ad);
    reduce_ce(c, ce);
  }
  void project(Context& c, const W2& w, const Adapter& ad = {}) const override {
    proj_->forward(c.hf, w, c.logits, false, ad);
  }
  // Distillation: the tempered softmax's max and sums reduce over the TP
  // group like the cross-entropy's; so does the KL of each rank's columns.
  void soft_targets(const Context& c, double tau, const model::SoftTargets<T, D>& out) const override {
    model::distill::soft_targets(c, tau, out, max_over_tp(), sum_over_tp());
  }
  double distill(Context& c) const override {
    Kokkos::View<double*, Layout, D> kl("exa::distill::kl", 1);
    Kokkos::deep_copy(kl, model::distill::kl(c, max_over_tp(), sum_over_tp()));
    tp_->allreduce(kl);
    return Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), kl)(0);
  }
  void logits(const V2& h, const W2& w, const V2& out, const Adapter& ad = {}) const override {
    const std::int64_t b = h.extent(0), vl = w.extent(0), p = tp_->size();
    EXA_REQUIRE(std::int64_t(out.extent(0)) == b && std::int64_t(out.extent(1)) == vl * p,
                "VocabParallelLossHead::logits: out is {}x{}, expected {}x{}", out.extent(0), out.extent(1), b,
                vl * p);
    V2 mine("exa::tp::logits_piece", b, vl);
    proj_->forward(h, w, mine, false, ad);
    Kokkos::View<T*, Layout, D> all("exa::tp::logits_all", std::size_t(b * vl * p));
    Kokkos::fence();
    {
      ScopedRegion region("comm/tp_allgather");
      tp_->comm().allgather(Kokkos::View<T*, Layout, D>(mine.data(), std::size_t(b * vl)), all);
    }
    vocab::interleave(all, p, out);
  }

  // Public only because nvcc's extended lambdas cannot live in private
  // member functions.
  static index_t valid(const Context& c) {
    const auto t = c.targets;
    index_t n = 0;
    Kokkos::parallel_reduce(
        "exa::tp::ce_valid", Kokkos::RangePolicy<exec_of<decltype(t)>>(0, t.extent(0)),
        KOKKOS_LAMBDA(const index_t i, index_t& acc) { acc += t(i) >= 0 ? 1 : 0; }, n);
    return n;
  }

 private:
  auto max_over_tp() const {
    return [this](const V1& mx) { tp_->allreduce(mx, comm::ReduceOp::Max); };
  }
  auto sum_over_tp() const {
    return [this](const Kokkos::View<double*, Layout, D>& s) { tp_->allreduce(s); };
  }
  // c.ce_lse and the sum of the rows' cross-entropy (ce filled per row when
  // given).
  double reduce_ce(Context& c, const V1& ce) const {
    const std::size_t n = c.logits.extent(0);
    if (mx_.extent(0) != n) {
      mx_ = V1("exa::tp::ce_max", n);
      parts_ = Kokkos::View<double*, Layout, D>("exa::tp::ce_parts", 2 * n);
    }
    vocab::row_max(c.logits, mx_);
    tp_->allreduce(mx_, comm::ReduceOp::Max);
    vocab::row_parts(c.logits, mx_, c.targets, v0_, parts_);
    tp_->allreduce(parts_);
    return vocab::finish(mx_, c.targets, parts_, c.ce_lse, ce);
  }

  std::shared_ptr<const TpComm> tp_;
  std::shared_ptr<const model::Linear<T, D>> proj_;
  std::int64_t v0_;
  mutable V1 mx_;
  mutable Kokkos::View<double*, Layout, D> parts_;
};

}  // namespace exa::parallel::tensor
