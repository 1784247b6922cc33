#include "train/stop_signal.hpp"

#include <atomic>
#include <cerrno>
#include <cstring>

#include "core/error.hpp"

namespace exa::train {

namespace {

// Written by the handler, read by agreed(): lock-free, so async-signal-safe.
std::atomic<int> g_received{0};
static_assert(std::atomic<int>::is_always_lock_free);
// Instances alive, whether the handlers are ours, and the ones they
// replaced (main thread only).
int g_instances = 0;
bool g_installed = false;
struct sigaction g_old_term {}, g_old_usr1 {};

extern "C" void record_stop_signal(int sig) { g_received.store(sig, std::memory_order_relaxed); }

void install(int sig, struct sigaction* old) {
  struct sigaction sa {};
  sa.sa_handler = record_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  if (::sigaction(sig, &sa, old) != 0) {
    throw Error(fmt::format("cannot install the handler for signal {} ({}): {}", sig, strsignal(sig),
                            std::strerror(errno)));
  }
}

}  // namespace

StopSignal::StopSignal() {
  if (g_instances++ > 0) return;
  g_received.store(0);
  if (!g_installed) {
    install(SIGTERM, &g_old_term);
    install(SIGUSR1, &g_old_usr1);
    g_installed = true;
  }
}

StopSignal::~StopSignal() {
  // After a stop the process is on its way out (checkpoint written, exit
  // kStopExitCode next): the handlers stay, so that a scheduler's later
  // SIGTERM cannot turn the clean stop into a death by signal.
  if (--g_instances > 0 || g_received.load() != 0) return;
  ::sigaction(SIGTERM, &g_old_term, nullptr);
  ::sigaction(SIGUSR1, &g_old_usr1, nullptr);
  g_installed = false;
}

bool StopSignal::agreed(MPI_Comm comm) {
  if (agreed_signal_ != 0) return true;
  const int mine = g_received.load(std::memory_order_relaxed);
  int any = 0;
  MPI_Request req;
  MPI_Iallreduce(&mine, &any, 1, MPI_INT, MPI_MAX, comm, &req);
  int size = 1;
  MPI_Comm_size(comm, &size);
  comm::bounded_wait(&req, "MPI_Iallreduce (stop signal)", size);
  agreed_signal_ = any;
  return any != 0;
}

bool StopSignal::received() { return g_received.load(std::memory_order_relaxed) != 0; }

}  // namespace exa::train
