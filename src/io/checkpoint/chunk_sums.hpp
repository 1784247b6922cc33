#pragma once
// Private to examoe_checkpoint: per-chunk checksums of a dataset.
//
// A dataset of N elements is cut into chunks of C consecutive elements of
// its global row-major order (chunk k holds [k C, min(N, (k+1) C))). A
// chunk's checksum is the dataset checksum (kernels/checksum.hpp) restricted
// to its elements, so it too is a sum of per-element terms that any layout
// computes from its pieces, and the chunk checksums of a dataset add up to
// the dataset's checksum. docs/checkpoint-format.md "Checksums".
#include <cstdint>
#include <vector>

#include "core/kokkos_shims.hpp"
#include "io/checkpoint/flat_range.hpp"
#include "kernels/box_index.hpp"

namespace exa::io {

using HostFlat = Kokkos::View<float*, Kokkos::LayoutRight, Kokkos::HostSpace>;

// Chunks of a dataset of `numel` elements (0 for an empty one).
std::int64_t chunk_count(std::int64_t numel, std::int64_t chunk_elements);

// Adds to partial[k] (chunk_count entries) the checksum terms of the given
// ranges of a box's flattening, taken from `buf`, whose first element is the
// box's element `base`; `map` gives each box element's global index. A
// box's global indices grow along its flattening, so each range splits into
// runs of one chunk each. `host_loop` sums in a plain loop on the calling
// thread instead of a Kokkos kernel (a background writer, which must not
// launch kernels while the main thread trains); the sums are the same.
void add_chunk_partials(const HostFlat& buf, std::int64_t base, const kernels::BoxIndex& map,
                        const std::vector<FlatRange>& ranges, std::int64_t chunk_elements,
                        std::vector<std::uint64_t>& partial, bool host_loop = false);

// The elements [begin, end) of the dataset chunk k covers.
FlatRange chunk_range(std::int64_t k, std::int64_t numel, std::int64_t chunk_elements);

}  // namespace exa::io
