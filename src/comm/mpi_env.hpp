#pragma once
// MPI lifetime and identity. Construct one MpiEnvironment at the top of main,
// before exa::KokkosRuntime (Kokkos may bind devices by local rank).
#include <mpi.h>

#include <string>

namespace exa {

class MpiEnvironment {
 public:
  MpiEnvironment(int& argc, char**& argv);
  ~MpiEnvironment();
  MpiEnvironment(const MpiEnvironment&) = delete;
  MpiEnvironment& operator=(const MpiEnvironment&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }

 private:
  int rank_ = 0;
  int size_ = 1;
};

// Rank and size of a communicator, as values.
int comm_rank(MPI_Comm comm);
int comm_size(MPI_Comm comm);

// "MPICH Version: 4.0.2 ..." (first line of MPI_Get_library_version).
std::string mpi_library_version();

}  // namespace exa
