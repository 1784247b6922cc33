#include "kernels/checksum.hpp"

#include <xxhash.h>

#include <cstdio>

namespace exa::kernels {

namespace {

void put_u64(std::string& buf, std::uint64_t x) {
  for (int b = 0; b < 8; ++b) buf.push_back(static_cast<char>((x >> (8 * b)) & 0xffu));
}

std::uint64_t xxh64(const std::string& buf) { return XXH64(buf.data(), buf.size(), 0); }

std::uint64_t node(std::uint64_t l, std::uint64_t r) {
  std::string buf(1, '\x01');
  put_u64(buf, l);
  put_u64(buf, r);
  return xxh64(buf);
}

}  // namespace

std::uint64_t checksum_leaf(const std::string& name, std::uint64_t checksum) {
  std::string buf(1, '\x00');
  put_u64(buf, name.size());
  buf += name;
  put_u64(buf, checksum);
  return xxh64(buf);
}

std::uint64_t checksum_merkle_root(const std::vector<std::pair<std::string, std::uint64_t>>& entries) {
  if (entries.empty()) return xxh64(std::string(1, '\x02'));
  std::vector<std::uint64_t> level;
  level.reserve(entries.size());
  for (const auto& e : entries) level.push_back(checksum_leaf(e.first, e.second));
  while (level.size() > 1) {
    std::vector<std::uint64_t> up;
    up.reserve((level.size() + 1) / 2);
    for (std::size_t i = 0; i + 1 < level.size(); i += 2) up.push_back(node(level[i], level[i + 1]));
    if (level.size() % 2 == 1) up.push_back(level.back());
    level.swap(up);
  }
  return level.front();
}

std::string checksum_hex(std::uint64_t c) {
  char s[17];
  std::snprintf(s, sizeof s, "%016llx", static_cast<unsigned long long>(c));
  return std::string(s, 16);
}

template std::uint64_t checksum(const View1<float>&, index_t, const ExecSpace&);
template std::uint64_t checksum(const View2<float>&, index_t, const ExecSpace&);
template std::uint64_t checksum(const View3<float>&, index_t, const ExecSpace&);
template std::uint64_t checksum(const View1<const float>&, index_t, const ExecSpace&);
template std::uint64_t checksum(const View2<const float>&, index_t, const ExecSpace&);
template std::uint64_t checksum(const View3<const float>&, index_t, const ExecSpace&);

}  // namespace exa::kernels
