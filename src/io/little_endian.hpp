#pragma once
// Little-endian integers in byte buffers, and a FILE closer: what the
// project's binary file formats (token shards, document indexes) share.
#include <cstdint>
#include <cstdio>

namespace exa::io::le {

inline void put(unsigned char* p, std::uint64_t v, int bytes) {
  for (int b = 0; b < bytes; ++b) p[b] = static_cast<unsigned char>(v >> (8 * b));
}
inline std::uint64_t get(const unsigned char* p, int bytes) {
  std::uint64_t v = 0;
  for (int b = 0; b < bytes; ++b) v |= static_cast<std::uint64_t>(p[b]) << (8 * b);
  return v;
}

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};

}  // namespace exa::io::le
