#pragma once
// ExaMoE token-shard files: data tokenised elsewhere, in one flat file.
//
// Layout (all integers little-endian), 32-byte header then the tokens:
//   offset  0  char[8]  magic "EXATOKS\0"
//   offset  8  uint32   format version (1)
//   offset 12  uint32   dtype code = bytes per token (2 = uint16, 4 = uint32)
//   offset 16  uint64   token count N
//   offset 24  uint32   vocabulary size V (every token is < V)
//   offset 28  uint32   reserved, 0 (keeps the tokens 8-byte aligned)
//   offset 32  N tokens of the dtype
// The header makes a shard self-checking: a truncated copy, a text file
// passed by mistake, or tokens for a larger vocabulary are caught at open,
// not as garbage embeddings hours into a run.
#include <cstdint>
#include <string>
#include <vector>

#include "io/token_store.hpp"

namespace exa::io {

enum class TokenDtype : std::uint32_t { uint16 = 2, uint32 = 4 };  // value = bytes per token

// "uint16" | "uint32" (exa::Error otherwise) and back.
TokenDtype parse_token_dtype(const std::string& name);
const char* to_string(TokenDtype dtype);

inline constexpr char kShardMagic[8] = {'E', 'X', 'A', 'T', 'O', 'K', 'S', '\0'};
inline constexpr std::uint32_t kShardVersion = 1;
inline constexpr std::size_t kShardHeaderBytes = 32;
// How a user makes a shard; every shard error message ends with it. The
// `convert` drivers test (tests/drivers/drivers_test.cmake) runs this very
// form of the command, so a renamed flag fails there.
inline constexpr const char* kShardConvertHint = "`examoe convert --text FILE --out FILE.tok`";

// Writes `tokens` (each < vocab, vocab <= 65536 for uint16) as a shard. The
// file appears under `path` only when complete (written as path.tmp, then
// renamed), so an interrupted conversion never leaves a short shard behind.
void write_shard(const std::string& path, const TokenStore& tokens, TokenDtype dtype);
void write_shard(const std::string& path, const std::vector<std::uint32_t>& tokens, std::int64_t vocab,
                 TokenDtype dtype);

// Maps a shard and validates header and tokens (exa::Error naming the file
// and the fix for: missing, empty, bad magic, truncated, unsupported version
// or dtype, token >= V).
TokenStore read_shard(const std::string& path);

// Byte-level tokenisation of a text file (V = 256) written as a shard.
// Returns the number of tokens written.
std::int64_t convert_text_to_shard(const std::string& text_path, const std::string& shard_path,
                                   TokenDtype dtype = TokenDtype::uint16);

}  // namespace exa::io
