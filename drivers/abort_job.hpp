#pragma once
// The end of a job on one rank's error (the training drivers).
#include <fmt/format.h>
#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

namespace exa::driver {

// An error once the ranks work apart (training): it may be this rank's
// alone while the others wait for it in a collective, so this rank says
// what it is and ends the job (MPI_Abort, exit 1) rather than leave them
// hanging until resilience.timeout_s. Every rank that has the error says so,
// on stderr and in `dir`/error.rank<N>.log: a launcher tearing the job down
// on the abort may drop the last lines of a rank's output (MPICH's hydra
// did so about once in twenty aborts here, before the second's wait below),
// never the file.
[[noreturn]] inline void abort_job(int rank, const std::string& program, const std::string& what,
                                   const std::string& dir) {
  const std::string line = fmt::format("{}: error: {}{}\n", program, rank == 0 ? "" : fmt::format("(rank {}) ", rank), what);
  std::fputs(line.c_str(), stderr);
  std::fflush(stderr);
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  std::ofstream(std::filesystem::path(dir) / fmt::format("error.rank{}.log", rank)) << line;
  // A moment for the launcher to forward the line before the abort tears
  // the job down (the watchdog waits the same; the job is lost either way).
  std::this_thread::sleep_for(std::chrono::seconds(1));
  MPI_Abort(MPI_COMM_WORLD, 1);
  std::abort();
}

}  // namespace exa::driver
