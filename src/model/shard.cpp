#include "model/shard.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.hpp"

namespace exa::model {

std::int64_t Box::numel() const {
  std::int64_t n = 1;
  for (auto e : extent) n *= e;
  return n;
}

Box whole_box(const std::vector<std::int64_t>& shape) {
  return Box{std::vector<std::int64_t>(shape.size(), 0), shape};
}

bool is_whole(const Box& box, const std::vector<std::int64_t>& shape) { return box == whole_box(shape); }

std::string box_str(const Box& b) {
  return fmt::format("offset [{}] extent [{}]", fmt::join(b.offset, ", "), fmt::join(b.extent, ", "));
}

Box partition_box(const ParamSpec& spec, const Box& within, int dim, int parts, int index) {
  const int n = static_cast<int>(spec.shape.size());
  EXA_REQUIRE(within.offset.size() == spec.shape.size() && within.extent.size() == spec.shape.size(),
              "partition_box: the box {} does not have one entry per dimension of '{}' (shape [{}])",
              box_str(within), spec.name, fmt::join(spec.shape, ", "));
  EXA_REQUIRE(dim >= 0 && dim < n, "partition_box: '{}' has {} dimensions; dimension {} does not exist", spec.name, n,
              dim);
  EXA_REQUIRE(parts >= 1 && index >= 0 && index < parts, "partition_box: part {} of {} of '{}' does not exist", index,
              parts, spec.name);
  const auto d = static_cast<std::size_t>(dim);
  const std::int64_t extent = within.extent[d];
  EXA_REQUIRE(extent % parts == 0,
              "cannot split tensor '{}' into {} equal parts along dimension {}: its extent there is {}, which {} "
              "does not divide; choose a parallel degree that divides {} (or resize the model)",
              spec.name, parts, dim, extent, parts, extent);
  Box b = within;
  b.extent[d] = extent / parts;
  b.offset[d] = within.offset[d] + b.extent[d] * index;
  return b;
}

Box partition_box(const ParamSpec& spec, int dim, int parts, int index) {
  return partition_box(spec, whole_box(spec.shape), dim, parts, index);
}

Shard resolve_shard(const Shard& s, const std::string& name, const std::vector<std::int64_t>& shape) {
  Shard r = s;
  if (r.box.offset.empty() && r.box.extent.empty()) r.box = whole_box(shape);
  const std::size_t n = shape.size();
  EXA_REQUIRE(r.box.offset.size() == n && r.box.extent.size() == n,
              "tensor '{}' has {} dimensions [{}] but its box is {}", name, n, fmt::join(shape, ", "),
              box_str(r.box));
  for (std::size_t d = 0; d < n; ++d) {
    EXA_REQUIRE(r.box.offset[d] >= 0 && r.box.extent[d] >= 0 && r.box.offset[d] + r.box.extent[d] <= shape[d],
                "the box {} of tensor '{}' [{}] leaves the tensor in dimension {}", box_str(r.box), name,
                fmt::join(shape, ", "), d);
  }
  const std::int64_t m = r.box.numel();
  EXA_REQUIRE(r.offset >= 0 && r.count >= 0 && r.offset + r.count <= m,
              "the shard [{}, {}) of tensor '{}' lies outside its box {} of {} elements", r.offset, r.offset + r.count,
              name, box_str(r.box), m);
  return r;
}

kernels::BoxIndex box_index(const Shard& resolved, const std::vector<std::int64_t>& shape) {
  return kernels::box_index(shape, resolved.box.offset, resolved.box.extent);
}

}  // namespace exa::model
