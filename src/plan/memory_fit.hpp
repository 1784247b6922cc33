#pragma once
// `examoe --check`'s memory estimate: the memory model's bytes per rank for
// the deck's own layout and policies (the worst pipeline stage), and, under
// memory.cap_gb, whether they fit and which recompute or ZeRO policy would.
#include <string>
#include <vector>

namespace exa::deck {
class Config;
}

namespace exa::plan {

// Lines for --check's report (no comment markers); the first is the table.
std::vector<std::string> memory_fit_report(const deck::Config& cfg);

}  // namespace exa::plan
