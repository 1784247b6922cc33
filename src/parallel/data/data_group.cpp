#include "parallel/data/data_group.hpp"

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/profiling.hpp"

namespace exa::parallel::data {

DataGroup::DataGroup(const comm::ProcessGrid& grid, bool hierarchical, int channels, comm::Backend backend,
                     comm::Group over)
    : size_(grid.size(over)),
      rank_(grid.rank(over)),
      block_index_(rank_),
      channels_(channels),
      scalar_(comm::make_mpi_communicator(grid.comm(over))) {
  EXA_ASSERT(channels >= 1);
  EXA_ASSERT(over == comm::Group::Data || (over == comm::Group::ExpertData && !hierarchical));
  if (backend == comm::Backend::Nccl) {
    EXA_REQUIRE(comm::nccl_available(), "comm.backend = \"nccl\" needs a CUDA build with NCCL and a visible GPU "
                "(this build or node has none); set comm.backend = \"mpi\"");
    bulk_ = comm::make_nccl_communicator(grid.comm(over));
  } else {
    bulk_ = comm::make_mpi_communicator(grid.comm(over));
  }
  if (hierarchical) {
    for (int c = 0; c < channels; ++c) hier_.push_back(comm::make_hierarchical(grid, comm::Group::Data, backend));
    block_index_ = static_cast<int>(comm::hierarchical_block_index(*hier_[0].local, *hier_[0].inter));
  }
}

comm::HierarchicalComms& DataGroup::channel(int c) {
  EXA_ASSERT(c >= 0 && c < channels_);
  return hier_[static_cast<std::size_t>(c)];
}

std::string DataGroup::describe() const {
  if (hierarchical())
    return fmt::format("hierarchical {} collectives over {} ranks ({} node-local x {} inter-node)",
                       bulk_->backend(), size_, hier_[0].local->size(), hier_[0].inter->size());
  return fmt::format("flat {} collectives over {} ranks", bulk_->backend(), size_);
}

comm::Request DataGroup::iallreduce(const View1<float>& v, int c) {
  // The buffer's producers must be done before MPI reads it; that wait is
  // compute (on a GPU, the unit's kernels), so it is outside the comm timer.
  Kokkos::fence();
  ScopedRegion region("comm/launch");
  if (hierarchical()) return comm::ihierarchical_allreduce(channel(c), v);
  return bulk_->iallreduce(v);
}

comm::Request DataGroup::ireduce_scatter(const View1<float>& send, const View1<float>& recv, int c) {
  EXA_ASSERT(send.extent(0) == recv.extent(0) * std::size_t(size_));
  Kokkos::fence();
  ScopedRegion region("comm/launch");
  if (hierarchical()) return comm::ihierarchical_reduce_scatter(*channel(c).local, *channel(c).inter, send, recv);
  return bulk_->ireduce_scatter(send, recv);
}

comm::Request DataGroup::iallgather(const View1<float>& send, const View1<float>& recv, int c) {
  EXA_ASSERT(recv.extent(0) == send.extent(0) * std::size_t(size_));
  Kokkos::fence();
  ScopedRegion region("comm/launch");
  if (hierarchical()) return comm::ihierarchical_allgather(*channel(c).local, *channel(c).inter, send, recv);
  return bulk_->iallgather(send, recv);
}

void DataGroup::wait(comm::Request& r) {
  if (r.done()) return;
  ScopedRegion region("comm/wait");
  r.wait();
}

bool DataGroup::test(comm::Request& r) {
  if (r.done()) return true;
  ScopedRegion region("comm/progress");
  return r.test();
}

double DataGroup::sum(double x) {
  ScopedRegion region("comm/scalar");
  double y = x;
  if (size_ > 1) scalar_->allreduce(&x, &y, 1);
  return y;
}

std::int64_t DataGroup::sum(std::int64_t x) {
  ScopedRegion region("comm/scalar");
  std::int64_t y = x;
  if (size_ > 1) scalar_->allreduce(&x, &y, 1);
  return y;
}

}  // namespace exa::parallel::data
