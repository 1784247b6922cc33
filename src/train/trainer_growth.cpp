// The Trainer's model state and expert growth (docs/architecture.md,
// "Expert growth"): building the state for an expert count, rebuilding it
// for a resume of another count, and growing it in the running job.
#include <algorithm>
#include <cstring>
#include <map>
#include <optional>
#include <utility>

#include "core/log.hpp"
#include "core/philox.hpp"
#include "core/profiling.hpp"
#include "io/checkpoint/box_holders.hpp"
#include "io/checkpoint/piece_exchange.hpp"
#include "model/router_bias.hpp"
#include "model/shard.hpp"
#include "parallel/build_model.hpp"
#include "train/trainer.hpp"

namespace exa::train {

namespace {

// A store's pieces and their three buffers (masters, exp_avg, exp_avg_sq)
// in host memory, by tensor name. On a device the buffers are host copies:
// `to_device` copies them back.
class HostState {
 public:
  // `adamw` null: the masters only (a frozen store).
  HostState(const model::ParameterStore& store, const optim::AdamW* adamw) {
    for (std::size_t i = 0; i < store.size(); ++i) {
      const auto& spec = store.spec(i);
      const auto sh = model::resolve_shard(store.shard(i), spec.name, spec.shape);
      Entry e{io::Piece{sh.box, {sh.offset, sh.offset + sh.count}}, sh, spec.shape, {}, {}};
      std::vector<optim::AdamW::Flat> buffers{store.value(i)};
      if (adamw) buffers.insert(buffers.end(), {adamw->exp_avg(i), adamw->exp_avg_sq(i)});
      for (const auto& v : buffers) {
        e.device.push_back(v);
        e.host.push_back(Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), v));
      }
      index_[spec.name] = entries_.size();
      entries_.push_back(std::move(e));
    }
  }
  // This rank's piece of `name` (an empty piece of `dims` dimensions when
  // it holds none).
  // `buffers`: the first this many (the masters are the first).
  io::ExchangePiece piece(const std::string& name, std::size_t dims, std::size_t buffers = 3) const {
    const auto it = index_.find(name);
    if (it == index_.end()) {
      io::Piece none;
      none.box.offset.assign(dims, 0);
      none.box.extent.assign(dims, 0);
      return {none, {}};
    }
    const auto& e = entries_[it->second];
    io::ExchangePiece p{e.piece, {}};
    for (std::size_t b = 0; b < std::min(buffers, e.host.size()); ++b) p.values.push_back(e.host[b].data());
    return p;
  }
  float* master(const std::string& name) const {
    const auto it = index_.find(name);
    return it == index_.end() ? nullptr : entries_[it->second].host[0].data();
  }
  // The global flat index of each of this rank's values of `name`, and
  // the tensor's shape (empty when it holds none).
  std::vector<std::int64_t> global_indices(const std::string& name, std::vector<std::int64_t>& shape) const {
    const auto it = index_.find(name);
    if (it == index_.end()) return {};
    const auto& e = entries_[it->second];
    shape = e.shape;
    const auto idx = model::box_index(e.shard, e.shape);
    std::vector<std::int64_t> g(std::size_t(e.shard.count));
    for (std::size_t j = 0; j < g.size(); ++j) g[j] = std::int64_t(idx(std::uint64_t(e.shard.offset) + j));
    return g;
  }
  void to_device() const {
    for (const auto& e : entries_)
      for (std::size_t b = 0; b < e.host.size(); ++b) Kokkos::deep_copy(e.device[b], e.host[b]);
  }

 private:
  using Flat = optim::AdamW::Flat;
  using HostFlat = decltype(Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), std::declval<Flat>()));
  struct Entry {
    io::Piece piece;
    model::Shard shard;  // resolved
    std::vector<std::int64_t> shape;
    std::vector<Flat> device;
    std::vector<HostFlat> host;
  };
  std::vector<Entry> entries_;
  std::map<std::string, std::size_t> index_;
};

// growth.noise: a parent's expert weights get +n and its child's -n, n
// drawn from Philox at the child's global index (keyed by the event and the
// tensor), so every layout adds the same noise.
void add_noise(const HostState& to, const GrowthEvent& ev, double noise, std::uint64_t seed) {
  if (noise <= 0) return;
  for (const auto& [name, rows] : ev.rows) {
    if (name.find(".experts.") == std::string::npos) continue;
    float* v = to.master(name);
    std::vector<std::int64_t> shape;
    const auto g = to.global_indices(name, shape);
    if (v == nullptr || g.empty()) continue;
    std::map<std::int64_t, std::int64_t> child_of;  // parent -> its child
    for (std::int64_t c = ev.from; c < ev.to; ++c)
      if (rows[std::size_t(c)] >= 0) child_of[rows[std::size_t(c)]] = c;
    std::int64_t S = 1;
    for (std::size_t d = 1; d < shape.size(); ++d) S *= shape[d];
    const auto key = philox_key(seed, ("growth." + std::to_string(ev.step) + "." + name).c_str());
    for (std::size_t j = 0; j < g.size(); ++j) {
      const std::int64_t row = g[j] / S, rest = g[j] % S;
      if (row >= ev.from) {
        if (rows[std::size_t(row)] >= 0) v[j] -= float(noise * philox_normal(key, std::uint64_t(g[j])));
      } else if (const auto c = child_of.find(row); c != child_of.end()) {
        v[j] += float(noise * philox_normal(key, std::uint64_t(c->second * S + rest)));
      }
    }
  }
}

// The aux-free biases of the grown model: a clone starts with its
// parent's bias, a fresh expert with its layer's mean.
void extend_router_bias(io::CheckpointMeta& meta, const GrowthEvent& ev) {
  const auto it = meta.state.find(model::kRouterBiasState);
  if (it == meta.state.end()) return;
  const auto& old = it->second;
  const std::int64_t n = old.shape[0];
  io::StateArray grown{{n, ev.to}, {}};
  std::size_t i = 0;
  for (const auto& [layer, parents] : ev.parents) {
    const auto row = old.values.begin() + std::ptrdiff_t(i * std::size_t(ev.from));
    grown.values.insert(grown.values.end(), row, row + ev.from);
    double mean = 0;
    for (std::int64_t e = 0; e < ev.from; ++e) mean += row[e];
    mean /= double(ev.from);
    for (const auto p : parents) grown.values.push_back(p >= 0 ? row[p] : float(mean));
    ++i;
  }
  EXA_REQUIRE(std::int64_t(i) == n, "growth: {} MoE layers grew but the router biases have {}", i, n);
  it->second = std::move(grown);
}

// The distillation teacher's tensors: the old masters (`from`'s first
// buffer) into `teacher`'s pieces, with the experts back in global order
// under re-placement (teacher row e is old slot slot_of(l)[e]).
void fill_teacher(const HostState& from, const model::ParameterStore& teacher, const model::ModelConfig& old_cfg,
                  const parallel::expert::ExpertPlacement* old_placement, MPI_Comm world) {
  std::map<std::string, std::vector<std::int64_t>> rows;
  if (old_placement)
    for (const auto l : old_placement->moved_layers()) {
      const auto slot = old_placement->slot_of(l);
      for (const char* t : {"w1", "w3", "w2"})
        rows["layers." + std::to_string(l) + ".moe.experts." + t].assign(slot.begin(), slot.end());
    }
  const HostState to(teacher, nullptr);
  std::vector<io::ExchangeTensor> tensors;
  std::vector<io::ExchangePiece> a, b;
  for (const auto& spec : model::parameter_specs(old_cfg)) {
    const auto it = rows.find(spec.name);
    tensors.push_back({spec.name, spec.shape, spec.shape, it != rows.end() ? it->second : std::vector<std::int64_t>{}});
    a.push_back(from.piece(spec.name, spec.shape.size(), 1));
    b.push_back(to.piece(spec.name, spec.shape.size(), 1));
  }
  io::exchange_pieces(tensors, a, b, world);
  to.to_device();
}

// Top-k's residuals through a growth event (comm.compression = "topk"):
// each rank's residual covers its whole box and differs between the ranks
// holding the same box, so holder j of each box (world-rank order; the
// grid, hence who holds the same box, does not change) receives from the
// old holder j, one exchange per holder index. The old experts' rows keep
// what they are owed; the new experts' rows (`from_experts` and up) start
// at zero: a clone owes nothing of its parent's gradient. Collective.
// Returns the sum over the world of the residuals' bit patterns before and
// after (an order-free checksum: equal when nothing owed was lost).
std::pair<std::uint64_t, std::uint64_t> carry_residuals(const parallel::data::DataParallel& from,
                                                        const parallel::data::DataParallel& to,
                                                        std::vector<io::ExchangeTensor> tensors,
                                                        std::int64_t from_experts, MPI_Comm world) {
  struct Held {
    model::Box from_box, to_box;
    optim::AdamW::Flat from_r, to_r;
  };
  auto find = [](const model::ParameterStore& store, const std::string& name) -> std::optional<std::size_t> {
    for (std::size_t i = 0; i < store.size(); ++i)
      if (store.spec(i).name == name) return i;
    return std::nullopt;
  };
  std::vector<Held> held(tensors.size());
  std::vector<std::optional<model::Box>> boxes(tensors.size());
  for (std::size_t t = 0; t < tensors.size(); ++t) {
    const auto i = find(to.store(), tensors[t].name), k = find(from.store(), tensors[t].name);
    if (!i || !k || !to.has_residual(tensors[t].name)) continue;
    auto box = [](const model::ParameterStore& st, std::size_t n) {
      return model::resolve_shard(st.shard(n), st.spec(n).name, st.spec(n).shape).box;
    };
    held[t] = Held{box(from.store(), *k), box(to.store(), *i), from.residual(tensors[t].name),
                   to.residual(tensors[t].name)};
    if (held[t].to_r.extent(0) > 0) boxes[t] = held[t].to_box;
  }
  // Holder index of each rank's box now; the most holders of any box.
  const auto who = io::box_holders(boxes, world);
  std::int64_t holders = 0;
  for (const auto& w : who) holders = std::max(holders, w.most);
  // Host copies; the clones' rows are not mapped (left at zero).
  std::vector<std::vector<float>> src(tensors.size()), dst(tensors.size());
  std::uint64_t sums[2] = {0, 0};
  auto checksum = [](const std::vector<float>& v) {
    std::uint64_t c = 0;
    for (const float x : v) {
      std::uint32_t b = 0;
      std::memcpy(&b, &x, sizeof b);
      c += b;
    }
    return c;
  };
  for (std::size_t t = 0; t < tensors.size(); ++t) {
    if (held[t].to_r.extent(0) == 0) continue;
    auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), held[t].from_r);
    src[t].assign(h.data(), h.data() + h.extent(0));
    dst[t].assign(held[t].to_r.extent(0), 0.0f);
    sums[0] += checksum(src[t]);
    for (std::size_t r = 0; r < tensors[t].rows.size(); ++r)
      if (std::int64_t(r) >= from_experts) tensors[t].rows[r] = -1;
  }
  for (std::int64_t j = 0; j < holders; ++j) {
    std::vector<io::ExchangePiece> a, b;
    for (std::size_t t = 0; t < tensors.size(); ++t) {
      io::ExchangePiece none;
      none.piece.box.offset.assign(tensors[t].to_shape.size(), 0);
      none.piece.box.extent.assign(tensors[t].to_shape.size(), 0);
      if (who[t].holder != j) {
        io::ExchangePiece old_none = none;
        old_none.piece.box.offset.assign(tensors[t].from_shape.size(), 0);
        old_none.piece.box.extent.assign(tensors[t].from_shape.size(), 0);
        a.push_back(old_none);
        b.push_back(none);
        continue;
      }
      a.push_back({io::Piece{held[t].from_box, {0, held[t].from_box.numel()}}, {src[t].data()}});
      b.push_back({io::Piece{held[t].to_box, {0, held[t].to_box.numel()}}, {dst[t].data()}});
    }
    io::exchange_pieces(tensors, a, b, world);
  }
  for (std::size_t t = 0; t < tensors.size(); ++t) {
    if (held[t].to_r.extent(0) == 0) continue;
    sums[1] += checksum(dst[t]);
    auto h = Kokkos::create_mirror_view(held[t].to_r);
    std::copy(dst[t].begin(), dst[t].end(), h.data());
    Kokkos::deep_copy(held[t].to_r, h);
  }
  MPI_Allreduce(MPI_IN_PLACE, sums, 2, MPI_UINT64_T, MPI_SUM, world);
  return {sums[0], sums[1]};
}

}  // namespace

void Trainer::build_state(const std::function<bool(const std::string&)>& only) {
  replace_ = ExpertReplacement(cfg_, mcfg_, int(grid_.sizes().ep));
  balance_ = AuxFreeBalancing(cfg_, mcfg_);
  dp_ = std::make_unique<parallel::data::DataParallel>(*layout_);
  dp_->initialize(static_cast<std::uint64_t>(cfg_.get_int("train.seed")), only);
  model_ = parallel::build_model(*layout_, model::ModelOptions::from_deck(cfg_), replace_.placement());
  model_->add_hooks(dp_.get());
  balance_.attach(*model_);
  exec_ = parallel::make_step_executor(*layout_, {*model_, dp_->weights(), dp_->grads(), dp_.get()}, micro_batch_);
  opt_ = std::make_unique<optim::Optimizer>(dp_->store(), cfg_);
  opt_->clipper().set_reduction(exec_->norm_reduction());
  flops_ = count_flops(mcfg_);
}

void Trainer::apply_clone_rings() {
  for (const auto& l : model_->layers())
    if (l.is_moe()) model_->set_clone_ring(l.index(), growth_.ring(l.index()));
}

void Trainer::grow(std::int64_t steps_done) {
  const double t0 = wall_seconds();
  ScopedRegion region("growth", true);
  // The model before the event, as a checkpoint of it would route: the
  // distillation teacher's (before decide() extends the families).
  const io::CheckpointMeta before = distill_.enabled() ? checkpoint_meta(steps_done) : io::CheckpointMeta{};
  const GrowthEvent ev = growth_.decide(steps_done);
  // The balancing and growth state of the grown model (extended, and the
  // new window and families), restored into it below.
  io::CheckpointMeta meta = checkpoint_meta(steps_done);
  extend_router_bias(meta, ev);
  // The current state is set aside, the grown one built as at step 0.
  auto old_layout = std::move(layout_);
  auto old_dp = std::move(dp_);
  auto old_model = std::move(model_);
  auto old_exec = std::move(exec_);
  auto old_opt = std::move(opt_);
  const auto old_placement = replace_.placement();  // null when re-placement is off
  const model::ModelConfig old_cfg = mcfg_;
  mcfg_.n_experts = ev.to;
  layout_ = std::make_unique<parallel::ParallelLayout>(old_layout->with_model(mcfg_));
  // Only tensors with fresh rows are drawn; the exchange fills the rest.
  build_state([&](const std::string& name) {
    const auto it = ev.rows.find(name);
    return it != ev.rows.end() && std::find(it->second.begin(), it->second.end(), -1) != it->second.end();
  });
  opt_->adamw().set_step_count(old_opt->adamw().step_count());
  // Under re-placement the old expert tensors hold layer l's experts in
  // slot order (row s is expert expert_at(l)[s]); the exchange reads each
  // old expert at its slot, and the grown model starts from the identity.
  auto rows = ev.rows;
  if (old_placement)
    for (const auto l : old_placement->moved_layers()) {
      const auto slot = old_placement->slot_of(l);
      for (const char* t : {"w1", "w3", "w2"})
        for (auto& r : rows.at("layers." + std::to_string(l) + ".moe.experts." + t))
          if (r >= 0) r = slot[std::size_t(r)];
    }
  // Every tensor, in the same order on every rank (stages hold different ones).
  const auto old_specs = model::parameter_specs(old_cfg), new_specs = model::parameter_specs(mcfg_);
  std::vector<io::ExchangeTensor> tensors;
  for (std::size_t i = 0; i < new_specs.size(); ++i) {
    const auto it = rows.find(new_specs[i].name);
    tensors.push_back({new_specs[i].name, old_specs[i].shape, new_specs[i].shape,
                       it != rows.end() ? it->second : std::vector<std::int64_t>{}});
  }
  const HostState from(old_dp->store(), &old_opt->adamw());
  const HostState to(dp_->store(), &opt_->adamw());
  std::vector<io::ExchangePiece> a, b;
  for (const auto& t : tensors) {
    a.push_back(from.piece(t.name, t.from_shape.size()));
    b.push_back(to.piece(t.name, t.to_shape.size()));
  }
  const io::ExchangeReport moved = io::exchange_pieces(tensors, a, b, world_);
  add_noise(to, ev, growth_.schedule().noise, static_cast<std::uint64_t>(cfg_.get_int("train.seed")));
  to.to_device();
  if (dp_->options().topk.enabled()) {
    const auto [was, now] = carry_residuals(*old_dp, *dp_, tensors, ev.from, world_);
    log::info("growth: top-k residuals carried to the grown model (checksum {:016x} before, {:016x} after; the new "
              "experts owe nothing yet)",
              was, now);
  }
  double teacher_s = 0;
  if (distill_.enabled()) {
    // The model before the event becomes the teacher, filled from the host
    // copy of its masters the exchange above read.
    const double t1 = wall_seconds();
    ScopedRegion teacher_region("distill/make_teacher", true);
    teacher_.reset();  // an earlier event's (its window ended: distill_steps <= every)
    teacher_ = std::make_unique<Teacher>(*old_layout, old_cfg, cfg_, distill_, steps_done, micro_batch_);
    fill_teacher(from, teacher_->store(), old_cfg, old_placement.get(), world_);
    publish_teacher(before, steps_done);
    teacher_s = wall_seconds() - t1;
  }
  old_exec.reset();
  old_model.reset();
  old_opt.reset();
  old_dp.reset();
  old_layout.reset();
  dp_->params_updated();
  balance_.restore(meta, *model_);
  apply_clone_rings();
  ckpt_->rebind(dp_->store());
  const double stall = wall_seconds() - t0;
  nlohmann::json parents;
  for (const auto& [layer, p] : ev.parents) parents[std::to_string(layer)] = p;
  metrics_->write(nlohmann::json{{"event", "growth"}, {"step", steps_done}, {"experts_before", ev.from},
                                 {"experts_after", ev.to}, {"init", model::to_string(growth_.schedule().init)},
                                 {"parents", parents}, {"stall_s", stall}, {"moved_elements", moved.received},
                                 {"teacher_s", teacher_s}});
  log::info("growth: step {}: {} -> {} experts per MoE layer ({}), {:.1f} ms, {} elements received by this rank",
            steps_done, ev.from, ev.to, model::to_string(growth_.schedule().init), 1e3 * stall, moved.received);
}

void Trainer::publish_teacher(const io::CheckpointMeta& before, std::int64_t steps_done) {
  teacher_->ready(before);
  ckpt_->wait_for_writes();  // checkpoint.async: the writer owns HDF5 until it is done
  teacher_->save(checkpoint_dir(), before, world_);
  log::info("distillation: the model before this event ({} experts per MoE layer) is the teacher of steps {}..{} "
            "(coef {:g}, temperature {:g}); snapshot {}",
            growth_.schedule().experts_after(steps_done - 1), steps_done + 1, steps_done + distill_.steps, distill_.coef, distill_.temperature,
            Teacher::snapshot_step_dir(checkpoint_dir(), steps_done));
}

void Trainer::restore_teacher() {
  teacher_.reset();
  // The event whose window holds the next step, step_ (0-based).
  const std::int64_t s = distillation_event(cfg_, step_);
  if (s == 0) return;
  model::ModelConfig before = mcfg_;
  before.n_experts = growth_.schedule().experts_after(s - 1);
  teacher_ = std::make_unique<Teacher>(*layout_, before, cfg_, distill_, s, micro_batch_);
  teacher_->load(checkpoint_dir(), world_);
  log::info("distillation: step {} is inside the window of the growth after step {}; teacher read from {}",
            step_ + 1, s, Teacher::snapshot_step_dir(checkpoint_dir(), s));
}

void Trainer::rebuild(std::int64_t experts) {
  if (experts == mcfg_.n_experts) return;
  log::info("growth: the checkpoint's step has {} experts per MoE layer; rebuilding the model for them", experts);
  exec_.reset();
  model_.reset();
  opt_.reset();
  dp_.reset();
  mcfg_.n_experts = experts;
  layout_ = std::make_unique<parallel::ParallelLayout>(layout_->with_model(mcfg_));
  build_state();
  ckpt_->rebind(dp_->store());
}

}  // namespace exa::train
