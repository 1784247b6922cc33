#pragma once
// Rank-aware logging. The rank is set once by whoever knows it (the comm
// layer); core itself knows nothing of MPI. info() prints on rank 0 only,
// warn()/error() print on every rank with a "[rank N]" prefix.
#include <fmt/format.h>

#include <string>

namespace exa::log {

enum class Level { debug = 0, info = 1, warn = 2, error = 3, quiet = 4 };

void set_rank(int rank);
int rank();
void set_level(Level level);
Level level();
void write(Level level, const std::string& message);

template <class... Args>
void info(fmt::format_string<Args...> f, Args&&... args) {
  write(Level::info, fmt::format(f, std::forward<Args>(args)...));
}
template <class... Args>
void debug(fmt::format_string<Args...> f, Args&&... args) {
  write(Level::debug, fmt::format(f, std::forward<Args>(args)...));
}
template <class... Args>
void warn(fmt::format_string<Args...> f, Args&&... args) {
  write(Level::warn, fmt::format(f, std::forward<Args>(args)...));
}
template <class... Args>
void error(fmt::format_string<Args...> f, Args&&... args) {
  write(Level::error, fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace exa::log
