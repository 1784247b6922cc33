#include "child_process.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.hpp"

extern char** environ;

namespace exa::elastic {

std::string ChildEnd::describe() const {
  if (signal != 0) return fmt::format("killed by signal {} ({})", signal, strsignal(signal));
  return fmt::format("exit code {}", exit_code);
}

namespace {

// Splits what arrived on one pipe into lines; a last line without a newline
// is handed on at the end.
struct LineBuffer {
  std::string pending;
  void feed(const char* data, std::size_t n, const std::function<void(const std::string&)>& emit) {
    pending.append(data, n);
    for (std::size_t nl; (nl = pending.find('\n')) != std::string::npos;) {
      emit(pending.substr(0, nl));
      pending.erase(0, nl + 1);
    }
  }
  void flush(const std::function<void(const std::string&)>& emit) {
    if (!pending.empty()) emit(pending);
    pending.clear();
  }
};

[[noreturn]] void exec_child(const std::vector<std::string>& argv, const std::vector<std::string>& unset_prefixes,
                             int out_fd, int err_fd) {
  dup2(out_fd, STDOUT_FILENO);
  dup2(err_fd, STDERR_FILENO);
  std::vector<std::string> drop;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string var(*e);
    for (const auto& p : unset_prefixes)
      if (var.rfind(p, 0) == 0) drop.push_back(var.substr(0, var.find('=')));
  }
  for (const auto& name : drop) unsetenv(name.c_str());
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  execvp(args[0], args.data());
  std::fprintf(stderr, "examoe-elastic: cannot run %s: %s\n", args[0], std::strerror(errno));
  std::_Exit(127);
}

}  // namespace

ChildEnd run_child(const std::vector<std::string>& argv, const std::vector<std::string>& unset_prefixes,
                   const std::function<void(bool, const std::string&)>& on_line, volatile pid_t* running) {
  EXA_REQUIRE(!argv.empty(), "examoe-elastic: nothing to run");
  int out[2], err[2];
  EXA_REQUIRE(pipe(out) == 0 && pipe(err) == 0, "examoe-elastic: pipe() failed: {}", std::strerror(errno));
  const pid_t pid = fork();
  EXA_REQUIRE(pid >= 0, "examoe-elastic: fork() failed: {}", std::strerror(errno));
  if (pid == 0) {
    close(out[0]);
    close(err[0]);
    exec_child(argv, unset_prefixes, out[1], err[1]);
  }
  *running = pid;
  close(out[1]);
  close(err[1]);
  LineBuffer buf[2];
  pollfd fds[2] = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}};
  int open_fds = 2;
  char chunk[4096];
  while (open_fds > 0) {
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;  // a forwarded signal
      break;
    }
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
      const ssize_t n = read(fds[i].fd, chunk, sizeof chunk);
      if (n < 0 && errno == EINTR) continue;
      const auto emit = [&](const std::string& line) { on_line(i == 1, line); };
      if (n <= 0) {
        buf[i].flush(emit);
        close(fds[i].fd);
        fds[i].fd = -1;
        --open_fds;
      } else {
        buf[i].feed(chunk, std::size_t(n), emit);
      }
    }
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  *running = 0;
  ChildEnd end;
  if (WIFSIGNALED(status)) end.signal = WTERMSIG(status);
  else end.exit_code = WEXITSTATUS(status);
  return end;
}

std::vector<pid_t> descendants_named(pid_t root, const std::string& comm) {
  // Parent of every process, from /proc/<pid>/stat ("pid (comm) state ppid ...").
  std::vector<std::pair<pid_t, pid_t>> parent;
  std::error_code ec;
  for (std::filesystem::directory_iterator it("/proc", ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream f(it->path() / "stat");
    std::string stat;
    std::getline(f, stat);
    const auto close = stat.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(stat.substr(close + 1));
    char state = 0;
    long ppid = 0;
    if (rest >> state >> ppid) parent.emplace_back(pid_t(std::stol(name)), pid_t(ppid));
  }
  std::vector<pid_t> below{root}, out;
  for (std::size_t i = 0; i < below.size(); ++i)
    for (const auto& [pid, pp] : parent)
      if (pp == below[i]) below.push_back(pid);
  for (std::size_t i = 1; i < below.size(); ++i) {
    std::ifstream f("/proc/" + std::to_string(below[i]) + "/comm");
    std::string c;
    if (std::getline(f, c) && c == comm) out.push_back(below[i]);
  }
  return out;
}

}  // namespace exa::elastic
