#pragma once
// A child process for examoe-elastic: started with fork/exec, its stdout and
// stderr read line by line (so the supervisor can watch the job's log while
// passing it through), and its end told as an exit code or a signal.
#include <sys/types.h>

#include <functional>
#include <string>
#include <vector>

namespace exa::elastic {

struct ChildEnd {
  int exit_code = -1;  // when it exited
  int signal = 0;      // when a signal ended it
  bool ok() const { return signal == 0 && exit_code == 0; }
  std::string describe() const;
};

// Runs argv[0] (looked up in PATH) with the environment less every variable
// whose name starts with one of `unset_prefixes`; calls on_line(is_stderr,
// line) for each line it prints and returns how it ended. While it runs,
// *running holds its pid (for forwarding signals), else 0.
ChildEnd run_child(const std::vector<std::string>& argv, const std::vector<std::string>& unset_prefixes,
                   const std::function<void(bool, const std::string&)>& on_line, volatile pid_t* running);

// The processes below `root` (children, their children, ...) whose command
// name (/proc/<pid>/comm) is `comm`: the ranks a launcher started.
std::vector<pid_t> descendants_named(pid_t root, const std::string& comm);

}  // namespace exa::elastic
