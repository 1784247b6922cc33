#include "io/token_text.hpp"

#include "io/mapped_file.hpp"

namespace exa::io {

TokenStore read_text_tokens(const std::string& path) {
  const MappedFile f = MappedFile::open(path, "check data.path in the deck (the bundled corpus is data/corpus.txt)",
                                        "text file is empty; data.path must name a text file with some text in it");
  // Bytes are always < 256: nothing to validate, but fingerprint() is wanted.
  TokenStore t(f.keepalive(), f.data(), 1, static_cast<std::int64_t>(f.size()), kByteVocab, path);
  t.validate("");
  return t;
}

}  // namespace exa::io
