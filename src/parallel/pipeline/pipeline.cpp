#include "parallel/pipeline/pipeline.hpp"

#include <algorithm>
#include <thread>

#include "core/deck/config.hpp"
#include "core/error.hpp"
#include "core/profiling.hpp"
#include "kernels/global_norm.hpp"
#include "parallel/pipeline/schedules.hpp"
#include "parallel/pipeline/stage_split.hpp"

namespace exa::parallel::pipeline {

namespace {

using BorrowedFlat = Kokkos::View<float*, Layout, Device, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;

BorrowedFlat flat(const Pipeline::Model::V2& v) { return BorrowedFlat(v.data(), v.size()); }

}  // namespace

PipelineOptions PipelineOptions::from_deck(const deck::Config& cfg) {
  PipelineOptions o;
  o.schedule = cfg.get_string("pipeline.schedule");
  o.layers_per_stage =
      parse_layers_per_stage(cfg.get_string("pipeline.layers_per_stage"), cfg.get_int("model.n_layers"),
                             static_cast<int>(cfg.get_int("parallel.pp")), cfg.locate({"pipeline.layers_per_stage"}));
  return o;
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
      p2p_(comm::make_mpi_communicator(pp_)),
      schedule_(make_schedule(opt_.schedule, stage_, stages_)),
      deferred_(std::move(weights)) {
  EXA_REQUIRE((opt_.schedule == "zb") == (deferred_ != nullptr),
              "pipeline: the zb schedule needs the model built with deferred weight gradients, and only it");
  EXA_REQUIRE(p2p_->rank() == stage_ && p2p_->size() == stages_,
              "pipeline: the Pp group's rank {} of {} is not the stage {} of {}", p2p_->rank(), p2p_->size(), stage_,
              stages_);
  if (cfg_.tie_embeddings && stages_ > 1) {
    const auto& s = grid.sizes();
    const int color = first() || last() ? grid.coords().world % (s.tp * s.cp * s.dp) : MPI_UNDEFINED;
    MPI_Comm_split(grid.comm(comm::Group::World), color, stage_, &embed_);
  }
}

Pipeline::~Pipeline() {
  if (embed_ != MPI_COMM_NULL) MPI_Comm_free(&embed_);
}

void Pipeline::post_receives(const Model& m, int n_micro) {
  // Each tensor-parallel rank sends its copy of the residual stream to the
  // same TP rank of the next stage: whole, or its 1/tp of the rows under
  // sequence parallelism (context parallelism: of its T/cp zigzag rows).
  const std::int64_t N = m.plan().stream_rows(shape_.N()), d = cfg_.d_model;
  auto grow = [&](std::vector<Model::V2>& v, const char* label) {
    while (std::int64_t(v.size()) < n_micro) v.emplace_back(std::string("exa::pipeline::") + label, N, d);
  };
  grow(act_in_, "act_in");
  grow(grad_in_, "grad_in");
  grow(grad_out_, "grad_out");
  for (auto* r : {&act_recv_, &grad_recv_, &act_send_, &grad_send_}) r->resize(std::size_t(n_micro));
  for (int j = 0; j < n_micro; ++j) {
    if (!first()) act_recv_[std::size_t(j)] = p2p_->irecv(flat(act_in_[std::size_t(j)]), stage_ - 1, 2 * j);
  }
}

void Pipeline::wait(comm::Request& r, double& waited) {
  if (r.done()) return;
  // Deferred weight gradients fill the wait (compute, not idle time).
  while (deferred_ && !deferred_->empty() && !r.test()) deferred_->run_oldest();
  if (r.done()) return;
  ScopedRegion region("comm/pipeline");
  const double t0 = wall_seconds();
  // Polling with a yield rather than MPI_Wait's spin: a rank sharing its
  // core with the stage it waits for hands that stage the core.
  while (!r.test()) std::this_thread::yield();
  waited += wall_seconds() - t0;
}

PipelineStats Pipeline::run(const Step& s, int n_micro) {
  const auto ops = schedule_->ops(n_micro);
  check_schedule(ops, n_micro, schedule_->name());
  PipelineStats st;
  const double t0 = wall_seconds();
  post_receives(s.model, n_micro);
  for (int j = 0; j < n_micro; ++j)
    if (!last()) grad_recv_[std::size_t(j)] = p2p_->irecv(flat(grad_in_[std::size_t(j)]), stage_ + 1, 2 * j + 1);
  std::vector<Ctx*> alive(std::size_t(n_micro), nullptr);
  std::size_t last_backward = 0;
  for (std::size_t i = 0; i < ops.size(); ++i)
    if (ops[i].kind == MicroBatchOp::Kind::Backward) last_backward = i;
  for (std::size_t i = 0; i < ops.size(); ++i) {
    const int j = ops[i].micro;
    const auto k = std::size_t(j);
    if (ops[i].kind == MicroBatchOp::Kind::Forward) {
      Model::Input in;
      if (first() || last()) in = s.input(j);
      if (!first()) {
        wait(act_recv_[k], st.wait_s);
        in.hidden = act_in_[k];
        in.shape = shape_;
      }
      Ctx& c = s.model.forward(s.weights, in);
      if (s.forwarded) s.forwarded(j, c);
      if (!last()) act_send_[k] = p2p_->isend(flat(c.out), stage_ + 1, 2 * j);
      alive[k] = &c;
      st.peak_live = std::max(st.peak_live, s.model.live_contexts());
      st.peak_activation_bytes = std::max(st.peak_activation_bytes, s.model.activation_bytes());
    } else {
      if (!last()) wait(grad_recv_[k], st.wait_s);
      // The context's output must have left before backward gives the
      // context back (a later forward would overwrite it).
      wait(act_send_[k], st.wait_s);
      const bool final_backward = i == last_backward;
      if (deferred_) {
        // The last backward runs whole, after every deferred W, so that the
        // reduction hooks see complete gradients.
        if (final_backward) deferred_->run_all();
        else deferred_->open(j);
      }
      if (s.before_backward) s.before_backward(j, final_backward);
      s.model.backward(*alive[k], s.weights, s.grads, s.backward_seed, last() ? Model::V2{} : grad_in_[k],
                       first() ? Model::V2{} : grad_out_[k]);
      alive[k] = nullptr;
      if (deferred_) {
        deferred_->close();
        st.peak_activation_bytes =
            std::max(st.peak_activation_bytes, s.model.activation_bytes() + deferred_->bytes());
        while (deferred_->pending() > std::size_t(stages_ - stage_)) deferred_->run_oldest();
      }
      if (!first()) grad_send_[k] = p2p_->isend(flat(grad_out_[k]), stage_ - 1, 2 * j + 1);
    }
  }
  for (auto& r : grad_send_) wait(r, st.wait_s);
  if (deferred_) deferred_->run_all();
  st.step_s = wall_seconds() - t0;
  return st;
}

void Pipeline::forward_only(const Step& s, int n_micro, const std::function<void(int j, const Ctx& c)>& done) {
  post_receives(s.model, n_micro);
  double waited = 0;
  for (int j = 0; j < n_micro; ++j) {
    const auto k = std::size_t(j);
    Model::Input in;
    if (first() || last()) in = s.input(j);
    if (!first()) {
      wait(act_recv_[k], waited);
      in.hidden = act_in_[k];
      in.shape = shape_;
    }
    Ctx& c = s.model.forward(s.weights, in);
    if (last()) {
      done(j, c);
    } else {
      act_send_[k] = p2p_->isend(flat(c.out), stage_ + 1, 2 * j);
      wait(act_send_[k], waited);
    }
    s.model.release(c);
  }
}

void Pipeline::sum(double* x, int n) const { MPI_Allreduce(MPI_IN_PLACE, x, n, MPI_DOUBLE, MPI_SUM, pp_); }

double Pipeline::max(double x) const {
  MPI_Allreduce(MPI_IN_PLACE, &x, 1, MPI_DOUBLE, MPI_MAX, pp_);
  return x;
}

void Pipeline::sum_tied_grads(const model::ParameterStore& store) const {
  if (embed_ == MPI_COMM_NULL) return;
  const std::size_t i = store.index("embed.weight");
  EXA_REQUIRE(store.shard(i).count == store.shard(i).box.numel(),
              "pipeline: the tied embedding's gradient must be this rank's whole part (its vocabulary rows) on the "
              "first and last stages (parallel.zero = 0)");
  auto comm = comm::make_mpi_communicator(embed_);
  comm->iallreduce(store.grad(i)).wait();
}

Reduction Pipeline::norm_reduction(Reduction within, const model::ParameterStore& store) const {
  const bool twice = embed_ != MPI_COMM_NULL && last();  // the tied embedding's second copy
  return [this, within = std::move(within), &store, twice](double x) {
    if (within) x = within(x);
    if (twice) {
      // `within` summed the vocabulary-parallel parts over the Tp group, so
      // the copy to take out is the sum of theirs too.
      double copy = kernels::global_sq_norm(store.grad("embed.weight"));
      MPI_Allreduce(MPI_IN_PLACE, &copy, 1, MPI_DOUBLE, MPI_SUM, tp_);
      x -= copy;
    }
    sum(&x, 1);
    return x;
  };
}

}  // namespace exa::parallel::pipeline
