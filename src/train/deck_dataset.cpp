#include "train/deck_dataset.hpp"

#include <filesystem>

#include "core/error.hpp"
#include "io/tokenizer.hpp"

namespace exa::train {

namespace {

namespace fs = std::filesystem;

std::string found(const std::string& path) {
  if (!path.empty() && fs::path(path).is_relative() && !fs::exists(path)) {
    const fs::path alt = fs::path(EXAMOE_SOURCE_DIR) / path;
    if (fs::exists(alt)) return alt.string();
  }
  return path;
}

}  // namespace

std::string deck_tokenizer_path(const deck::Config& cfg) {
  const std::string t = cfg.get_string("data.tokenizer");
  return t == "none" ? std::string() : found(t);
}

io::Dataset open_deck_dataset(const deck::Config& cfg) {
  io::DataSpec spec = io::data_spec_from_deck(cfg);
  spec.path = found(spec.path);
  // The tokenizer the shard was encoded with must have the model's vocabulary.
  if (const auto tok_path = deck_tokenizer_path(cfg); !tok_path.empty()) {
    const std::string at = cfg.locate({"data.tokenizer"});
    EXA_REQUIRE(fs::exists(tok_path), "{} data.tokenizer = \"{}\": no such file; make it with `examoe-tokenize train`",
                at, cfg.get_string("data.tokenizer"));
    const io::Tokenizer tok(tok_path);
    EXA_REQUIRE(tok.vocab_size() == cfg.get_int("model.vocab_size"),
                "{} data.tokenizer = \"{}\" has {} tokens but model.vocab_size = {}; set model.vocab_size = {}", at,
                cfg.get_string("data.tokenizer"), tok.vocab_size(), cfg.get_int("model.vocab_size"),
                tok.vocab_size());
  }
  return io::Dataset::open(spec);
}

}  // namespace exa::train
