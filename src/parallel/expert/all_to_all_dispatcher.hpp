#pragma once
// AllToAllDispatcher: the TokenDispatcher of expert parallelism
// (docs/architecture.md, "Expert parallelism"). The ep ranks of an EP group
// hold E/ep consecutive experts each; every rank routes its own tokens over
// all E experts, exactly as one rank would (capacity and drops are decided
// here, at the source, per micro-batch), and then:
//
//   forward   permute by expert (= by destination rank, then expert)
//             exchange the per-expert row counts (a small all-to-all)
//             all-to-all-v of the rows; regroup the received rows by local
//             expert; one grouped GEMM per local expert (SwiGLU);
//             regroup by source; all-to-all-v back; gate-weighted unpermute
//   backward  the mirror image: unpermute backward, all-to-all-v of the row
//             gradients, grouped backward (the expert weight gradients of
//             this rank's experts, summed over the group's tokens), all-to-all-v
//             back, permute backward
//
// Every rank takes part in every exchange, whatever it sends or receives:
// zero-row messages and experts with no rows are ordinary paths, so skewed
// routing cannot leave a rank out of a collective.
#include <map>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "comm/communicator.hpp"
#include "comm/hierarchical.hpp"
#include "comm/hierarchical_alltoallv.hpp"
#include "comm/traffic_ledger.hpp"
#include "kernels/wire_codec.hpp"
#include "core/error.hpp"
#include "core/profiling.hpp"
#include "core/trace.hpp"
#include "kernels/convert.hpp"
#include "kernels/gemm.hpp"
#include "kernels/permute.hpp"
#include "kernels/swiglu.hpp"
#include "model/seams/lora_ops.hpp"
#include "model/seams/token_dispatcher.hpp"
#include "parallel/expert/expert_exchange.hpp"
#include "parallel/expert/expert_placement.hpp"

namespace exa::parallel::expert {

template <class T, class D = Device>
class AllToAllDispatcher final : public model::TokenDispatcher<T, D> {
 public:
  using typename model::TokenDispatcher<T, D>::V2;
  using Context = model::LayerContext<T, D>;
  using Weights = model::LayerWeights<T, D>;
  using H2 = typename Context::H2;

  // `counts`: an MPI communicator over the EP group (host counts); `rows`:
  // the same group, MPI or NCCL, for the token rows. This rank is
  // counts->rank() of the group and holds experts
  // [rank * n_experts / size, (rank + 1) * n_experts / size). `hierarchical`
  // (comm.hierarchical_a2a), when given, moves the rows in two stages over
  // the group's node-local and inter-node communicators instead. With a
  // `placement` (expert re-placement) those are physical slots, and each
  // layer's experts go to the slots its placement gives them.
  AllToAllDispatcher(std::shared_ptr<comm::Communicator> counts, std::shared_ptr<comm::Communicator> rows,
                     int n_experts, std::shared_ptr<comm::HierarchicalComms> hierarchical = {},
                     std::shared_ptr<const ExpertPlacement> placement = {})
      : counts_(std::move(counts)),
        rows_(std::move(rows)),
        hier_(std::move(hierarchical)),
        placement_(std::move(placement)),
        n_experts_(n_experts) {
    const int P = counts_->size();
    EXA_REQUIRE(P >= 1 && n_experts % P == 0 && rows_->size() == P && rows_->rank() == counts_->rank(),
                "AllToAllDispatcher: {} experts over {} expert-parallel ranks (the rows' group has {})", n_experts,
                P, rows_->size());
    local_experts_ = n_experts / P;
  }

  // comm.a2a_compression: the token rows (dispatch, combine and their
  // backward) travel encoded (kernels/wire_codec.hpp), each destination's
  // rows as one payload, the rank's own too, so that every row sees the
  // same rounding wherever its expert sits; the hierarchical all-to-all
  // moves the payloads through both its stages. Float rows on the default
  // device only.
  void set_wire_codec(kernels::WireCodec codec) {
    EXA_REQUIRE(codec.format() == kernels::WireFormat::F32 || kFloatRows,
                "comm.a2a_compression = \"{}\" needs float token rows on the default device",
                kernels::wire_format_name(codec.format()));
    codec_ = codec;
  }

  int ranks() const { return counts_->size(); }
  int local_experts() const { return local_experts_; }

  using typename model::TokenDispatcher<T, D>::Meanwhile;

  void forward(Context& c, const Weights& w, std::int64_t capacity, const V2& xn, const V2& y,
               const Meanwhile& meanwhile = {}) override {
    namespace K = kernels;
    EXA_REQUIRE(index_t(w.w1.extent(0)) == local_experts_,
                "AllToAllDispatcher: the weights hold {} experts, this rank's share is {}", w.w1.extent(0),
                local_experts_);
    // The plan orders rows by slot; capacity drops stay per expert in token
    // order, so a placement changes no decision.
    K::permute_plan(c.plan, slot_topk(c), n_experts_, capacity, exec_of<decltype(c.topk)>{}, c.capacity_keep);
    const index_t d = xn.extent(1);
    // The rows leave in fp32 (the exchange and its codec take fp32 rows);
    // backward needs the received ones only, so the send buffer is scratch.
    grow(send_, index_t(c.topk.extent(0) * c.topk.extent(1)), d, "exa::ep::send_rows");
    const auto xp = rows(send_, c.plan.rows);
    K::permute_forward(xn, c.plan.token_of, xp);
    exchange_counts(c, d);
    const index_t R = c.exchange.received, F = w.w1.extent(1);
    const bool b16 = model::experts_in_bf16(w);
    if (b16) {
      grow(c.xr16, R, d, "exa::ep::xr16");
      grow(c.ea16, R, F, "exa::model::ea16");
      grow(c.eb16, R, F, "exa::model::eb16");
      grow(c.eh16, R, F, "exa::model::eh16");
    } else {
      grow(c.xr, R, d, "exa::ep::xr");
      grow(c.ea, R, F, "exa::model::ea");
      grow(c.eb, R, F, "exa::model::eb");
      grow(c.eh, R, F, "exa::model::eh");
    }
    ensure_scratch(R, std::int64_t(send_.extent(0)), d, F, b16);
    const auto yp = rows(c.yp, c.plan.rows);
    if (!c.exchange.parts.empty()) {
      pipeline_parts(c, xp, yp, meanwhile, [&](const auto& part, const I1& expert_row, const I1& source_row) {
        experts_forward(c, w, part.first, part.received, part.expert_offsets, expert_row, source_row);
      });
    } else {
      const auto src = rows(source_, R), ye = rows(expert_, R);
      if (meanwhile) meanwhile();  // a blocking exchange: nothing to overlap
      {
        ScopedRegion r("comm/all_to_all");
        send(xp, c.exchange.send_rows, src, c.exchange.recv_rows);
      }
      experts_forward(c, w, 0, R, c.exchange.expert_offsets, first(c.exchange.expert_row, R),
                      first(c.exchange.source_row, R));
      {
        ScopedRegion r("comm/all_to_all");
        send(src, c.exchange.recv_rows, yp, c.exchange.send_rows);
      }
    }
    K::unpermute_forward(yp, c.gates, c.plan.row_of, y);
  }

  void backward(Context& c, const Weights& w, const Weights& g, const V2& dy, const V2& dxn,
                const V2& dgates, const Meanwhile& meanwhile = {}) override {
    namespace K = kernels;
    const index_t R = c.exchange.received, M = c.plan.rows;
    const auto dyp = rows(dyp_, M), dxp = rows(dxp_, M);
    K::unpermute_backward(dy, rows(c.yp, M), c.gates, c.plan.row_of, dyp, dgates);
    if (c.shared_cheap) {  // selective recompute
      if (model::experts_in_bf16(w))
        K::swiglu_forward(rows(c.ea16, R), rows(c.eb16, R), rows(c.eh16, R));
      else
        K::swiglu_forward(rows(c.ea, R), rows(c.eb, R), rows(c.eh, R));
    }
    if (!c.exchange.parts.empty()) {
      // Each part's input-row gradients travel back while its experts'
      // weight gradients, which nothing in the exchange waits for, run.
      pipeline_parts(
          c, dyp, dxp, meanwhile,
          [&](const auto& part, const I1& expert_row, const I1& source_row) {
            experts_backward_inputs(c, w, g, part.first, part.received, part.expert_offsets, expert_row,
                                    source_row, rows(dxe_, part.received, part.first), false);
          },
          [&](const auto& part) {
            ScopedRegion r("moe/overlapped/weight_gradients");
            experts_backward_weights(c, w, g, part.first, part.received, part.expert_offsets);
          });
    } else {
      const auto src = rows(source_, R);
      if (meanwhile) meanwhile();
      {
        ScopedRegion r("comm/all_to_all");
        send(dyp, c.exchange.send_rows, src, c.exchange.recv_rows);
      }
      experts_backward(c, w, g, 0, R, c.exchange.expert_offsets, first(c.exchange.expert_row, R),
                       first(c.exchange.source_row, R));
      {
        ScopedRegion r("comm/all_to_all");
        send(src, c.exchange.recv_rows, dxp, c.exchange.send_rows);
      }
    }
    K::permute_backward(dxp, c.plan.row_of, dxn);  // overwrites dxn
  }

  // moe.a2a_chunks: the number of parts the exchange is cut into (1: one
  // blocking exchange). Parts overlap the next part's dispatch and the
  // previous part's combine with this part's experts, flat or
  // hierarchical, compressed or not.
  void set_chunks(int chunks) {
    EXA_REQUIRE(chunks >= 1, "moe.a2a_chunks = {} must be at least 1", chunks);
    chunks_ = chunks;
  }

  std::size_t scratch_bytes() const override {
    std::size_t n = 0;
    for (const V2* v : {&send_, &source_, &expert_, &dyp_, &dxp_, &dea_, &deb_, &deh_, &dxe_}) n += v->span();
    return n * sizeof(T) + (dea16_.span() + deb16_.span()) * sizeof(bf16);
  }
  bool stores_bf16() const override { return true; }
  bool keeps_permuted_rows() const override { return false; }

  // Public only because nvcc's extended lambdas cannot live in private
  // member functions.
  using I1 = Kokkos::View<int*, Layout, D>;
  using I2 = Kokkos::View<int**, Layout, D>;

  // The router's choices, or them mapped to physical slots when the layer's
  // placement is not the identity (c.exchange.slot_of says which).
  I2 slot_topk(Context& c) {
    c.exchange.slot_of.clear();
    if (!placement_ || placement_->is_identity(c.exchange.layer)) return c.topk;
    c.exchange.slot_of = placement_->slot_of(c.exchange.layer);
    auto& table = slot_tables_[c.exchange.layer];
    if (table.version != placement_->version() || table.slot.extent(0) == 0) {
      to_device(table.slot, c.exchange.slot_of, "exa::ep::slot_of");
      table.version = placement_->version();
    }
    if (slot_topk_.extent(0) != c.topk.extent(0) || slot_topk_.extent(1) != c.topk.extent(1))
      slot_topk_ = I2(Kokkos::view_alloc(Kokkos::WithoutInitializing, std::string("exa::ep::slot_topk")),
                      c.topk.extent(0), c.topk.extent(1));
    const auto topk = c.topk, out = slot_topk_;
    const auto slot = table.slot;
    const int K = int(topk.extent(1));
    Kokkos::parallel_for(
        "exa::ep::slot_topk", Kokkos::RangePolicy<typename D::execution_space>(0, topk.extent(0) * K),
        KOKKOS_LAMBDA(const std::size_t a) { out(a / K, a % K) = slot(topk(a / K, a % K)); });
    return out;
  }

 private:
  // Rows [at, at + n) of a buffer (the first n by default).
  template <class V>
  static V rows(const V& v, index_t n, index_t at = 0) {
    return Kokkos::subview(v, Kokkos::make_pair(at, at + n), Kokkos::ALL);
  }
  // The first R entries of a row map (the maps keep the largest size seen).
  static Kokkos::View<int*, Layout, D> first(const Kokkos::View<int*, Layout, D>& v, index_t n) {
    return Kokkos::subview(v, Kokkos::make_pair(index_t(0), n));
  }

  // Buffers keep the largest shape seen: the received rows vary with the
  // routing from one micro-batch to the next.
  template <class V>
  static void grow(V& v, index_t n, index_t width, const char* name) {
    if (index_t(v.extent(0)) >= n && index_t(v.extent(1)) == width) return;
    v = V(Kokkos::view_alloc(Kokkos::WithoutInitializing, std::string(name)), std::max<index_t>(n, 1), width);
  }

  // b16: the gradients of ea and eb in bf16 (the products they feed round
  // them so anyway), else fp32.
  void ensure_scratch(index_t received, index_t sent, index_t d, index_t F, bool b16) {
    grow(source_, received, d, "exa::ep::source_rows");
    grow(expert_, received, d, "exa::ep::expert_rows");
    grow(dyp_, sent, d, "exa::ep::dyp");
    grow(dxp_, sent, d, "exa::ep::dxp");
    if (b16) {
      grow(dea16_, received, F, "exa::ep::dea16");
      grow(deb16_, received, F, "exa::ep::deb16");
    } else {
      grow(dea_, received, F, "exa::ep::dea");
      grow(deb_, received, F, "exa::ep::deb");
    }
    grow(deh_, received, F, "exa::ep::deh");
    if (chunks_ > 1) grow(dxe_, received, d, "exa::ep::dxe");  // the parts' input-row gradients
  }

  // Rows per global expert from the plan, the counts all-to-all, and the
  // layer's exchange plan (kept in the context for the backward).
  void exchange_counts(Context& c, index_t d) {
    ScopedRegion region("comm/all_to_all_counts");
    const int P = ranks(), El = local_experts_;
    const auto& o = c.plan.offsets_host;
    auto& x = c.exchange;
    x.send_counts.resize(std::size_t(P * El));
    x.recv_counts.assign(std::size_t(P * El), 0);
    for (int e = 0; e < n_experts_; ++e) x.send_counts[std::size_t(e)] = o(e + 1) - o(e);
    std::vector<int> n(static_cast<std::size_t>(P), El), at(static_cast<std::size_t>(P), 0);
    for (int s = 0; s < P; ++s) at[std::size_t(s)] = s * El;
    counts_->alltoallv(x.send_counts.data(), n, at, x.recv_counts.data(), n, at, comm::DType::I64);
    ExchangePlan p = plan_exchange(x.send_counts, x.recv_counts, P, El, d);
    x.send_rows = std::move(p.send_rows);
    x.recv_rows = std::move(p.recv_rows);
    x.expert_offsets = std::move(p.expert_offsets);
    x.received = p.received;
    if (chunks_ == 1) {
      to_device(x.expert_row, p.expert_row, "exa::ep::expert_row");
      to_device(x.source_row, p.source_row, "exa::ep::source_row");
      x.parts.clear();
      return;
    }
    // In parts, only the parts' maps are read.
    const auto parts = plan_chunks(x.send_counts, x.recv_counts, P, El, d, chunks_);
    x.parts.resize(parts.size());
    for (std::size_t k = 0; k < parts.size(); ++k) {
      auto& part = x.parts[k];
      part.send_rows = parts[k].plan.send_rows;
      part.recv_rows = parts[k].plan.recv_rows;
      part.send_at = parts[k].send_at;
      part.recv_at = parts[k].recv_at;
      part.expert_offsets = parts[k].plan.expert_offsets;
      part.first = parts[k].first;
      part.received = parts[k].plan.received;
      to_device(part.expert_row, parts[k].plan.expert_row, "exa::ep::part_expert_row");
      to_device(part.source_row, parts[k].plan.source_row, "exa::ep::part_source_row");
    }
  }

  // The experts on received rows [at, at + n) (one part, or all of R):
  // source-major rows in source_ to expert-major xr, the SwiGLU experts
  // (and their adapters) into ea, eb, eh and expert_, and the results back
  // to source-major order in source_, ready to return.
  void experts_forward(Context& c, const Weights& w, index_t at, index_t n, const std::vector<index_t>& off,
                       const I1& expert_row, const I1& source_row) {
    namespace K = kernels;
    const auto src = rows(source_, n, at), ye = rows(expert_, n, at);
    c.mark_experts_used(off);
    if constexpr (std::is_same<T, float>::value) {
      if (model::experts_in_bf16(w)) {
        // As the local dispatcher: xr as the products round it, ea and eb
        // rounded once after their products (through deh_, free until
        // backward), eh from them.
        const auto xr = rows(c.xr16, n, at), ea = rows(c.ea16, n, at), eb = rows(c.eb16, n, at),
                   eh = rows(c.eh16, n, at);
        const auto product = rows(deh_, n, at);
        K::permute_forward(src, expert_row, xr);
        K::grouped_linear_forward(xr, w.w1, off, product);
        K::fp32_to_bf16(product, ea);
        K::grouped_linear_forward(xr, w.w3, off, product);
        K::fp32_to_bf16(product, eb);
        K::swiglu_forward(ea, eb, eh);
        K::grouped_linear_forward(eh, w.w2, off, ye);
        K::permute_forward(ye, source_row, src);
        return;
      }
    }
    const auto xr = rows(c.xr, n, at), ea = rows(c.ea, n, at), eb = rows(c.eb, n, at), eh = rows(c.eh, n, at);
    K::permute_forward(src, expert_row, xr);
    K::grouped_linear_forward(xr, w.w1, off, ea);
    K::grouped_linear_forward(xr, w.w3, off, eb);
    // Each expert's adapters live with it (LoRA), their input dropout keyed
    // per projection.
    const double p = w.lora_dropout;
    const auto key = [&](std::uint64_t proj) { return model::lora::key(c.lora_key, proj); };
    if (w.lora_w1.a.data()) {
      model::lora::grouped_forward<T, D>(xr, w.lora_w1, w.lora_scale, off, ea, lora_, p, key(101));
      model::lora::grouped_forward<T, D>(xr, w.lora_w3, w.lora_scale, off, eb, lora_, p, key(103));
    }
    if constexpr (std::is_same<T, float>::value) {
      // Stored in fp32, ea and eb hold what bf16 storage would
      // (TokenDispatcher::stores_bf16): every layout computes alike.
      if (K::matmul_precision() == K::MatmulPrecision::bf16) {
        K::round_through_bf16(ea);
        K::round_through_bf16(eb);
      }
    }
    K::swiglu_forward(ea, eb, eh);
    K::grouped_linear_forward(eh, w.w2, off, ye);
    if (w.lora_w2.a.data())
      model::lora::grouped_forward<T, D>(eh, w.lora_w2, w.lora_scale, off, ye, lora_, p, key(102));
    K::permute_forward(ye, source_row, src);
  }

  // The mirror image on received rows [at, at + n): the row gradients in
  // source_ (source-major), the experts' weight gradients (accumulated),
  // and the input-row gradients back in source_.
  void experts_backward(Context& c, const Weights& w, const Weights& g, index_t at, index_t n,
                        const std::vector<index_t>& off, const I1& expert_row, const I1& source_row) {
    // dye is dead once deh is computed: the input-row gradients reuse it.
    experts_backward_inputs(c, w, g, at, n, off, expert_row, source_row, rows(expert_, n, at), true);
  }

  // The input-row gradients into dxe and back in source_; with `weights`
  // the experts' weight gradients too, in the same products. Without, they
  // are left to experts_backward_weights (the parts pipeline runs them
  // while the part travels back), and dxe must not be the row gradients'
  // rows, which those read; each tensor still accumulates in the same
  // order. The adapters' gradients are always here: they feed dxe.
  void experts_backward_inputs(Context& c, const Weights& w, const Weights& g, index_t at, index_t n,
                               const std::vector<index_t>& off, const I1& expert_row, const I1& source_row,
                               const V2& dxe, bool weights) {
    namespace K = kernels;
    const auto src = rows(source_, n, at), dye = rows(expert_, n, at), deh = rows(deh_, n, at);
    const auto here = [weights](const auto& dw) { return weights ? dw : std::decay_t<decltype(dw)>(); };
    K::permute_forward(src, expert_row, dye);
    if constexpr (std::is_same<T, float>::value) {
      if (model::experts_in_bf16(w)) {
        const auto dea = rows(dea16_, n, at), deb = rows(deb16_, n, at);
        const auto xr = rows(c.xr16, n, at), ea = rows(c.ea16, n, at), eb = rows(c.eb16, n, at),
                   eh = rows(c.eh16, n, at);
        K::grouped_linear_backward(eh, w.w2, dye, off, deh, here(g.w2), true);
        K::swiglu_backward(ea, eb, deh, dea, deb);
        K::grouped_linear_backward(xr, w.w1, dea, off, dxe, here(g.w1), true, false);
        K::grouped_linear_backward(xr, w.w3, deb, off, dxe, here(g.w3), true, true);
        K::permute_forward(dxe, source_row, src);
        return;
      }
    }
    const auto dea = rows(dea_, n, at), deb = rows(deb_, n, at);
    const auto xr = rows(c.xr, n, at), ea = rows(c.ea, n, at), eb = rows(c.eb, n, at), eh = rows(c.eh, n, at);
    const bool ad = w.lora_w1.a.data() != nullptr;
    const double s = w.lora_scale, p = w.lora_dropout;
    const auto key = [&](std::uint64_t proj) { return model::lora::key(c.lora_key, proj); };
    K::grouped_linear_backward(eh, w.w2, dye, off, deh, here(g.w2), true);
    if (ad) model::lora::grouped_backward<T, D>(eh, w.lora_w2, g.lora_w2, s, dye, off, deh, lora_, p, key(102));
    K::swiglu_backward(ea, eb, deh, dea, deb);
    K::grouped_linear_backward(xr, w.w1, dea, off, dxe, here(g.w1), true, false);
    K::grouped_linear_backward(xr, w.w3, deb, off, dxe, here(g.w3), true, true);
    if (ad) {
      model::lora::grouped_backward<T, D>(xr, w.lora_w1, g.lora_w1, s, dea, off, dxe, lora_, p, key(101));
      model::lora::grouped_backward<T, D>(xr, w.lora_w3, g.lora_w3, s, deb, off, dxe, lora_, p, key(103));
    }
    K::permute_forward(dxe, source_row, src);
  }

  void experts_backward_weights(Context& c, const Weights& w, const Weights& g, index_t at, index_t n,
                                const std::vector<index_t>& off) {
    namespace K = kernels;
    const auto dye = rows(expert_, n, at);
    const V2 none;  // no input gradient in this half
    if constexpr (std::is_same<T, float>::value) {
      if (model::experts_in_bf16(w)) {
        const auto xr = rows(c.xr16, n, at), eh = rows(c.eh16, n, at);
        K::grouped_linear_backward(eh, w.w2, dye, off, none, g.w2, true);
        K::grouped_linear_backward(xr, w.w1, rows(dea16_, n, at), off, none, g.w1, true);
        K::grouped_linear_backward(xr, w.w3, rows(deb16_, n, at), off, none, g.w3, true);
        return;
      }
    }
    const auto dea = rows(dea_, n, at), deb = rows(deb_, n, at);
    const auto xr = rows(c.xr, n, at), eh = rows(c.eh, n, at);
    K::grouped_linear_backward(eh, w.w2, dye, off, none, g.w2, true);
    K::grouped_linear_backward(xr, w.w1, dea, off, none, g.w1, true);
    K::grouped_linear_backward(xr, w.w3, deb, off, none, g.w3, true);
  }

  // One part's rows on their way: rows [out_at[r], + out[r]) of `from` to
  // each rank r, into rows [in_at[s], + in[s]) of `to` from each rank s.
  comm::Request post_part(const V2& from, const std::vector<int>& out, const std::vector<int>& out_at, const V2& to,
                          const std::vector<int>& in, const std::vector<int>& in_at) {
    const std::int64_t d = from.extent(1);
    if constexpr (kFloatRows) {
      if (codec_.format() != kernels::WireFormat::F32) return post_part_encoded(from, out, out_at, to, in, in_at);
    }
    const std::size_t P = out.size();
    std::vector<int> sc(P), sd(P), rc(P), rd(P);
    std::int64_t leaving = 0;
    for (std::size_t r = 0; r < P; ++r) {
      sc[r] = int(out[r] * d);
      sd[r] = int(out_at[r] * d);
      rc[r] = int(in[r] * d);
      rd[r] = int(in_at[r] * d);
      if (int(r) != rows_->rank()) leaving += out[r];
    }
    comm::TrafficLedger::sent(comm::Traffic::ExpertA2a, double(leaving) * double(d) * sizeof(T));
    using Flat = Kokkos::View<T*, Layout, D, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
    const Flat a(from.data(), from.span()), b(to.data(), to.span());
    Kokkos::fence();  // the rows are written by kernels the host does not wait for otherwise
    if (hier_) return comm::ihierarchical_alltoallv(*hier_, a, sc, sd, b, rc, rd);
    return rows_->ialltoallv(a, sc, sd, b, rc, rd);
  }

  // moe.a2a_chunks: part k's rows travel from `from` to source_ while part
  // k - 1's `compute` runs, and part k - 1's results travel back from
  // source_ into `to` while part k's run. The sender's rows of a part sit
  // at the same permuted rows going and coming back; the receiver's part
  // is rows [first, + received) of R. The waits are the exposed exchange
  // time (region comm/all_to_all). `meanwhile` runs once, while the first
  // part travels (region moe/overlapped); `after_post` after each part's
  // results left, while they travel.
  struct Nothing {
    template <class Part>
    void operator()(const Part&) const {}
  };
  template <class Compute, class AfterPost = Nothing>
  void pipeline_parts(Context& c, const V2& from, const V2& to, const Meanwhile& meanwhile, Compute&& compute,
                      AfterPost&& after_post = {}) {
    const auto& parts = c.exchange.parts;
    const std::size_t n = parts.size();
    part_words_next_ = 0;
    std::vector<comm::Request> there(n), back(n);
    // When each part was posted: the trace's in-flight intervals.
    std::vector<double> there_at(n), back_at(n);
    const auto post_there = [&](std::size_t k) {
      there_at[k] = wall_seconds();
      return post_part(from, parts[k].send_rows, parts[k].send_at, source_, parts[k].recv_rows, parts[k].recv_at);
    };
    there[0] = post_there(0);
    if (meanwhile) {
      // The caller's independent work while the first part travels.
      ScopedRegion r("moe/overlapped");
      meanwhile();
    }
    for (std::size_t k = 0; k < n; ++k) {
      const auto& part = parts[k];
      {
        ScopedRegion r("comm/all_to_all");
        there[k].wait();
      }
      Trace::span("comm/all_to_all/part in flight", there_at[k], wall_seconds());
      if (k + 1 < n) there[k + 1] = post_there(k + 1);
      compute(part, first(part.expert_row, part.received), first(part.source_row, part.received));
      back_at[k] = wall_seconds();
      back[k] = post_part(source_, part.recv_rows, part.recv_at, to, part.send_rows, part.send_at);
      after_post(part);
    }
    {
      ScopedRegion r("comm/all_to_all");
      comm::wait_all(back);
    }
    for (std::size_t k = 0; k < n; ++k) Trace::span("comm/all_to_all/part in flight", back_at[k], wall_seconds());
  }

  static void to_device(Kokkos::View<int*, Layout, D>& v, const std::vector<int>& h, const char* name) {
    if (v.extent(0) < h.size()) v = Kokkos::View<int*, Layout, D>(std::string(name), h.size());
    const Kokkos::View<const int*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>> hv(h.data(),
                                                                                                  h.size());
    Kokkos::deep_copy(Kokkos::subview(v, Kokkos::make_pair(std::size_t(0), h.size())), hv);
  }

  // All-to-all-v of whole rows: `from` holds the rows for each rank back to
  // back (out[r] of them for rank r), `to` receives in[s] rows from each s.
  void send(const V2& from, const std::vector<int>& out, const V2& to, const std::vector<int>& in) {
    const std::int64_t d = from.extent(1);
    const auto o = row_messages(out, d), i = row_messages(in, d);
    using Flat = Kokkos::View<T*, Layout, D, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
    const Flat a(from.data(), from.extent(0) * from.extent(1)), b(to.data(), to.extent(0) * to.extent(1));
    Kokkos::fence();  // the rows are written by kernels the host does not wait for otherwise
    if constexpr (kFloatRows) {
      if (codec_.format() != kernels::WireFormat::F32) return send_encoded(a, out, b, in, d);
    }
    std::int64_t leaving = 0;
    for (int r = 0; r < int(out.size()); ++r)
      if (r != rows_->rank()) leaving += out[std::size_t(r)];
    comm::TrafficLedger::sent(comm::Traffic::ExpertA2a, double(leaving) * double(d) * sizeof(T));
    if (hier_) {
      comm::hierarchical_alltoallv(*hier_, a, o.counts, o.displs, b, i.counts, i.displs);
    } else {
      rows_->alltoallv(a, o.counts, o.displs, b, i.counts, i.displs);
    }
  }

  static constexpr bool kFloatRows = std::is_same_v<T, float> && std::is_same_v<D, Device>;

  // comm.a2a_compression: the encoded words going to / coming from each
  // rank for `out` / `in` rows of `d` values, their displacements and
  // totals (counted in the traffic ledger).
  struct EncodedMessages {
    std::vector<int> sc, sd, rc, rd;
    std::int64_t so = 0, ro = 0;
  };
  EncodedMessages encoded_messages(const std::vector<int>& out, const std::vector<int>& in, std::int64_t d) const {
    const int P = ranks(), me = rows_->rank();
    const auto n_ranks = static_cast<std::size_t>(P);
    EncodedMessages m{std::vector<int>(n_ranks), std::vector<int>(n_ranks), std::vector<int>(n_ranks),
                      std::vector<int>(n_ranks)};
    double logical = 0, wire = 0;
    for (int r = 0; r < P; ++r) {
      const auto k = std::size_t(r);
      m.sc[k] = int(codec_.words(std::int64_t(out[k]) * d));
      m.rc[k] = int(codec_.words(std::int64_t(in[k]) * d));
      m.sd[k] = int(m.so);
      m.rd[k] = int(m.ro);
      m.so += m.sc[k];
      m.ro += m.rc[k];
      if (r != me) logical += double(out[k]) * double(d) * sizeof(float), wire += double(m.sc[k]) * 4;
    }
    comm::TrafficLedger::add(comm::Traffic::ExpertA2a, logical, wire);
    return m;
  }

  // post_part() with comm.a2a_compression: each destination's rows of the
  // part one encoded payload, as send_encoded(), in buffers of the part's
  // own that the request keeps until its decode has run (several parts
  // are in flight at once).
  comm::Request post_part_encoded(const V2& from, const std::vector<int>& out, const std::vector<int>& out_at,
                                  const V2& to, const std::vector<int>& in, const std::vector<int>& in_at) {
    const std::int64_t d = from.extent(1);
    const EncodedMessages m = encoded_messages(out, in, d);
    const int P = ranks();
    // The call's next pair of pooled buffers (pipeline_parts has waited for
    // every request of its previous call), grown as needed, never cleared.
    if (part_words_next_ == part_words_.size()) part_words_.emplace_back();
    auto& pooled = part_words_[part_words_next_++];
    auto fit = [](W1& w, std::int64_t n, const char* label) {
      if (std::int64_t(w.extent(0)) < n)
        w = W1(Kokkos::view_alloc(Kokkos::WithoutInitializing, std::string(label)), std::size_t(n));
    };
    fit(pooled.first, m.so, "exa::ep::part_send_words");
    fit(pooled.second, m.ro, "exa::ep::part_recv_words");
    const W1 send_words = pooled.first, recv_words = pooled.second;
    using Flat = Kokkos::View<T*, Layout, D, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
    const Flat a(from.data(), from.span()), b(to.data(), to.span());
    auto chunk = [](const auto& v, std::int64_t at, std::int64_t n) {
      return Kokkos::subview(v, std::make_pair(at, at + n));
    };
    {
      ScopedRegion region("compress/encode");
      for (int r = 0; r < P; ++r) {
        const auto k = std::size_t(r);
        const std::int64_t n = std::int64_t(out[k]) * d;
        if (n > 0) codec_.encode(chunk(a, std::int64_t(out_at[k]) * d, n), chunk(send_words, m.sd[k], m.sc[k]));
      }
      Kokkos::fence();
    }
    comm::Request req = hier_ ? comm::ihierarchical_alltoallv(*hier_, send_words, m.sc, m.sd, recv_words, m.rc, m.rd)
                              : rows_->ialltoallv(send_words, m.sc, m.sd, recv_words, m.rc, m.rd);
    const kernels::WireCodec codec = codec_;
    req.then([codec, send_words, recv_words, b, in, in_at, m, d, chunk]() {
      ScopedRegion region("compress/decode");
      for (std::size_t k = 0; k < in.size(); ++k) {
        const std::int64_t n = std::int64_t(in[k]) * d;
        if (n > 0) codec.decode(chunk(recv_words, m.rd[k], m.rc[k]), n, chunk(b, std::int64_t(in_at[k]) * d, n));
      }
      Kokkos::fence();
    });
    return req;
  }

  // send() with comm.a2a_compression: each destination's rows one encoded
  // payload, whose size the receiver knows from the row counts.
  template <class Flat>
  void send_encoded(const Flat& a, const std::vector<int>& out, const Flat& b, const std::vector<int>& in,
                    std::int64_t d) {
    const auto [sc, sd, rc, rd, so, ro] = encoded_messages(out, in, d);
    const int P = ranks();
    if (std::int64_t(send_words_.extent(0)) < so) send_words_ = W1("exa::ep::send_words", std::size_t(so));
    if (std::int64_t(recv_words_.extent(0)) < ro) recv_words_ = W1("exa::ep::recv_words", std::size_t(ro));
    auto chunk = [](const auto& v, std::int64_t at, std::int64_t n) {
      return Kokkos::subview(v, std::make_pair(at, at + n));
    };
    {
      ScopedRegion region("compress/encode");
      std::int64_t row = 0;
      for (int r = 0; r < P; ++r) {
        const std::int64_t n = std::int64_t(out[std::size_t(r)]) * d;
        if (n > 0) codec_.encode(chunk(a, row * d, n), chunk(send_words_, sd[std::size_t(r)], sc[std::size_t(r)]));
        row += out[std::size_t(r)];
      }
      Kokkos::fence();
    }
    if (hier_) {
      comm::hierarchical_alltoallv(*hier_, chunk(send_words_, 0, so), sc, sd, chunk(recv_words_, 0, ro), rc, rd);
    } else {
      rows_->alltoallv(chunk(send_words_, 0, so), sc, sd, chunk(recv_words_, 0, ro), rc, rd);
    }
    ScopedRegion region("compress/decode");
    std::int64_t row = 0;
    for (int r = 0; r < P; ++r) {
      const std::int64_t n = std::int64_t(in[std::size_t(r)]) * d;
      if (n > 0) codec_.decode(chunk(recv_words_, rd[std::size_t(r)], rc[std::size_t(r)]), n, chunk(b, row * d, n));
      row += in[std::size_t(r)];
    }
    Kokkos::fence();
  }

  using W1 = Kokkos::View<std::int32_t*, Layout, D>;
  kernels::WireCodec codec_;
  W1 send_words_, recv_words_;  // comm.a2a_compression's payloads
  // ... and those of the parts (a pair per part and direction in flight).
  std::vector<std::pair<W1, W1>> part_words_;
  std::size_t part_words_next_ = 0;
  std::shared_ptr<comm::Communicator> counts_, rows_;
  std::shared_ptr<comm::HierarchicalComms> hier_;
  std::shared_ptr<const ExpertPlacement> placement_;
  struct SlotTable {
    std::uint64_t version = 0;
    I1 slot;  // [E] on the device
  };
  std::map<std::int64_t, SlotTable> slot_tables_;  // per MoE layer
  I2 slot_topk_;                                   // [N,k], shared by the layers
  int n_experts_ = 0, local_experts_ = 0;
  int chunks_ = 1;                  // moe.a2a_chunks
  V2 source_, expert_;              // rows in source-major / expert-major order [R,d]
  V2 send_;                         // forward's permuted rows as they leave [N*k,d]
  V2 dyp_, dxp_, dea_, deb_, deh_;  // backward scratch, shared by the stage's MoE layers
  H2 dea16_, deb16_;                // ... dea, deb under bf16 storage
  V2 dxe_;                          // [R,d], in parts: the input-row gradients, beside the row gradients
  model::lora::Scratch<T, D> lora_;  // the experts' adapters' products
};

}  // namespace exa::parallel::expert
