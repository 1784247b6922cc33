#pragma once
// Peak resident set size of this process, from the OS (getrusage).
#include <cstdint>

namespace exa {

std::int64_t peak_rss_bytes();

}  // namespace exa
