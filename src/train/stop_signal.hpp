#pragma once
// exa::train::StopSignal: a batch scheduler's warning (SIGTERM, or SIGUSR1
// from Slurm's `--signal=B:USR1@120` forwarded by scripts/batch/, or
// `scancel --signal=USR1`) becomes "finish this step, checkpoint, exit with
// kStopExitCode", so the job can be requeued and resume where it stopped.
//
//   StopSignal stop;                  // installs the handlers (restored on destruction)
//   ... after each step:  if (stop.agreed(world)) { save(step); break; }
//
// The handler only records the signal: nothing is interrupted, and a second
// signal while the checkpoint is written changes nothing (the save is
// atomic anyway: see src/io/checkpoint/README.md). A signal may reach only
// some ranks (a node's share of a job), so agreed() is collective: every rank
// learns whether any rank was signalled, and all stop after the same step.
#include <mpi.h>

#include <csignal>

#include "comm/watchdog.hpp"

namespace exa::train {

// EX_TEMPFAIL ("try again later"), the watchdog's abort code too: both mean
// "requeue the job; it resumes from the newest checkpoint".
inline constexpr int kStopExitCode = 75;
static_assert(kStopExitCode == comm::kAbortExitCode, "one status means \"requeue and resume\"");

class StopSignal {
 public:
  // Installs handlers for SIGTERM and SIGUSR1 (SA_RESTART, so system calls in
  // progress are not failed with EINTR). Instances may overlap: they share
  // the handlers, which the last one destroyed restores unless a signal was
  // received (then they stay, and later signals stay harmless until exit).
  StopSignal();
  ~StopSignal();
  StopSignal(const StopSignal&) = delete;
  StopSignal& operator=(const StopSignal&) = delete;

  // Collective over `comm` (one small allreduce, bounded by the watchdog):
  // true on every rank once any rank has received a stop signal. Stays true.
  bool agreed(MPI_Comm comm);
  // The signal agreed on (the largest number when ranks got different
  // ones), 0 while none; valid after agreed() returned true.
  int signal() const { return agreed_signal_; }
  // Whether this process has received a stop signal, without asking the
  // other ranks (agreed() is what decides a stop).
  static bool received();

 private:
  int agreed_signal_ = 0;
};

}  // namespace exa::train
