// Fuzz target: the token-shard reader (io/token_shard.hpp), on the bytes of
// a shard file. A shard that reads must also write back and read again to
// the same tokens (the fingerprint a checkpoint records depends on it).
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz_util.hpp"
#include "io/token_shard.hpp"

extern "C" int LLVMFuzzerInitialize(int*, char***) { return 0; }

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string path = exa::fuzz::scratch_dir() + "/input.tok";
  exa::fuzz::write_file(path, data, size);
  exa::io::TokenStore t;
  if (!exa::fuzz::run_guarded("read_shard", [&] { t = exa::io::read_shard(path); })) return 0;
  if (t.size() <= 0 || t.vocab() <= 0) exa::fuzz::finding("read_shard returned an empty store");

  // Every token, through the sampler's path.
  std::vector<std::int32_t> all(static_cast<std::size_t>(t.size()));
  t.copy(0, t.size(), all.data());
  for (const auto v : all) {
    if (v < 0 || v >= t.vocab()) exa::fuzz::finding("a token outside the vocabulary passed validation");
  }

  // The writer's limits are narrower than the header's fields: a uint16
  // shard may announce V > 65536 and any shard V up to 2^32 - 1.
  if (t.vocab() > (std::int64_t{1} << 31)) return 0;
  const auto dtype = t.width() == 2 && t.vocab() <= 65536 ? exa::io::TokenDtype::uint16 : exa::io::TokenDtype::uint32;
  const std::string again = exa::fuzz::scratch_dir() + "/again.tok";
  exa::io::TokenStore back;
  if (!exa::fuzz::run_guarded("write_shard", [&] {
        exa::io::write_shard(again, t, dtype);
        back = exa::io::read_shard(again);
      })) {
    exa::fuzz::finding("a shard that reads does not write back");
  }
  if (back.size() != t.size() || back.vocab() != t.vocab() || back.fingerprint() != t.fingerprint()) {
    exa::fuzz::finding("a shard written back reads as other tokens");
  }
  return 0;
}
