#include "train/deck_dataset.hpp"

#include <filesystem>

#include <fmt/format.h>

#include "core/error.hpp"
#include "io/document_index.hpp"
#include "io/tokenizer.hpp"

namespace exa::train {

namespace fs = std::filesystem;

std::string resolve_data_path(const std::string& path) {
  if (!path.empty() && fs::path(path).is_relative() && !fs::exists(path)) {
    const fs::path alt = fs::path(EXAMOE_SOURCE_DIR) / path;
    if (fs::exists(alt)) return alt.string();
  }
  return path;
}

std::string deck_tokenizer_path(const deck::Config& cfg) {
  const std::string t = cfg.get_string("data.tokenizer");
  return t == "none" ? std::string() : resolve_data_path(t);
}

namespace {

// data.tokenizer (every stream's) against model.vocab_size.
void check_tokenizer(const deck::Config& cfg) {
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
}

}  // namespace

io::Dataset open_deck_dataset(const deck::Config& cfg) {
  io::DataSpec spec = io::data_spec_from_deck(cfg);
  spec.path = resolve_data_path(spec.path);
  check_tokenizer(cfg);
  return io::Dataset::open(spec);
}

io::Sampler open_deck_sampler(const deck::Config& cfg) { return deck_sampler(cfg, open_deck_dataset(cfg)); }

namespace {

// The data's document starts, for the feature `what` (the deck key that
// asked): a text's blank-line-separated documents, a shard's .docs index;
// HDF5 has none.
std::vector<std::int64_t> document_starts(const deck::Config& cfg, const io::Dataset& data, const char* key,
                                          const std::string& setting, io::DataFormat format) {
  const std::string at = cfg.locate({key});
  std::vector<std::int64_t> starts;
  switch (format) {
    case io::DataFormat::text:
      starts = io::text_document_starts(data.tokens());
      break;
    case io::DataFormat::shard: {
      const std::string index = data.tokens().source() + ".docs";
      EXA_REQUIRE(fs::exists(index),
                  "{} {} needs the shard's document index {}, which does not exist; `examoe-tokenize encode` "
                  "writes it beside the shard, or unset {}",
                  at, setting, index, key);
      const io::DocumentIndex docs = io::read_document_index(index);
      EXA_REQUIRE(std::int64_t(docs.tokens) == data.n_tokens(),
                  "{} the document index {} is for {} tokens but {} holds {}; encode the shard again", at, index,
                  docs.tokens, data.tokens().source(), data.n_tokens());
      starts.assign(docs.starts.begin(), docs.starts.end());
      break;
    }
    case io::DataFormat::hdf5:
      throw Error(fmt::format("{} {}: an HDF5 token dataset has no document index; convert it to a shard with "
                              "`examoe-tokenize encode`, or unset {}",
                              at, setting, key));
  }
  if (starts.empty()) starts.push_back(0);
  return starts;
}

// The sampler of one source of `format`.
io::Sampler source_sampler(const deck::Config& cfg, io::Dataset data, io::DataFormat format) {
  const auto seed = static_cast<std::uint64_t>(cfg.get_int("train.seed"));
  if (const auto budget = cfg.get_int("train.batch_tokens"); budget > 0) {
    const auto starts =
        document_starts(cfg, data, "train.batch_tokens", fmt::format("train.batch_tokens = {}", budget), format);
    return io::Sampler::budgeted(std::move(data), seed, starts, budget);
  }
  if (io::parse_documents(cfg.get_string("data.documents")) == io::Documents::concat)
    return io::Sampler(std::move(data), seed);
  const auto starts = document_starts(cfg, data, "data.documents", "data.documents = \"packed\"", format);
  return io::Sampler::packed(std::move(data), seed, starts);
}

}  // namespace

io::Sampler deck_sampler(const deck::Config& cfg, io::Dataset data) {
  return source_sampler(cfg, std::move(data), io::parse_data_format(cfg.get_string("data.format")));
}

io::StreamMixture open_deck_streams(const deck::Config& cfg) {
  const auto seed = static_cast<std::uint64_t>(cfg.get_int("train.seed"));
  std::vector<io::DataStream> streams;
  if (cfg.streams().empty()) {
    streams.push_back({"data", 1.0, open_deck_sampler(cfg)});
    return io::StreamMixture(std::move(streams), seed);
  }
  check_tokenizer(cfg);
  for (const deck::DataStream& d : cfg.streams()) {
    io::DataSpec spec = io::data_spec_from_deck(cfg);
    spec.path = resolve_data_path(d.path);
    spec.format = io::parse_data_format(d.format);
    try {
      streams.push_back({d.task, d.weight, source_sampler(cfg, io::Dataset::open(spec), spec.format)});
    } catch (const Error& e) {
      throw Error(fmt::format("{}:{}: [[data.streams]] '{}' ({}): {}", cfg.deck_path(), d.line, d.task, d.path,
                              e.what()));
    }
  }
  return io::StreamMixture(std::move(streams), seed);
}

double validation_tokens_per_byte(const deck::Config& cfg, const io::StreamMixture& data) {
  if (!cfg.streams().empty() || data.size() != 1) return 0;
  const io::Dataset& d = data.stream(0).sampler.data();
  if (d.n_val() == 0) return 0;
  const auto format = io::parse_data_format(cfg.get_string("data.format"));
  if (format == io::DataFormat::text) return 1.0;
  const std::string tok_path = deck_tokenizer_path(cfg);
  if (format != io::DataFormat::shard || tok_path.empty()) return 0;
  const io::Tokenizer tok(tok_path);
  std::vector<std::uint32_t> ids(static_cast<std::size_t>(d.n_val()));
  for (std::int64_t i = 0; i < d.n_val(); ++i) ids[std::size_t(i)] = d.tokens().at(d.n_train() + i);
  const std::size_t bytes = tok.decode(ids).size();
  return bytes > 0 ? double(d.n_val()) / double(bytes) : 0.0;
}

}  // namespace exa::train
