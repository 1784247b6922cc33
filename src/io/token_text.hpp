#pragma once
// Text files as token arrays: byte-level tokenisation, token = byte value,
// V = 256. Any file is valid input (UTF-8 text becomes its bytes), so the
// bundled corpus and a user's own text need no tokenizer at all.
#include <string>

#include "io/token_store.hpp"

namespace exa::io {

inline constexpr int kByteVocab = 256;

// Maps `path`; exa::Error when it is missing or empty.
TokenStore read_text_tokens(const std::string& path);

}  // namespace exa::io
