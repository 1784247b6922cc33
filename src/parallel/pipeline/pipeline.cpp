#include "parallel/pipeline/pipeline.hpp"

#include <algorithm>
#include <thread>
#include <vector>

#include "comm/traffic_ledger.hpp"
#include "core/error.hpp"
#include "core/profiling.hpp"
#include "kernels/global_norm.hpp"
#include "parallel/pipeline/schedules.hpp"

namespace exa::parallel::pipeline {

namespace {

using BorrowedFlat = Kokkos::View<float*, Layout, Device, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;

BorrowedFlat flat(const Pipeline::Model::V2& v) { return BorrowedFlat(v.data(), v.size()); }

}  // namespace

void PipelineStats::add_round(const PipelineStats& r) {
  peak_live = std::max(peak_live, r.peak_live);
  wait_s += r.wait_s;
  step_s += r.step_s;
  peak_activation_bytes = std::max(peak_activation_bytes, r.peak_activation_bytes);
}

Pipeline::Pipeline(const comm::ProcessGrid& grid, const model::ModelConfig& cfg, PipelineOptions opt,
                   model::MicroBatchShape shape, std::shared_ptr<WeightGradQueue> weights)
    : cfg_(cfg),
      opt_(std::move(opt)),
      shape_(shape),
      stage_(grid.coords().pp),
      stages_(grid.sizes().pp),
      pp_(grid.comm(comm::Group::Pp)),
      tp_(grid.comm(comm::Group::Tp)),
      schedule_(make_schedule(opt_.schedule, stage_, stages_, opt_.virtual_stages)),
      deferred_(std::move(weights)) {
  EXA_REQUIRE((opt_.schedule == "zb") == (deferred_ != nullptr),
              "pipeline: the zb schedule needs the model built with deferred weight gradients, and only it");
  int pp_rank = 0, pp_size = 0;
  MPI_Comm_rank(pp_, &pp_rank);
  MPI_Comm_size(pp_, &pp_size);
  EXA_REQUIRE(pp_rank == stage_ && pp_size == stages_, "pipeline: the Pp group's rank {} of {} is not the stage {} of {}",
              pp_rank, pp_size, stage_, stages_);
  make_links();
  if (cfg_.tie_embeddings && stages_ > 1) {
    const auto& s = grid.sizes();
    const int color = first() || last() ? grid.coords().world % (s.tp * s.cp * s.dp) : MPI_UNDEFINED;
    MPI_Comm_split(grid.comm(comm::Group::World), color, stage_, &embed_);
  }
}

Pipeline::~Pipeline() {
  if (embed_ != MPI_COMM_NULL) MPI_Comm_free(&embed_);
}

void Pipeline::make_links() {
  // Edge e joins stage e to stage e+1 (interleaved: the last stage to the
  // first as well); each has an activation and a gradient channel. The
  // members of each edge create its communicators in edge order, so the
  // chain of creations has no cycle.
  if (stages_ < 2) return;
  MPI_Group all = MPI_GROUP_NULL;
  MPI_Comm_group(pp_, &all);
  const int edges = chunks() > 1 ? stages_ : stages_ - 1;
  for (int e = 0; e < edges; ++e) {
    const int ends[2] = {e, (e + 1) % stages_};
    if (stage_ != ends[0] && stage_ != ends[1]) continue;
    MPI_Group pair = MPI_GROUP_NULL;
    MPI_Group_incl(all, 2, ends, &pair);
    const bool sender = stage_ == ends[0];  // of the activations; the gradients go the other way
    for (int kind = 0; kind < 2; ++kind) {
      MPI_Comm c = MPI_COMM_NULL;
      MPI_Comm_create_group(pp_, pair, 2 * e + kind, &c);
      Link& l = kind == 0 ? (sender ? acts_out_ : acts_in_) : (sender ? grads_in_ : grads_out_);
      l.comm = comm::make_transport(c, opt_.backend);
      l.peer = sender ? 1 : 0;
      MPI_Comm_free(&c);
    }
    MPI_Group_free(&pair);
  }
  MPI_Group_free(&all);
  for (const Link* l : {&acts_in_, &acts_out_, &grads_in_, &grads_out_})
    if (l->comm && l->comm->ordered()) lazy_ = true;
}

void Pipeline::post_receives(const Model& m, int n_micro, const std::function<model::MicroBatchShape(int)>& shape) {
  // Each tensor-parallel rank sends its copy of the residual stream to the
  // same TP rank of the next stage: whole, or its 1/tp of the rows under
  // sequence parallelism (context parallelism: of its T/cp zigzag rows).
  // Slot k = chunk * n_micro + j is sized for micro-batch j (token budgets
  // give each its own shape; a slot is reallocated when its shape changes).
  const std::int64_t d = cfg_.d_model;
  const int slots = n_micro * chunks();
  auto fit = [&](std::vector<Model::V2>& v, const char* label) {
    if (std::int64_t(v.size()) < slots) v.resize(std::size_t(slots));
    for (int k = 0; k < slots; ++k) {
      const std::int64_t N = m.plan().stream_rows((shape ? shape(k % n_micro) : shape_).N());
      auto& x = v[std::size_t(k)];
      if (std::int64_t(x.extent(0)) != N || std::int64_t(x.extent(1)) != d)
        x = Model::V2(std::string("exa::pipeline::") + label, N, d);
    }
  };
  fit(act_in_, "act_in");
  fit(grad_in_, "grad_in");
  fit(grad_out_, "grad_out");
  for (auto* r : {&act_recv_, &grad_recv_, &act_send_, &grad_send_}) r->resize(std::size_t(slots));
  for (int c = 0; c < chunks(); ++c)
    for (int j = 0; j < n_micro; ++j) {
      const int k = c * n_micro + j;
      if (has_prev(c) && !lazy_) act_recv_[std::size_t(k)] = receive_activation(k);
    }
}

const char* Pipeline::transport() const {
  for (const Link* l : {&acts_in_, &acts_out_})
    if (l->comm) return l->comm->backend();
  return "none";
}

comm::Request Pipeline::receive_activation(int k) {
  return acts_in_.comm->irecv(flat(act_in_[std::size_t(k)]), acts_in_.peer, 2 * k);
}

comm::Request Pipeline::receive_gradient(int k) {
  return grads_in_.comm->irecv(flat(grad_in_[std::size_t(k)]), grads_in_.peer, 2 * k + 1);
}

comm::Request Pipeline::send(const Link& to, const Model::V2& x, int tag) {
  comm::TrafficLedger::sent(comm::Traffic::PpP2p, double(x.size()) * sizeof(float));
  // A transport that reads device memory on its own stream (NCCL) must not
  // start before the kernels that wrote x have finished.
  if (to.comm->device_memory()) Kokkos::fence();
  return to.comm->isend(flat(x), to.peer, tag);
}

void Pipeline::wait(comm::Request& r, double& waited) {
  if (r.done()) return;
  // Deferred weight gradients fill the wait (compute, not idle time),
  // unless they run at fixed points (run_fixed_w).
  while (deferred_ && !deferred_->fixed_order() && !deferred_->empty() && !r.test()) deferred_->run_oldest();
  if (r.done()) return;
  ScopedRegion region("comm/pipeline");
  const double t0 = wall_seconds();
  // Polling with a yield rather than MPI_Wait's spin: a rank sharing its
  // core with the stage it waits for hands that stage the core.
  while (!r.test()) std::this_thread::yield();
  waited += wall_seconds() - t0;
}

PipelineStats Pipeline::run(const Step& s, int n_micro) {
  PipelineStats st;
  const double t0 = wall_seconds();
  post_receives(s.model, n_micro, s.shape);
  // Slot k = chunk * n_micro + j holds micro-batch j's tensors at one of the
  // stage's chunks; a message's tag is its receiver's slot (2k forward,
  // 2k + 1 backward).
  auto slot = [n_micro](int c, int j) { return c * n_micro + j; };
  // W with reductions that are collectives (a GradientHome): one micro-batch's
  // W ahead of each receive, whether or not it has come, on every replica
  // alike; before the receive is posted, so that an ordered transport
  // (NCCL) has no receive in flight while W's collectives run.
  const auto run_fixed_w = [this] {
    if (deferred_ && deferred_->fixed_order()) deferred_->run_oldest();
  };
  for (int c = 0; c < chunks(); ++c)
    for (int j = 0; j < n_micro; ++j)
      if (has_next(c) && !lazy_) grad_recv_[std::size_t(slot(c, j))] = receive_gradient(slot(c, j));
  run_schedule(
      *schedule_, n_micro, chunks(),
      [&](const MicroBatchOp& op) -> Ctx& {
        const int j = op.micro, c = op.chunk;
        const auto k = std::size_t(slot(c, j));
        Model::Input in;
        if (s.input_everywhere || !has_prev(c) || !has_next(c)) in = s.input(j);
        in.chunk = c;
        if (has_prev(c)) {
          run_fixed_w();
          if (lazy_) act_recv_[k] = receive_activation(int(k));
          wait(act_recv_[k], st.wait_s);
          in.hidden = act_in_[k];
          in.shape = shape_of(s, j);
        }
        Ctx& ctx = s.model.forward(s.weights, in);
        if (s.forwarded) s.forwarded(j, ctx);
        if (has_next(c)) act_send_[k] = send(acts_out_, ctx.out, 2 * slot(next_chunk(c), j));
        st.peak_live = std::max(st.peak_live, s.model.live_contexts());
        st.peak_activation_bytes = std::max(st.peak_activation_bytes, s.model.activation_bytes());
        return ctx;
      },
      [&](const MicroBatchOp& op, Ctx& ctx, BackwardPosition at) {
        const int j = op.micro, c = op.chunk;
        const auto k = std::size_t(slot(c, j));
        if (has_next(c)) {
          run_fixed_w();
          if (lazy_) grad_recv_[k] = receive_gradient(int(k));
          wait(grad_recv_[k], st.wait_s);
        }
        // The context's output must have left before backward gives the
        // context back (a later forward would overwrite it).
        wait(act_send_[k], st.wait_s);
        if (deferred_) {
          // The last backward runs whole, after every deferred W, so that the
          // reduction hooks see complete gradients.
          if (at.last) deferred_->run_all();
          else deferred_->open(j);
        }
        // Data parallelism reduces a chunk's layers after its last backward.
        if (s.before_backward) s.before_backward(j, at.last_of_chunk);
        s.model.backward(ctx, s.weights, s.grads, s.backward_seed, has_next(c) ? grad_in_[k] : Model::V2{},
                         has_prev(c) ? grad_out_[k] : Model::V2{});
        if (deferred_) {
          deferred_->close();
          st.peak_activation_bytes =
              std::max(st.peak_activation_bytes, s.model.activation_bytes() + deferred_->bytes());
          while (deferred_->pending() > std::size_t(stages_ - stage_)) deferred_->run_oldest();
        }
        if (has_prev(c)) grad_send_[k] = send(grads_out_, grad_out_[k], 2 * slot(prev_chunk(c), j) + 1);
      });
  for (auto& r : grad_send_) wait(r, st.wait_s);
  if (deferred_) deferred_->run_all();
  st.step_s = wall_seconds() - t0;
  return st;
}

void Pipeline::forward_only(const Step& s, int n_micro, const std::function<void(int j, const Ctx& c)>& done) {
  post_receives(s.model, n_micro, s.shape);
  double waited = 0;
  for (int j = 0; j < n_micro; ++j)
    for (int c = 0; c < chunks(); ++c) {
      const auto k = std::size_t(c * n_micro + j);
      Model::Input in;
      if (s.input_everywhere || !has_prev(c) || !has_next(c)) in = s.input(j);
      in.chunk = c;
      if (has_prev(c)) {
        if (lazy_) act_recv_[k] = receive_activation(int(k));
        wait(act_recv_[k], waited);
        in.hidden = act_in_[k];
        in.shape = shape_of(s, j);
      }
      Ctx& ctx = s.model.forward(s.weights, in);
      if (!has_next(c)) {
        done(j, ctx);
      } else {
        act_send_[k] = send(acts_out_, ctx.out, 2 * (next_chunk(c) * n_micro + j));
        wait(act_send_[k], waited);
      }
      s.model.release(ctx);
    }
}

void Pipeline::sum(double* x, int n) const { MPI_Allreduce(MPI_IN_PLACE, x, n, MPI_DOUBLE, MPI_SUM, pp_); }

double Pipeline::max(double x) const {
  MPI_Allreduce(MPI_IN_PLACE, &x, 1, MPI_DOUBLE, MPI_MAX, pp_);
  return x;
}

namespace {
// The tied embedding's trainable tensors, which the first and last stages
// both hold: the table, or under LoRA its adapters (none when frozen).
std::vector<std::size_t> tied_trainable(const model::ParameterStore& store) {
  std::vector<std::size_t> out;
  for (const char* n : {"embed.weight", "embed.lora_a", "embed.lora_b"})
    if (store.contains(n) && store.spec(store.index(n)).trainable) out.push_back(store.index(n));
  return out;
}
}  // namespace

void Pipeline::sum_tied_grads(const model::ParameterStore& store) const {
  if (embed_ == MPI_COMM_NULL) return;
  auto comm = comm::make_mpi_communicator(embed_);
  for (const std::size_t i : tied_trainable(store)) {
    // Both copies' parts must be the same elements (ZeRO cuts unit 0 alike
    // on both stages); the pair compares them before summing.
    const auto& sh = store.shard(i);
    // One MAX over (x, -x) gives both the largest and the smallest.
    long long mine[4] = {sh.offset, sh.count, -sh.offset, -sh.count}, top[4];
    MPI_Allreduce(mine, top, 4, MPI_LONG_LONG, MPI_MAX, embed_);
    EXA_REQUIRE(top[0] == -top[2] && top[1] == -top[3],
                "pipeline: the tied embedding's copies ({}) hold different parts on the first and last stages "
                "(elements [{}, +{}) here); untie the embeddings or set parallel.zero = 0",
                store.spec(i).name, sh.offset, sh.count);
    comm->iallreduce(store.grad(i)).wait();
  }
}

Reduction Pipeline::norm_reduction(Reduction within, const model::ParameterStore& store, Reduction parts) const {
  // The tied embedding's second copies, on the last stage.
  const auto tied = embed_ != MPI_COMM_NULL && last() ? tied_trainable(store) : std::vector<std::size_t>{};
  return [this, within = std::move(within), parts = std::move(parts), &store, tied](double x) {
    if (within) x = within(x);
    for (const std::size_t i : tied) {
      // `within` summed the vocabulary-parallel parts over the Tp group, so
      // a split tensor's copy to take out is the sum of theirs too; a whole
      // one (an adapter's A) it counted once. Under ZeRO it summed the
      // Data group's parts as well.
      double copy = kernels::global_sq_norm(store.grad(i));
      if (store.spec(i).tp_dim >= 0) MPI_Allreduce(MPI_IN_PLACE, &copy, 1, MPI_DOUBLE, MPI_SUM, tp_);
      if (parts) copy = parts(copy);
      x -= copy;
    }
    sum(&x, 1);
    return x;
  };
}

}  // namespace exa::parallel::pipeline
