#include "parallel/context/zigzag.hpp"

#include <algorithm>

#include "core/error.hpp"

namespace exa::parallel::context {

std::int64_t Zigzag::chunk_len(std::int64_t T) const {
  EXA_REQUIRE(cp >= 1 && rank >= 0 && rank < cp, "context parallelism: rank {} of cp = {}", rank, cp);
  EXA_REQUIRE(T % (2 * std::int64_t(cp)) == 0,
              "context parallelism: sequences of {} tokens cannot be cut into 2*cp = {} equal chunks; choose "
              "model.seq_len divisible by {}",
              T, 2 * cp, 2 * cp);
  return T / (2 * std::int64_t(cp));
}

std::vector<model::TokenChunk> Zigzag::chunks(std::int64_t T_local) const {
  const std::int64_t c = chunk_len(T_local * cp);
  return {model::TokenChunk{0, c, chunk_of(rank, 0) * c}, model::TokenChunk{c, c, chunk_of(rank, 1) * c}};
}

std::vector<std::int32_t> Zigzag::slice(const std::vector<std::int32_t>& x, std::int64_t B, std::int64_t T) const {
  EXA_REQUIRE(std::int64_t(x.size()) == B * T, "context parallelism: {} tokens are not {} sequences of {}",
              x.size(), B, T);
  const std::int64_t c = chunk_len(T), Tl = T / cp;
  std::vector<std::int32_t> out(static_cast<std::size_t>(B * Tl));
  for (std::int64_t b = 0; b < B; ++b)
    for (int a = 0; a < 2; ++a) {
      const auto* src = x.data() + b * T + chunk_of(rank, a) * c;
      std::copy(src, src + c, out.data() + b * Tl + a * c);
    }
  return out;
}

}  // namespace exa::parallel::context
