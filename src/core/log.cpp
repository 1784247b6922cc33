#include "core/log.hpp"

#include <cstdio>

namespace exa::log {
namespace {
int g_rank = 0;
Level g_level = Level::info;
}  // namespace

void set_rank(int r) { g_rank = r; }
int rank() { return g_rank; }
void set_level(Level l) { g_level = l; }
Level level() { return g_level; }

void write(Level l, const std::string& message) {
  if (l < g_level) return;
  if (l <= Level::info) {
    if (g_rank != 0) return;
    std::fprintf(stdout, "%s\n", message.c_str());
    std::fflush(stdout);
    return;
  }
  const char* tag = (l == Level::warn) ? "warning" : "error";
  std::fprintf(stderr, "[rank %d] %s: %s\n", g_rank, tag, message.c_str());
  std::fflush(stderr);
}

}  // namespace exa::log
