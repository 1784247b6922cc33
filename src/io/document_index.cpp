#include "io/document_index.hpp"

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>

#include "core/error.hpp"
#include "io/little_endian.hpp"
#include "io/mapped_file.hpp"

namespace exa::io {

namespace {
constexpr std::size_t kHeader = 32;
}  // namespace

void write_document_index(const std::string& path, const DocumentIndex& index) {
  for (std::size_t i = 0; i < index.starts.size(); ++i)
    EXA_REQUIRE((i == 0 ? index.starts[0] == 0 : index.starts[i] > index.starts[i - 1]) &&
                    index.starts[i] < index.tokens,
                "{}: document {} starts at token {}: starts must rise from 0 and stay below the {} tokens", path, i,
                index.starts[i], index.tokens);
  std::vector<unsigned char> buf(kHeader + 8 * index.starts.size());
  std::memcpy(buf.data(), kDocsMagic, sizeof kDocsMagic);
  le::put(buf.data() + 8, kDocsVersion, 4);
  le::put(buf.data() + 16, index.starts.size(), 8);
  le::put(buf.data() + 24, index.tokens, 8);
  for (std::size_t i = 0; i < index.starts.size(); ++i) le::put(buf.data() + kHeader + 8 * i, index.starts[i], 8);
  const std::string tmp = path + ".tmp";
  {
    std::unique_ptr<std::FILE, le::FileCloser> f(std::fopen(tmp.c_str(), "wb"));
    EXA_REQUIRE(f, "{}: cannot create: {}; check the directory exists and is writable", tmp, std::strerror(errno));
    EXA_REQUIRE(std::fwrite(buf.data(), 1, buf.size(), f.get()) == buf.size() && std::fflush(f.get()) == 0,
                "{}: write failed: {}; check free space", tmp, std::strerror(errno));
  }
  std::filesystem::rename(tmp, path);
}

DocumentIndex read_document_index(const std::string& path) {
  const std::string remake = "re-create it with `examoe-tokenize encode`";
  const MappedFile f = MappedFile::open(path, "check the shard's document index (SHARD.docs)",
                                        fmt::format("file is empty, not a document index; {}", remake));
  const unsigned char* p = f.data();
  EXA_REQUIRE(f.size() >= kHeader && std::memcmp(p, kDocsMagic, sizeof kDocsMagic) == 0,
              "{}: not an ExaMoE document index (bad magic or shorter than its header); {}", path, remake);
  EXA_REQUIRE(le::get(p + 8, 4) == kDocsVersion, "{}: document index version {} is not {}; {}", path,
              le::get(p + 8, 4), kDocsVersion, remake);
  DocumentIndex d;
  const std::uint64_t n = le::get(p + 16, 8);
  d.tokens = le::get(p + 24, 8);
  EXA_REQUIRE(f.size() == kHeader + 8 * n, "{}: {} bytes, but {} documents need {}: the file is truncated; {}", path,
              f.size(), n, kHeader + 8 * n, remake);
  d.starts.resize(n);
  for (std::uint64_t i = 0; i < n; ++i) {
    d.starts[i] = le::get(p + kHeader + 8 * i, 8);
    EXA_REQUIRE((i == 0 ? d.starts[0] == 0 : d.starts[i] > d.starts[i - 1]) && d.starts[i] < d.tokens,
                "{}: document {} starts at token {}, out of order or past the {} tokens; {}", path, i, d.starts[i],
                d.tokens, remake);
  }
  return d;
}

}  // namespace exa::io
