#pragma once
// The document index of a token shard: where each document starts, as a
// token offset, in a file beside the shard (SHARD.docs). Sequence packing
// reads it to keep documents whole.
//
// Layout (little-endian): char[8] magic "EXADOCS\0", uint32 version (1),
// uint32 reserved (0), uint64 document count D, uint64 token count N of the
// shard, then D uint64 offsets, strictly increasing, the first 0, all < N.
#include <cstdint>
#include <string>
#include <vector>

namespace exa::io {

inline constexpr char kDocsMagic[8] = {'E', 'X', 'A', 'D', 'O', 'C', 'S', '\0'};
inline constexpr std::uint32_t kDocsVersion = 1;

struct DocumentIndex {
  std::uint64_t tokens = 0;             // the shard's token count
  std::vector<std::uint64_t> starts;    // document start offsets
};

// Written as path.tmp, then renamed (no short index is ever left behind).
void write_document_index(const std::string& path, const DocumentIndex& index);
// exa::Error naming the file and what is wrong (missing, bad magic or
// version, truncated, offsets out of order or past the tokens).
DocumentIndex read_document_index(const std::string& path);

}  // namespace exa::io
