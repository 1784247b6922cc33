#include "inference/generate.hpp"

#include <algorithm>
#include <cmath>
#include <memory>
#include <numeric>

#include "core/error.hpp"
#include "core/philox.hpp"
#include "core/profiling.hpp"
#include "io/token_text.hpp"
#include "io/tokenizer.hpp"
#include "train/deck_dataset.hpp"
#include "inference/checkpoint_model.hpp"
#include "inference/pipeline_ranks.hpp"

namespace exa::inference {

std::int32_t sample_token(const std::vector<float>& logits, double temperature, std::int64_t top_k, double u) {
  EXA_REQUIRE(!logits.empty(), "sample_token: no logits");
  const std::int64_t V = static_cast<std::int64_t>(logits.size());
  // Order: larger logit first, lower id first on ties (NaN sorts last).
  auto before = [&](std::int32_t a, std::int32_t b) {
    const float x = logits[static_cast<std::size_t>(a)], y = logits[static_cast<std::size_t>(b)];
    if (std::isnan(x) != std::isnan(y)) return std::isnan(y);
    if (x != y) return x > y;
    return a < b;
  };
  if (temperature <= 0) {
    std::int32_t best = 0;
    for (std::int32_t i = 1; i < V; ++i)
      if (before(i, best)) best = i;
    return best;
  }
  const std::int64_t k = (top_k <= 0 || top_k >= V) ? V : top_k;
  std::vector<std::int32_t> ids(static_cast<std::size_t>(V));
  std::iota(ids.begin(), ids.end(), 0);
  std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), before);
  ids.resize(static_cast<std::size_t>(k));
  const double top = logits[static_cast<std::size_t>(ids[0])];
  EXA_REQUIRE(std::isfinite(top), "the model's logits are not finite (largest: {}); the checkpoint is broken", top);
  std::vector<double> p(ids.size());
  double total = 0;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    const double l = logits[static_cast<std::size_t>(ids[i])];
    p[i] = std::isfinite(l) ? std::exp((l - top) / temperature) : 0.0;
    total += p[i];
  }
  const double target = u * total;
  double acc = 0;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    acc += p[i];
    if (acc >= target && p[i] > 0) return ids[i];
  }
  // Rounding left the cumulative sum a hair below u * total: the last
  // candidate with non-zero probability.
  for (std::size_t i = ids.size(); i-- > 0;)
    if (p[i] > 0) return ids[i];
  return ids[0];
}

std::string generate(const GenerateOptions& opt, MPI_Comm comm) {
  EXA_REQUIRE(!opt.prompt.empty(), "the prompt is empty: pass some text to continue, e.g. --prompt \"The \"");
  EXA_REQUIRE(opt.max_new_tokens >= 0, "--max-new-tokens must be 0 or more, not {}", opt.max_new_tokens);
  EXA_REQUIRE(std::isfinite(opt.temperature) && opt.temperature >= 0,
              "--temperature must be 0 (greedy) or more, not {}", opt.temperature);
  EXA_REQUIRE(opt.top_k >= 0, "--top-k must be 0 (no limit) or more, not {}", opt.top_k);

  // --pp P: each stage runs its layers on the window; the last samples and
  // tells every stage of its pipeline the token.
  PipelineRanks ranks(comm, opt.pp);
  const bool first = ranks.first(), last = ranks.last();
  CheckpointModel m(opt.checkpoint, comm, /*dropless=*/true, ranks.stage(), ranks.stages());
  ranks.use_transport(comm::backend_named(m.config().get_string("comm.backend")));
  const auto& mc = m.model_config();
  // Subword models speak through their tokenizer; byte models need none.
  std::unique_ptr<io::Tokenizer> tok;
  // --tokenizer, else the one the checkpoint's deck names (data.tokenizer).
  const std::string tok_path = opt.tokenizer.empty() ? train::deck_tokenizer_path(m.config()) : opt.tokenizer;
  if (!tok_path.empty()) {
    tok = std::make_unique<io::Tokenizer>(tok_path);
    EXA_REQUIRE(mc.vocab_size == tok->vocab_size(),
                "checkpoint {} has model.vocab_size = {}, but the tokenizer {} has {} tokens; pass the tokenizer "
                "the model was trained with",
                m.directory(), mc.vocab_size, tok_path, tok->vocab_size());
  } else {
    EXA_REQUIRE(mc.vocab_size == io::kByteVocab,
                "checkpoint {} has model.vocab_size = {}, not byte-level tokens ({}): pass --tokenizer MODEL, the "
                "SentencePiece model its shard was encoded with",
                m.directory(), mc.vocab_size, io::kByteVocab);
  }

  std::vector<std::int32_t> tokens;
  tokens.reserve(opt.prompt.size() + static_cast<std::size_t>(opt.max_new_tokens));
  if (tok) {
    for (const auto id : tok->encode(opt.prompt)) tokens.push_back(std::int32_t(id));
  } else {
    for (const unsigned char c : opt.prompt) tokens.push_back(c);
  }
  EXA_REQUIRE(!tokens.empty(), "the prompt encodes to no tokens; give some text to continue");
  const std::size_t prompt_tokens = tokens.size();
  const std::int64_t total = static_cast<std::int64_t>(tokens.size()) + opt.max_new_tokens;
  const std::int64_t Tw = std::min<std::int64_t>(mc.seq_len, total);

  Kokkos::View<std::int32_t**, Layout, Device> in("exa::generate::inputs", 1, Tw);
  View2<float> logits("exa::generate::logits", 1, mc.vocab_size);
  View2<float> hidden;  // the previous stage's output, on every stage but the first
  if (!first) hidden = View2<float>("exa::generate::hidden", Tw, mc.d_model);
  auto h_in = Kokkos::create_mirror_view(in);
  auto h_logits = Kokkos::create_mirror_view(logits);
  std::vector<float> row(static_cast<std::size_t>(mc.vocab_size));
  const PhiloxKey key = philox_key(opt.seed, "examoe-generate");
  auto& model = m.model();

  std::string out = opt.prompt;
  ScopedRegion region("generate", true);
  for (std::int64_t i = 0; i < opt.max_new_tokens; ++i) {
    const std::int64_t n = static_cast<std::int64_t>(tokens.size());
    const std::int64_t len = std::min(n, Tw);  // the context: the last len tokens
    if (first) {
      for (std::int64_t t = 0; t < Tw; ++t) h_in(0, t) = t < len ? tokens[static_cast<std::size_t>(n - len + t)] : 0;
      Kokkos::deep_copy(in, h_in);
    }
    const auto x = ranks.input(in, hidden, {1, Tw});
    std::int32_t next = 0;
    if (last) {
      model.next_logits(m.weights(), x, logits, len - 1);
      Kokkos::deep_copy(h_logits, logits);
      for (std::int64_t v = 0; v < mc.vocab_size; ++v) row[static_cast<std::size_t>(v)] = h_logits(0, v);
      next = sample_token(row, opt.temperature, opt.top_k, philox_uniform(key, std::uint64_t(i)));
    } else {
      ranks.forward_and_send(model, m.weights(), x);
    }
    if (ranks.stages() > 1) MPI_Bcast(&next, 1, MPI_INT32_T, ranks.stages() - 1, ranks.comm());
    tokens.push_back(next);
    if (!tok) out.push_back(static_cast<char>(static_cast<unsigned char>(next)));
  }
  if (tok) {
    // The prompt as given, then what decoding everything adds to decoding
    // the prompt (a subword carries its leading space, which decoding the
    // continuation alone would drop).
    const std::vector<std::uint32_t> all(tokens.begin(), tokens.end());
    const std::vector<std::uint32_t> head(tokens.begin(), tokens.begin() + std::ptrdiff_t(prompt_tokens));
    const std::string whole = tok->decode(all), prompt = tok->decode(head);
    if (whole.compare(0, prompt.size(), prompt) == 0) {
      out += whole.substr(prompt.size());
    } else {
      out = whole;  // the prompt as the tokenizer normalises it
    }
  }
  return out;
}

}  // namespace exa::inference
