#pragma once
// ExaMoE's error type. Every user-facing failure (bad deck, bad file, bad
// flag) throws exa::Error with a message that names the problem and the fix;
// drivers catch it, print it once on rank 0 and exit non-zero.
#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace exa {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// What internal_error() throws: a broken invariant, never an answer to bad
// input. Its own type, so that a check (the fuzz targets') can tell it from
// an Error whose message merely quotes input that says the same words.
class InternalError : public Error {
 public:
  explicit InternalError(const std::string& what) : Error(what) {}
};

// Throws exa::Error with a fmt-formatted message when `cond` is false.
#define EXA_REQUIRE(cond, ...)                        \
  do {                                                \
    if (!(cond)) {                                    \
      throw ::exa::Error(::fmt::format(__VA_ARGS__)); \
    }                                                 \
  } while (0)

// Internal invariant: a violation is an ExaMoE bug, not a user error.
[[noreturn]] void internal_error(const char* file, int line, const std::string& what);
#define EXA_ASSERT(cond)                                      \
  do {                                                        \
    if (!(cond)) ::exa::internal_error(__FILE__, __LINE__, #cond); \
  } while (0)

}  // namespace exa
