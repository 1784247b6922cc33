#include "parallel/data/shard_layout.hpp"

#include <algorithm>

#include "core/error.hpp"
#include "model/unit_hooks.hpp"

namespace exa::parallel::data {

namespace {

std::vector<model::Box> whole_boxes(const std::vector<model::ParamSpec>& specs) {
  std::vector<model::Box> b;
  b.reserve(specs.size());
  for (const auto& s : specs) b.push_back(model::whole_box(s.shape));
  return b;
}

}  // namespace

ShardLayout::ShardLayout(const std::vector<model::ParamSpec>& specs, std::int64_t n_layers, int parts, int index)
    : ShardLayout(specs, whole_boxes(specs), n_layers, parts, index) {}

ShardLayout::ShardLayout(const std::vector<model::ParamSpec>& specs, const std::vector<model::Box>& boxes,
                         std::int64_t n_layers, int parts, int index)
    : parts_(parts), index_(index), specs_(specs) {
  EXA_REQUIRE(parts >= 1 && index >= 0 && index < parts, "ShardLayout: part {} of {} does not exist", index, parts);
  EXA_REQUIRE(boxes.size() == specs.size(), "ShardLayout: {} boxes for {} tensors", boxes.size(), specs.size());
  for (std::size_t i = 0; i < specs.size(); ++i) {
    boxes_.push_back(model::resolve_shard(model::Shard{0, 0, boxes[i]}, specs[i].name, specs[i].shape).box);
  }
  units_.resize(static_cast<std::size_t>(model::n_units(n_layers)));
  for (auto& u : units_) u.first_spec = u.end_spec = specs.size();
  int prev = 0;
  for (std::size_t i = 0; i < specs.size(); ++i) {
    const int u = model::unit_of(specs[i].name, n_layers);
    EXA_REQUIRE(u >= prev, "ShardLayout: tensor '{}' (unit {}) follows a tensor of unit {}; the specs must be in "
                "unit order", specs[i].name, u, prev);
    prev = u;
    auto& unit = units_[static_cast<std::size_t>(u)];
    if (unit.first_spec == specs.size()) unit.first_spec = i;
    unit.end_spec = i + 1;
    spec_unit_.push_back(u);
    spec_offset_.push_back(unit.numel);
    const std::int64_t n = boxes_[i].numel();
    unit.numel += n;
    unit.group_numel[static_cast<std::size_t>(specs[i].reduce)] += n;
  }
  std::int64_t local = 0;
  for (auto& u : units_) {
    u.block = (u.numel + parts - 1) / parts;
    u.padded = u.block * parts;
    u.work_offset = padded_total_;
    numel_ += u.numel;
    padded_total_ += u.padded;
    const std::int64_t first = std::min(u.numel, u.block * index);
    u.local_count = std::min(u.numel, first + u.block) - first;
    u.local_offset = local;
    local += u.local_count;
    max_padded_ = std::max(max_padded_, u.padded);
    max_block_ = std::max(max_block_, u.block);
  }
}

std::vector<model::Shard> ShardLayout::shards() const {
  std::vector<model::Shard> out;
  out.reserve(specs_.size());
  for (std::size_t i = 0; i < specs_.size(); ++i) {
    const Unit& u = units_[static_cast<std::size_t>(spec_unit_[i])];
    // The part's range within the unit, intersected with the tensor's.
    const std::int64_t lo = u.block * index_, hi = std::min(u.numel, lo + u.block);
    const std::int64_t t0 = spec_offset_[i], t1 = t0 + boxes_[i].numel();
    const std::int64_t a = std::max(lo, t0), b = std::min(hi, t1);
    out.push_back(b > a ? model::Shard{a - t0, b - a, boxes_[i]}
                        : model::Shard{std::min(std::max(lo, t0), t1) - t0, 0, boxes_[i]});
  }
  return out;
}

}  // namespace exa::parallel::data
