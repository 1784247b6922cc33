#include "parallel/data/data_parallel.hpp"

#include <algorithm>

#include "core/deck/config.hpp"
#include "core/error.hpp"
#include "parallel/data/flat_buffer.hpp"
#include "parallel/tensor/expert_tp_group.hpp"
#include "core/log.hpp"
#include "core/offload_tier.hpp"
#include "kernels/topk_codec.hpp"

namespace exa::parallel::data {

namespace {

using Flat = DataParallel::Flat;

using flat::range;
using flat::bytes;

double sq_norm(const Flat& v) {
  double s = 0;
  Kokkos::parallel_reduce(
      "exa::dp_sq_norm", Kokkos::RangePolicy<ExecSpace>(0, v.extent(0)),
      KOKKOS_LAMBDA(const std::size_t i, double& acc) { acc += double(v(i)) * double(v(i)); }, s);
  return s;
}

}  // namespace

DataParallelOptions DataParallelOptions::from_deck(const deck::Config& cfg) {
  DataParallelOptions o;
  o.zero = static_cast<int>(cfg.get_int("parallel.zero"));
  o.hierarchical = cfg.get_bool("parallel.hierarchical");
  o.overlap = cfg.get_bool("comm.overlap");
  o.bucket_bytes = cfg.get_float("comm.bucket_mb") * 1024.0 * 1024.0;
  o.backend = comm::backend_named(cfg.get_string("comm.backend"));
  // Top-k sends fp32 values (its own codec); the others are wire formats.
  const std::string& compression = cfg.get_string("comm.compression");
  const bool topk = compression == "topk";
  o.compression = kernels::WireCodec(kernels::wire_format_from_name(topk ? "none" : compression),
                                     cfg.get_int("comm.quant_block"), cfg.get_bool("comm.stochastic_rounding"));
  o.seed = static_cast<std::uint64_t>(cfg.get_int("train.seed"));
  const double ratio = cfg.get_float("comm.topk_ratio");  // read either way: deck_checks refuses it set without topk
  if (topk) o.topk = kernels::TopkCodec(ratio);
  o.topk_warmup = cfg.get_int("comm.topk_warmup");
  o.inter_node_only = cfg.get_string("comm.compress_scope") == "inter_node";
  o.weight_compression = kernels::WireCodec(
      kernels::wire_format_from_name(cfg.get_string("comm.weight_compression")), cfg.get_int("comm.quant_block"));
  o.offload_experts = cfg.get_bool("memory.offload_experts");
  o.offload_dir = cfg.get_string("memory.offload_dir");
  o.offload_prefetch = static_cast<int>(cfg.get_int("memory.offload_prefetch"));
  return o;
}

std::vector<EngineSpecs> engine_groups(const model::ModelConfig& mcfg, const model::StagePlan& plan) {
  const bool experts_apart = !plan.all_experts(mcfg);
  // Expert tensors reduce over ExpertData; when ep = 1 that group is the
  // Data group and one engine holds them all, in model order. Trainable
  // tensors first, so that the optimizer's part of the store is its head.
  std::vector<EngineSpecs> g(4);
  for (int k = 0; k < 4; ++k) {
    g[std::size_t(k)].experts = k % 2 == 1;
    g[std::size_t(k)].frozen = k >= 2;
  }
  for (const auto& s : model::parameter_specs(mcfg)) {
    const int k = (s.trainable ? 0 : 2) + (experts_apart && s.reduce == model::ReduceGroup::ExpertData ? 1 : 0);
    g[std::size_t(k)].specs.push_back(s);
  }
  std::vector<EngineSpecs> out;
  for (auto& e : g)
    if (!e.specs.empty()) out.push_back(std::move(e));
  return out;
}

std::vector<std::vector<model::ParamSpec>> engine_specs(const model::ModelConfig& mcfg,
                                                       const model::StagePlan& plan) {
  std::vector<std::vector<model::ParamSpec>> out;
  for (auto& e : engine_groups(mcfg, plan)) out.push_back(std::move(e.specs));
  return out;
}

namespace {

// The engines that get buffers for the zb schedule's deferred products
// under zero 2/3: the routed experts' products stay in B.
template <class Engine>
bool deferred_here(const DataParallelOptions& o, const Engine& e) {
  return o.deferred_weights && o.zero >= 2 && !e.frozen && !e.experts;
}

}  // namespace

DataParallel::Split DataParallel::split(const comm::ProcessGrid& grid, const model::ModelConfig& mcfg,
                                        const model::StagePlan& plan, const DataParallelOptions& opt) {
  EXA_REQUIRE(opt.zero >= 0 && opt.zero <= 3, "parallel.zero = {} does not exist; use 0, 1, 2 or 3", opt.zero);
  Split out;
  std::int64_t base = 0;
  for (const auto& e : engine_groups(mcfg, plan)) {
    const auto over = e.experts ? comm::Group::ExpertData : comm::Group::Data;
    const bool hier = !e.experts && opt.hierarchical;
    // Inter-node only: a flat group has no inter-node stage to compress.
    const bool exact = opt.inter_node_only && !hier;
    DataGroup group(grid, hier, ZeroEngine::channels(deferred_here(opt, e)), opt.backend, over, exact ? kernels::WireCodec() : opt.compression,
                    exact ? kernels::WireCodec() : opt.weight_compression, exact ? kernels::TopkCodec() : opt.topk, opt.topk_warmup,
                    opt.inter_node_only && hier);
    std::vector<model::Box> boxes;
    for (const auto& s : e.specs) boxes.push_back(model::local_box(s, plan, mcfg));
    ShardLayout layout(e.specs, boxes, mcfg.n_layers, opt.zero > 0 ? group.size() : 1,
                       opt.zero > 0 ? group.block_index() : 0);
    for (const auto& sh : layout.shards()) out.shards.push_back(sh);
    out.specs.insert(out.specs.end(), e.specs.begin(), e.specs.end());
    const std::int64_t n = layout.local_numel();
    out.engines.push_back(EngineSetup{std::move(group), std::move(layout), base, e.experts, e.frozen});
    base += n;
  }
  return out;
}

model::ParameterStore::Offload DataParallel::offload_of(const DataParallelOptions& opt) {
  if (!opt.offload_experts) return {};
  int world_rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  // CUDA builds offload to host memory: no file, so no directory (the deck
  // refuses one set there).
  const std::string dir = OffloadFile::host_memory_tier() ? std::string() : opt.offload_dir;
  return {std::make_shared<OffloadFile>(dir, world_rank), model::is_routed_expert};
}

namespace {

DataParallelOptions with_deferred(DataParallelOptions o, bool deferred) {
  o.deferred_weights = deferred;
  return o;
}

}  // namespace

DataParallel::DataParallel(const ParallelLayout& layout)
    : DataParallel(layout.grid(), layout.model(), layout.plan(),
                   with_deferred(layout.options().data, layout.deferred_weights() != nullptr)) {
  // ZeRO 2/3 reuse a unit's gradient buffer before the zb schedule's
  // deferred products run: they go through this object's buffers.
  if (opt_.zero >= 2 && layout.deferred_weights()) {
    deferred_ = layout.deferred_weights();
    deferred_->set_home(this);
  }
}

DataParallel::DataParallel(const comm::ProcessGrid& grid, const model::ModelConfig& mcfg, const model::StagePlan& plan,
                           DataParallelOptions opt)
    : opt_(opt),
      data_comm_(grid.comm(comm::Group::Data)),
      mcfg_(mcfg),
      plan_(plan),
      data_size_(grid.size(comm::Group::Data)),
      data_rank_(grid.rank(comm::Group::Data)),
      split_(split(grid, mcfg, plan_, opt)),
      store_(split_.specs, split_.shards, offload_of(opt)) {
  for (const auto& s : split_.specs) model_numel_ += s.numel();
  for (auto& e : split_.engines) {
    // The tied embedding (the head reads it too) lives in the Data-group
    // engine that holds it: the trainable one, or under LoRA the frozen one
    // and, with adapters on it, the trainable one too.
    bool embed = false;
    for (const auto& s : e.layout.specs()) embed = embed || model::unit_of(s.name, mcfg.n_layers) == 0;
    ZeroEngineConfig zc{opt_.zero, opt_.overlap, opt_.bucket_bytes, embed && mcfg.tie_embeddings,
                        double(data_size_), e.frozen, embed && !e.frozen && mcfg.lora.targets.embeddings};
    zc.deferred = deferred_here(opt_, e);
    zc.embedding_here = plan_.has_embedding();
    zc.head_here = plan_.has_head();
    engines_.push_back(std::make_unique<ZeroEngine>(std::move(e.group), std::move(e.layout), store_, e.base, zc));
    if (!e.frozen && !e.experts) data_engine_ = engines_.back().get();
    if (!e.frozen && e.experts) {
      expert_engine_ = engines_.back().get();
      expert_base_ = e.base;
    }
  }
  EXA_REQUIRE(data_engine_ != nullptr || mcfg.frozen,
              "DataParallel: the model has no trainable tensor outside the experts");
  split_ = Split{};
  if (expert_parallel() && opt_.zero == 0) ep_sum_ = comm::make_mpi_communicator(grid.comm(comm::Group::Ep));
  if (grid.size(comm::Group::Tp) > 1)
    tp_grads_ = std::make_unique<tensor::ReplicatedGradients>(
        comm::make_mpi_communicator(grid.comm(comm::Group::Tp)),
        plan_.etp > 1 && plan_.etp < plan_.tp ? tensor::make_expert_tp_comm(grid, int(plan_.etp), comm::Backend::Mpi)
                                              : nullptr,
        store_, plan_);
  if (opt_.zero == 0) {
    w_ = model::bind_values(mcfg_, plan_, store_);
    g_ = model::bind_grads(mcfg_, plan_, store_);
  } else {
    w_ = model::bind_weights<float, Device>(mcfg_, plan_,
                                            [&](const model::ParamSpec& s) { return engine_of(s.name).work_value(s.name); });
    g_ = model::bind_weights<float, Device>(mcfg_, plan_,
                                            [&](const model::ParamSpec& s) { return engine_of(s.name).work_grad(s.name); });
  }
  if (store_.value_tier() != nullptr) {
    // ZeRO 0: the model reads the store, and the hook keeps only the
    // experts in use resident. ZeRO 1-3: it reads the engines' working
    // copies; the store's parts (the masters) stay offloaded but for the
    // optimizer's and the reductions' passes.
    if (opt_.zero == 0) offload_ = std::make_unique<model::ExpertOffload>(store_, mcfg.n_layers, opt_.offload_prefetch);
    log::info("expert offload: {:.1f} MiB of routed experts' values and gradients{} in {}{}",
              double(store_.value_tier()->offloaded_bytes() + store_.grad_tier()->offloaded_bytes()) / 1048576.0,
              opt_.zero > 0 ? " (this rank's ZeRO parts)" : "",
              OffloadFile::host_memory_tier() ? std::string("host memory (CUDA managed, prefetched on a stream of its own)")
                                              : opt_.offload_dir + " (a file per rank, removed at exit)",
              offload_ ? fmt::format("; prefetch depth {}", opt_.offload_prefetch)
                       : std::string("; ZeRO's working copies stay resident"));
  }
  if (mcfg.frozen) return;  // a forward-only copy (a teacher): the trained model's lines say it all
  auto& g = data_engine_->group();
  if (g.size() > 1 || opt_.zero > 0)
    log::info("data parallel: dp {}, zero {}, {}, gradient {}{}", g.size(), opt_.zero, g.describe(),
              opt_.zero >= 1 ? "reduce-scatter per unit" : "allreduce in buckets of ",
              opt_.zero >= 1 ? std::string() : fmt::format("{:.1f} MiB", opt_.bucket_bytes / 1048576.0),
              opt_.overlap ? ", overlapped with backward" : ", after backward (comm.overlap = false)");
  if (expert_parallel())
    log::info("expert parallel: ep {}, experts [{}, {}) of {} here; expert gradients over {} expert-data ranks ({})",
              grid.size(comm::Group::Ep), plan_.expert_begin, plan_.expert_end, mcfg.n_experts,
              expert_engine_->group().size(), expert_engine_->group().describe());
}

DataParallel::~DataParallel() {
  // Unwinding from an error mid-step can leave W pending: set_home then
  // refuses, and a destructor must not throw (the error would be lost).
  if (deferred_ && deferred_->home() == this) {
    try {
      deferred_->set_home(nullptr);
    } catch (...) {
    }
  }
}

pipeline::GradientHome::Place DataParallel::locate(const float* grad) const {
  Place p;
  for (std::size_t i = 0; i < engines_.size(); ++i) {
    if (!engines_[i]->locate_grad(grad, p.unit, p.offset)) continue;
    EXA_REQUIRE(engines_[i]->deferred(),
                "DataParallel: a deferred weight gradient in the ZeRO buffers of an engine without deferred "
                "buffers (the routed experts', whose products are not deferred, or a frozen one)");
    p.owner = int(i);
    return p;
  }
  return {};
}

float* DataParallel::open_deferred(int owner, int unit) { return engines_[std::size_t(owner)]->open_deferred(unit); }

void DataParallel::close_deferred(int owner, int unit) { engines_[std::size_t(owner)]->close_deferred(unit); }

ZeroEngine& DataParallel::engine_of(const std::string& name) const {
  for (const auto& e : engines_)
    if (e->holds(name)) return *e;
  throw Error(fmt::format("DataParallel: no engine holds '{}'", name));
}

void DataParallel::initialize(std::uint64_t seed, const std::function<bool(const std::string&)>& only) {
  store_.initialize(seed, only);
  params_updated();
}

void DataParallel::params_updated() {
  for (auto& e : engines_) e->params_updated();
  release_offloaded();
}

void DataParallel::params_stepped() {
  for (auto& e : engines_)
    if (!e->frozen()) e->params_updated();
  release_offloaded();
}

void DataParallel::release_offloaded() {
  if (offload_) offload_->release_all();
  else if (const auto& file = store_.offload_file()) file->release_all();
}

DataParallel::Flat DataParallel::replica_values(std::size_t i) {
  if (opt_.zero == 0) return store_.value(i);
  if (opt_.zero == 3) return Flat();
  const auto& spec = store_.spec(i);
  ZeroEngine& e = engine_of(spec.name);
  e.complete_replica();
  return Flat(e.work_value(spec.name), model::local_box(spec, plan_, mcfg_).numel());
}

bool DataParallel::has_residual(const std::string& name) const { return engine_of(name).has_residuals(); }

DataParallel::Flat DataParallel::residual(const std::string& name) const { return engine_of(name).residual(name); }

void DataParallel::scale_residuals(float s) {
  for (auto& e : engines_) e->scale_residuals(s);
}

void DataParallel::begin_step() {
  for (auto& e : engines_) e->begin_step();
}

void DataParallel::set_step(std::int64_t step) {
  for (auto& e : engines_) e->group().set_step(opt_.seed, step);
}

void DataParallel::set_sync(bool sync) {
  for (auto& e : engines_) e->set_sync(sync);
}

void DataParallel::finish_gradients() {
  for (auto& e : engines_) e->finish_gradients();
  if (tp_grads_) tp_grads_->reduce(store_);
}

Reduction DataParallel::norm_reduction() {
  Reduction data = data_norm_reduction();
  if (!tp_grads_) return data;
  // Tensor parallelism: the split tensors' elements are spread over the Tp
  // group, the replicated ones are the same on every Tp rank: sum the first
  // over Tp and count the second once. Each part is summed as `all` sums
  // it: the ZeRO parts over the Data group, and at zero 0 the experts over
  // Ep. Under 1 < etp < tp the experts' split tensors repeat in tp/etp
  // blocks: the Tp sum takes etp/tp of each.
  return [this, data](double x) {
    const double all = data ? data(x) : x;
    const auto n = tp_grads_->sq_norms(store_);
    double rep = n.data_whole + n.expert_whole, repeats = n.expert_repeats;
    if (opt_.zero > 0) {
      rep = data_engine_->group().sum(rep);
      repeats = data_engine_->group().sum(repeats);
    } else if (expert_parallel()) {
      double experts[2] = {n.expert_whole, repeats};
      ep_sum_->allreduce(experts, experts, 2);
      rep = n.data_whole + experts[0];
      repeats = experts[1];
    }
    double split = all - rep - repeats;
    tp_grads_->comm().allreduce(&split, &split, 1);
    return split + rep;
  };
}

Reduction DataParallel::part_sum() {
  if (opt_.zero == 0) return {};
  return [this](double x) { return data_engine_->group().sum(x); };
}

Reduction DataParallel::data_norm_reduction() {
  // zero >= 1: every element is one rank's part, once over the Data group
  // (the expert parts: once per ExpertData group, and the Ep ranks hold
  // different experts).
  if (opt_.zero > 0) return part_sum();
  if (!expert_parallel()) return {};  // replicas: every rank already has the whole norm
  // zero 0 with experts: the Data-group tensors are replicas, the experts
  // are spread over the Ep group.
  return [this](double) {
    const Flat& g = store_.grads();
    const double data = sq_norm(range(g, 0, expert_base_));
    double experts = sq_norm(range(g, expert_base_, store_.trainable_numel() - expert_base_));
    ep_sum_->allreduce(&experts, &experts, 1);
    return data + experts;
  };
}

DataParallelMemory DataParallel::memory() const {
  DataParallelMemory m;
  m.params = bytes(store_.values());
  m.grads = bytes(store_.grads());
  for (const auto& e : engines_) {
    m.params += e->work_param_bytes();
    m.grads += e->work_grad_bytes();
    m.buffers += e->buffer_bytes();
  }
  // The experts' master parts: the tail of the store under expert
  // parallelism, their own tensors' pieces otherwise.
  double expert_elems = 0;
  for (std::size_t i = 0; i < store_.size(); ++i)
    if (store_.spec(i).reduce == model::ReduceGroup::ExpertData) expert_elems += double(store_.shard(i).count);
  m.expert_master = expert_elems * sizeof(float);
  m.expert_params = m.expert_master;
  m.expert_grads = m.expert_master;
  for (const auto& e : engines_)
    if (e->layout().specs().front().reduce == model::ReduceGroup::ExpertData && !plan_.all_experts(mcfg_)) {
      m.expert_params += e->work_param_bytes();
      m.expert_grads += e->work_grad_bytes();
    }
  return m;
}

void DataParallel::before_forward(int unit) {
  for (auto& e : engines_) e->before_forward(unit);
}

void DataParallel::experts_routed(int unit, const std::vector<std::uint8_t>& used) {
  if (offload_) offload_->experts_routed(unit, used);
}

void DataParallel::after_forward(int unit, const std::vector<std::uint8_t>& experts_used) {
  if (offload_) offload_->after_forward(unit, experts_used);
}

void DataParallel::before_backward(int unit) {
  for (auto& e : engines_) e->before_backward(unit);
  if (offload_) offload_->before_backward(unit);
}

void DataParallel::before_recompute(int unit) {
  for (auto& e : engines_) e->before_recompute(unit);
}

void DataParallel::after_backward(int unit) {
  for (auto& e : engines_) e->after_backward(unit);
  if (offload_) offload_->after_backward(unit);
}

}  // namespace exa::parallel::data
