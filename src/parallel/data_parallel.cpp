#include "parallel/data_parallel.hpp"

#include "core/profiling.hpp"

namespace exa::parallel {

DataParallel::DataParallel(MPI_Comm comm) : comm_(comm) {
  MPI_Comm_size(comm_, &size_);
  MPI_Comm_rank(comm_, &rank_);
}

void DataParallel::average(const View1<float>& grads) const {
  if (size_ == 1) return;
  ScopedRegion region("comm/dp_allreduce", true);
  auto host = Kokkos::create_mirror_view(grads);
  Kokkos::deep_copy(host, grads);
  MPI_Allreduce(MPI_IN_PLACE, host.data(), static_cast<int>(host.extent(0)), MPI_FLOAT, MPI_SUM, comm_);
  const float inv = 1.0f / static_cast<float>(size_);
  for (std::size_t i = 0; i < host.extent(0); ++i) host(i) *= inv;
  Kokkos::deep_copy(grads, host);
}

double DataParallel::sum(double x) const {
  double y = x;
  if (size_ > 1) MPI_Allreduce(&x, &y, 1, MPI_DOUBLE, MPI_SUM, comm_);
  return y;
}

std::int64_t DataParallel::sum(std::int64_t x) const {
  std::int64_t y = x;
  if (size_ > 1) MPI_Allreduce(&x, &y, 1, MPI_INT64_T, MPI_SUM, comm_);
  return y;
}

}  // namespace exa::parallel
