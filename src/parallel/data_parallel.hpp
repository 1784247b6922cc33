#pragma once
// Plain data parallelism: every rank holds the whole model, computes the
// gradient of its slice of the global batch, and the gradients are averaged
// over the data-parallel group after the backward pass. This is the
// synchronous baseline (zero = 0, no bucketing, no overlap); issue 4 replaces
// it with bucketed, overlapped and sharded (ZeRO) variants behind the same
// call.
#include <mpi.h>

#include "core/types.hpp"

namespace exa::parallel {

class DataParallel {
 public:
  explicit DataParallel(MPI_Comm comm);
  int size() const { return size_; }
  int rank() const { return rank_; }
  MPI_Comm comm() const { return comm_; }

  // grads <- mean over the group (in place). Host staging keeps it correct
  // with an MPI that cannot read device memory.
  void average(const View1<float>& grads) const;
  // Sum of a scalar over the group.
  double sum(double x) const;
  std::int64_t sum(std::int64_t x) const;

 private:
  MPI_Comm comm_;
  int size_ = 1, rank_ = 0;
};

}  // namespace exa::parallel
