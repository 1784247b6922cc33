#include "parallel/data_parallel.hpp"

#include "core/log.hpp"
#include "core/profiling.hpp"

namespace exa::parallel {

DataParallel::DataParallel(const comm::ProcessGrid& grid, bool hierarchical)
    : size_(grid.sizes().dp),
      rank_(grid.coords().dp),
      group_size_(grid.size(comm::Group::Data)),
      flat_(comm::make_mpi_communicator(grid.comm(comm::Group::Data))) {
  if (hierarchical) {
    hier_ = comm::make_hierarchical(grid, comm::Group::Data, comm::Backend::Mpi);
    log::info("data parallel: hierarchical allreduce over dp {} ({} node-local x {} inter-node)", size_,
              hier_.local->size(), hier_.inter->size());
  }
}

void DataParallel::average(const View1<float>& grads) const {
  if (group_size_ == 1) return;
  ScopedRegion region("comm/dp_allreduce", true);
  if (hier_.local) {
    comm::hierarchical_allreduce(*hier_.local, *hier_.inter, grads);
  } else {
    flat_->allreduce(grads);
  }
  const float inv = 1.0f / static_cast<float>(size_);
  Kokkos::parallel_for(
      "exa::dp_scale", Kokkos::RangePolicy<ExecSpace>(0, grads.extent(0)),
      KOKKOS_LAMBDA(const std::size_t i) { grads(i) *= inv; });
  Kokkos::fence();
}

double DataParallel::sum(double x) const {
  double y = x;
  if (group_size_ > 1) flat_->allreduce(&x, &y, 1);
  return y;
}

std::int64_t DataParallel::sum(std::int64_t x) const {
  std::int64_t y = x;
  if (group_size_ > 1) flat_->allreduce(&x, &y, 1);
  return y;
}

}  // namespace exa::parallel
