// What goes where in a checkpoint: the tensors (and their optimizer moments
// and the /state arrays) as items, each a dataset with this rank's shard of
// it, their validation, and who writes what of each (piece covers).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <map>
#include <optional>
#include <set>

#include "comm/mpi_env.hpp"
#include "core/error.hpp"
#include "io/checkpoint/box_holders.hpp"
#include "io/checkpoint/checkpoint.hpp"
#include "io/checkpoint/checkpoint_internal.hpp"
#include "io/checkpoint/chunk_sums.hpp"
#include "io/checkpoint/piece_cover.hpp"
#include "kernels/checksum.hpp"

namespace exa::io {

std::vector<CheckpointTensor> checkpoint_tensors(const model::ParameterStore& params) {
  std::vector<CheckpointTensor> t;
  t.reserve(params.size());
  for (std::size_t i = 0; i < params.size(); ++i) {
    t.push_back(CheckpointTensor{params.spec(i).name, params.spec(i).shape, params.shard(i), params.value(i)});
  }
  return t;
}

namespace detail {

std::string shape_str(const std::vector<std::int64_t>& s) { return fmt::format("[{}]", fmt::join(s, ", ")); }

void validate(const std::vector<CheckpointTensor>& tensors, const OptimizerState* optim) {
  std::set<std::string> names;
  for (const auto& t : tensors) {
    EXA_REQUIRE(!t.name.empty() && t.name.find('/') == std::string::npos && t.name != "." && t.name != "..",
                "checkpoint: tensor name '{}' cannot be an HDF5 dataset name (empty, '.', '..' or holding '/')",
                t.name);
    EXA_REQUIRE(names.insert(t.name).second, "checkpoint: tensor '{}' is listed twice", t.name);
    EXA_REQUIRE(!t.shape.empty(), "checkpoint: tensor '{}' has no dimensions (scalars are not supported)", t.name);
    for (auto s : t.shape)
      EXA_REQUIRE(s >= 0, "checkpoint: tensor '{}' has a negative extent in {}", t.name, shape_str(t.shape));
    model::resolve_shard(t.shard, t.name, t.shape);  // exa::Error when the box or range does not fit
    EXA_REQUIRE(static_cast<std::int64_t>(t.value.extent(0)) == t.shard.count,
                "checkpoint: tensor '{}' holds {} values but its shard has {} elements", t.name, t.value.extent(0),
                t.shard.count);
    if (optim) {
      // A tensor without moments is frozen (LoRA's base model): it has none.
      auto it = optim->find(t.name);
      if (it == optim->end()) continue;
      EXA_REQUIRE(static_cast<std::int64_t>(it->second.exp_avg.extent(0)) == t.shard.count &&
                      static_cast<std::int64_t>(it->second.exp_avg_sq.extent(0)) == t.shard.count,
                  "checkpoint: the optimizer moments of '{}' hold {} and {} values but its shard has {} elements",
                  t.name, it->second.exp_avg.extent(0), it->second.exp_avg_sq.extent(0), t.shard.count);
    }
  }
  if (optim) {
    for (const auto& [name, m] : *optim) {
      EXA_REQUIRE(names.count(name) != 0, "checkpoint: the optimizer state names '{}', which is not a model tensor",
                  name);
    }
  }
}

std::vector<Item> items_of(const std::vector<CheckpointTensor>& tensors, const OptimizerState* optim) {
  std::vector<Item> items;
  auto shard = [](const CheckpointTensor& t) { return model::resolve_shard(t.shard, t.name, t.shape); };
  for (const auto& t : tensors) items.push_back(Item{kModelGroup, t.name, t.shape, shard(t), t.value});
  if (optim) {
    for (const auto& t : tensors)
      if (const auto it = optim->find(t.name); it != optim->end())
        items.push_back(Item{kExpAvgGroup, t.name, t.shape, shard(t), it->second.exp_avg});
    for (const auto& t : tensors)
      if (const auto it = optim->find(t.name); it != optim->end())
        items.push_back(Item{kExpAvgSqGroup, t.name, t.shape, shard(t), it->second.exp_avg_sq});
  }
  return items;
}

std::vector<ResidualItem> residual_items(const std::vector<CheckpointTensor>& tensors, const OptimizerState& optim,
                                         MPI_Comm comm, const std::map<std::string, std::int64_t>* file_rows) {
  struct Held {
    const CheckpointTensor* t;
    model::Shard box;  // resolved: the tensor's box
    View1<float> residual;
    bool here;
  };
  std::vector<Held> held;
  for (const auto& t : tensors) {
    const auto it = optim.find(t.name);
    if (it == optim.end() || !it->second.has_residual) continue;
    if (file_rows && file_rows->count(t.name) == 0) continue;
    const model::Shard r = model::resolve_shard(t.shard, t.name, t.shape);
    const auto n = std::int64_t(it->second.residual.extent(0));
    // Before the collective below: a rank-local throw here would leave the
    // others waiting in it.
    EXA_ASSERT(n == 0 || n == r.box.numel());
    held.push_back(Held{&t, r, it->second.residual, n > 0});
  }
  // Who holds the same box.
  std::vector<std::optional<model::Box>> boxes;
  for (const auto& h : held) boxes.push_back(h.here ? std::optional<model::Box>(h.box.box) : std::nullopt);
  const auto who = box_holders(boxes, comm);
  std::vector<ResidualItem> out;
  for (std::size_t i = 0; i < held.size(); ++i) {
    const Held& h = held[i];
    EXA_REQUIRE(who[i].most > 0, "checkpoint: no rank holds the top-k residual of '{}'", h.t->name);
    const std::int64_t holders = who[i].most, before = who[i].holder;
    EXA_REQUIRE(who[i].fewest == holders, "checkpoint: the boxes of '{}' are held by different numbers of ranks ({} "
                "and {}), so its top-k residuals have no common row count", h.t->name, who[i].fewest, holders);
    const std::int64_t rows = file_rows ? file_rows->at(h.t->name) : holders;
    std::vector<std::int64_t> shape{rows};
    shape.insert(shape.end(), h.t->shape.begin(), h.t->shape.end());
    model::Shard s;
    if (h.here) {
      s.box.offset.push_back(file_rows ? 0 : before);
      s.box.extent.push_back(file_rows ? rows : 1);
      s.box.offset.insert(s.box.offset.end(), h.box.box.offset.begin(), h.box.box.offset.end());
      s.box.extent.insert(s.box.extent.end(), h.box.box.extent.begin(), h.box.box.extent.end());
    } else {
      s.box.offset.assign(shape.size(), 0);
      s.box.extent = shape;
      s.box.extent[0] = 0;
    }
    s.count = s.box.numel();
    s = model::resolve_shard(s, h.t->name, shape);
    // A save writes the caller's residual; a load reads into its own buffers.
    out.push_back(ResidualItem{Item{kResidualGroup, h.t->name, shape, s, file_rows ? View1<float>() : h.residual},
                               h.here ? before : -1, holders, h.residual});
  }
  return out;
}

Item state_item(const std::string& name, const std::vector<std::int64_t>& shape) {
  model::Shard s = model::resolve_shard(model::Shard{}, name, shape);
  s.count = s.box.numel();
  return Item{kStateGroup, name, shape, s, {}};
}

void check_same_everywhere(const std::vector<Item>& items, MPI_Comm comm) {
  std::string sig;
  for (const auto& it : items) sig += it.path() + shape_str(it.shape) + ";";
  const std::uint64_t h = kernels::checksum_leaf(sig, items.size());
  std::uint64_t lo = 0, hi = 0;
  MPI_Allreduce(&h, &lo, 1, MPI_UINT64_T, MPI_MIN, comm);
  MPI_Allreduce(&h, &hi, 1, MPI_UINT64_T, MPI_MAX, comm);
  EXA_REQUIRE(lo == hi,
              "checkpoint: the ranks disagree on the tensor list (names, shapes or whether optimizer state is "
              "included): every rank must pass the same tensors, each with its own shard");
}

std::vector<PieceCover> gather_pieces(const std::vector<Item>& items, MPI_Comm comm) {
  const int P = comm_size(comm);
  std::vector<long long> mine;
  for (const auto& it : items) {
    for (auto x : it.shard.box.offset) mine.push_back(x);
    for (auto x : it.shard.box.extent) mine.push_back(x);
    mine.push_back(it.shard.offset);
    mine.push_back(it.shard.offset + it.shard.count);
  }
  // The same length on every rank: check_same_everywhere compared the shapes.
  const std::size_t W = mine.size();
  std::vector<long long> all(W * static_cast<std::size_t>(P));
  if (W > 0) {
    MPI_Allgather(mine.data(), static_cast<int>(W), MPI_LONG_LONG, all.data(), static_cast<int>(W), MPI_LONG_LONG,
                  comm);
  }
  std::vector<PieceCover> out;
  std::size_t at = 0;  // the item's first entry in a rank's record
  for (const auto& it : items) {
    const std::size_t n = it.shape.size();
    std::vector<Piece> pieces(static_cast<std::size_t>(P));
    for (int r = 0; r < P; ++r) {
      const long long* x = all.data() + static_cast<std::size_t>(r) * W + at;
      Piece& p = pieces[static_cast<std::size_t>(r)];
      p.box.offset.assign(x, x + n);
      p.box.extent.assign(x + n, x + 2 * n);
      p.range = FlatRange{x[2 * n], x[2 * n + 1]};
    }
    at += 2 * n + 2;
    out.emplace_back(it.shape, std::move(pieces), it.path());
  }
  return out;
}

std::vector<std::size_t> chunk_offsets(const std::vector<Item>& items, const std::vector<std::int64_t>& chunk_elems) {
  std::vector<std::size_t> off{0};
  for (std::size_t i = 0; i < items.size(); ++i) {
    off.push_back(off.back() +
                  static_cast<std::size_t>(chunk_count(model::whole_box(items[i].shape).numel(), chunk_elems[i])));
  }
  return off;
}

}  // namespace detail

}  // namespace exa::io
