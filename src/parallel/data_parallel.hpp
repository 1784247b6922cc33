#pragma once
// Plain data parallelism: every rank holds the whole model, computes the
// gradient of its slice of the global batch, and the gradients are averaged
// over the data-parallel group after the backward pass. This is the
// synchronous baseline (zero = 0, no bucketing, no overlap); issue 4 replaces
// it with bucketed, overlapped and sharded (ZeRO) variants behind the same
// call.
//
// The group is the ProcessGrid's Data group (dp × cp), reached through the
// exa::comm::Communicator interface (MPI backend): a flat allreduce, or with
// `hierarchical` the node-local reduce-scatter / inter-node allreduce /
// node-local allgather over (DataNodeLocal, DataInterNode), whose nodes come
// from parallel.ranks_per_node (0 = detect). The sum is then scaled by 1/dp.
#include <cstdint>
#include <memory>

#include "comm/communicator.hpp"
#include "comm/hierarchical.hpp"
#include "comm/process_grid.hpp"
#include "core/types.hpp"

namespace exa::parallel {

class DataParallel {
 public:
  // Collective over the grid's Data group. `hierarchical` throws exa::Error
  // when the nodes hold different numbers of Data ranks.
  explicit DataParallel(const comm::ProcessGrid& grid, bool hierarchical = false);
  int size() const { return size_; }  // dp
  int rank() const { return rank_; }  // dp rank
  bool hierarchical() const { return hier_.local != nullptr; }

  // grads <- mean over the group (in place). The MPI backend stages device
  // memory through host mirrors (MPI here cannot read device memory).
  void average(const View1<float>& grads) const;
  // Sum of a scalar over the group.
  double sum(double x) const;
  std::int64_t sum(std::int64_t x) const;

 private:
  int size_ = 1, rank_ = 0, group_size_ = 1;
  std::unique_ptr<comm::Communicator> flat_;  // the Data group
  comm::HierarchicalComms hier_;              // set when hierarchical
};

}  // namespace exa::parallel
