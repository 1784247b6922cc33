#pragma once
// Profiler region names are paths ("exa::attention::backward/..."): the
// benchmarks pick regions by their leading part.

#include <string>

namespace exa::bench {

inline bool has_prefix(const std::string& s, const std::string& p) { return s.rfind(p, 0) == 0; }

}  // namespace exa::bench
