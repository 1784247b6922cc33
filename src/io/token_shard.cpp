#include "io/token_shard.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include "core/error.hpp"
#include "io/little_endian.hpp"
#include "io/mapped_file.hpp"
#include "io/token_text.hpp"

namespace exa::io {


TokenDtype parse_token_dtype(const std::string& name) {
  if (name == "uint16") return TokenDtype::uint16;
  if (name == "uint32") return TokenDtype::uint32;
  throw Error(fmt::format("token dtype '{}' is not supported; use uint16 (V <= 65536) or uint32", name));
}

const char* to_string(TokenDtype dtype) { return dtype == TokenDtype::uint16 ? "uint16" : "uint32"; }

void write_shard(const std::string& path, const TokenStore& tokens, TokenDtype dtype) {
  const int width = static_cast<int>(dtype);
  EXA_REQUIRE(dtype != TokenDtype::uint16 || tokens.vocab() <= 65536,
              "{}: vocabulary size {} does not fit uint16 tokens; write the shard as uint32", path, tokens.vocab());
  EXA_REQUIRE(tokens.vocab() <= (std::int64_t{1} << 31), "{}: vocabulary size {} is above the shard limit 2^31", path,
              tokens.vocab());
  const std::string tmp = path + ".tmp";
  std::unique_ptr<std::FILE, le::FileCloser> f(std::fopen(tmp.c_str(), "wb"));
  EXA_REQUIRE(f, "{}: cannot create: {}; check the directory exists and is writable", tmp, std::strerror(errno));

  unsigned char header[kShardHeaderBytes] = {};
  std::memcpy(header, kShardMagic, sizeof kShardMagic);
  le::put(header + 8, kShardVersion, 4);
  le::put(header + 12, static_cast<std::uint32_t>(dtype), 4);
  le::put(header + 16, static_cast<std::uint64_t>(tokens.size()), 8);
  le::put(header + 24, static_cast<std::uint64_t>(tokens.vocab()), 4);
  bool ok = std::fwrite(header, 1, sizeof header, f.get()) == sizeof header;

  // Encode in blocks: the source may be a mapped file far larger than memory.
  constexpr std::int64_t kBlock = 1 << 18;
  std::vector<unsigned char> buf(static_cast<std::size_t>(kBlock * width));
  for (std::int64_t i0 = 0; ok && i0 < tokens.size(); i0 += kBlock) {
    const std::int64_t n = std::min(kBlock, tokens.size() - i0);
    for (std::int64_t i = 0; i < n; ++i) {
      const std::uint32_t t = tokens.at(i0 + i);
      EXA_REQUIRE(t < static_cast<std::uint64_t>(tokens.vocab()),
                  "{}: token at position {} is {}, not below the vocabulary size {}; nothing was written", path, i0 + i,
                  t, tokens.vocab());
      le::put(buf.data() + i * width, t, width);
    }
    ok = std::fwrite(buf.data(), static_cast<std::size_t>(width), static_cast<std::size_t>(n), f.get()) ==
         static_cast<std::size_t>(n);
  }
  ok = std::fflush(f.get()) == 0 && ok;
  const int err = errno;
  f.reset();
  if (!ok) {
    std::remove(tmp.c_str());
    throw Error(fmt::format("{}: write failed: {}; check free disk space", tmp, std::strerror(err)));
  }
  EXA_REQUIRE(std::rename(tmp.c_str(), path.c_str()) == 0, "{}: cannot rename {} to it: {}", path, tmp,
              std::strerror(errno));
}

void write_shard(const std::string& path, const std::vector<std::uint32_t>& tokens, std::int64_t vocab,
                 TokenDtype dtype) {
  // Re-encode as little-endian bytes so TokenStore reads them on any host.
  auto bytes = std::make_shared<std::vector<unsigned char>>(tokens.size() * 4);
  for (std::size_t i = 0; i < tokens.size(); ++i) le::put(bytes->data() + 4 * i, tokens[i], 4);
  const std::shared_ptr<const unsigned char> keep(bytes, bytes->data());
  write_shard(path, TokenStore(keep, bytes->data(), 4, static_cast<std::int64_t>(tokens.size()), vocab, path), dtype);
}

TokenStore read_shard(const std::string& path) {
  const std::string remake = fmt::format("re-create the shard with {}", kShardConvertHint);
  const MappedFile f = MappedFile::open(
      path, "check data.path in the deck",
      fmt::format("file is empty, not an ExaMoE token shard; convert text with {}", kShardConvertHint));
  const unsigned char* p = f.data();
  const std::size_t size = f.size();

  // Magic first, on however many bytes there are: a short text file is a
  // wrong-format mistake, not a truncated shard.
  EXA_REQUIRE(std::memcmp(p, kShardMagic, std::min(size, sizeof kShardMagic)) == 0,
              "{} is not an ExaMoE token shard (bad magic); convert text with {}, or set data.format = \"text\" "
              "to train on it as text",
              path, kShardConvertHint);
  EXA_REQUIRE(size >= kShardHeaderBytes,
              "{}: truncated: {} bytes, shorter than the {}-byte token-shard header; the file was cut short, {}", path,
              size, kShardHeaderBytes, remake);

  const auto version = le::get(p + 8, 4);
  EXA_REQUIRE(version == kShardVersion,
              "{}: token-shard format version {} is not supported (this ExaMoE reads version {}); {}", path, version,
              kShardVersion, remake);
  const auto code = le::get(p + 12, 4);
  EXA_REQUIRE(code == 2 || code == 4, "{}: token dtype code {} is not supported (2 = uint16, 4 = uint32); {}", path,
              code, remake);
  const auto dtype = static_cast<TokenDtype>(code);
  const int width = static_cast<int>(code);
  const std::uint64_t count = le::get(p + 16, 8);
  const auto vocab = static_cast<std::int64_t>(le::get(p + 24, 4));
  EXA_REQUIRE(vocab > 0, "{}: header vocabulary size is 0; the file is corrupt, {}", path, remake);
  // Tokens are int32 from here on: a larger vocabulary would turn its upper
  // tokens negative. The writer refuses it too.
  EXA_REQUIRE(vocab <= (std::int64_t{1} << 31),
              "{}: header vocabulary size {} is above the shard limit 2^31; the file is corrupt, {}", path, vocab,
              remake);

  const std::uint64_t body = size - kShardHeaderBytes;
  EXA_REQUIRE(count <= body / width,
              "{}: truncated: the header says {} {} tokens but the file holds only {} ({} bytes after the header); "
              "the file was cut short, {}",
              path, count, to_string(dtype), body / width, body, remake);
  EXA_REQUIRE(body == count * width,
              "{}: {} stray bytes follow the {} tokens the header announces; the file is corrupt, {}", path,
              body - count * width, count, remake);
  EXA_REQUIRE(count > 0, "{}: the shard holds no tokens; {}", path, remake);

  TokenStore t(f.keepalive(), p + kShardHeaderBytes, width, static_cast<std::int64_t>(count), vocab, path);
  t.validate(fmt::format("the shard is corrupt or its header understates the vocabulary; {}", remake));
  return t;
}

std::int64_t convert_text_to_shard(const std::string& text_path, const std::string& shard_path, TokenDtype dtype) {
  const TokenStore text = read_text_tokens(text_path);
  write_shard(shard_path, text, dtype);
  return text.size();
}

}  // namespace exa::io
