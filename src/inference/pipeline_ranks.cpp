#include "inference/pipeline_ranks.hpp"

#include "comm/mpi_env.hpp"
#include "core/error.hpp"

namespace exa::inference {

namespace {

using Flat = Kokkos::View<float*, Layout, Device, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;

Flat flat(const View2<float>& x) { return Flat(x.data(), x.size()); }

}  // namespace

PipelineRanks::PipelineRanks(MPI_Comm comm, int pp) {
  const int world = comm_size(comm), rank = comm_rank(comm);
  EXA_REQUIRE(pp >= 1 && world % pp == 0,
              "--pp {} does not divide the {} ranks: run on a multiple of the pipeline stages (mpiexec -n {})", pp,
              world, pp);
  stages_ = pp;
  replicas_ = world / pp;
  stage_ = rank / replicas_;
  replica_ = rank % replicas_;
  MPI_Comm_split(comm, replica_, stage_, &pipe_);
  p2p_ = comm::make_mpi_communicator(pipe_);
}

void PipelineRanks::use_transport(comm::Backend backend) { p2p_ = comm::make_transport(pipe_, backend); }

PipelineRanks::~PipelineRanks() {
  p2p_.reset();
  if (pipe_ != MPI_COMM_NULL) MPI_Comm_free(&pipe_);
}

PipelineRanks::Input PipelineRanks::input(const model::StageModel<float>::Tokens& tokens, const View2<float>& hidden,
                                          model::MicroBatchShape shape) const {
  Input x;
  if (first()) {
    x.tokens = tokens;
  } else {
    p2p_->irecv(flat(hidden), stage_ - 1).wait();
    x.hidden = hidden;
    x.shape = shape;
  }
  return x;
}

void PipelineRanks::forward_and_send(model::Transformer<float>& m, const model::Weights<float, Device>& w,
                                     const Input& x) const {
  auto& c = m.forward(w, x);
  // NCCL reads device memory on its own stream: the forward must be done.
  if (p2p_->device_memory()) Kokkos::fence();
  p2p_->isend(flat(c.out), stage_ + 1).wait();
  m.release(c);
}

}  // namespace exa::inference
