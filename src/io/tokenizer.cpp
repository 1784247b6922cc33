#include "io/tokenizer.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "core/error.hpp"
#include "io/document_index.hpp"

#if EXAMOE_HAVE_SENTENCEPIECE
#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>
#endif

namespace exa::io {

namespace {

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXA_REQUIRE(in, "{}: cannot read the text file; check the path", path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

int thread_count(int requested, std::size_t work) {
  const int cores = std::max(1, int(std::thread::hardware_concurrency()));
  return std::max(1, std::min<int>(requested > 0 ? requested : cores, int(std::max<std::size_t>(work, 1))));
}

[[noreturn]] void no_sentencepiece() {
  throw Error("this build has no SentencePiece, so it cannot train or use subword tokenizers; install "
              "libsentencepiece-dev (Debian) or sentencepiece (Spack) and reconfigure, or keep data.format = "
              "\"text\" (bytes as tokens)");
}

}  // namespace

std::vector<std::string> split_documents(const std::string& text) {
  std::vector<std::string> docs;
  std::string cur;
  std::size_t at = 0;
  while (at < text.size()) {
    std::size_t end = text.find('\n', at);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(at, end - at);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) {
      if (!cur.empty()) docs.push_back(std::move(cur));
      cur.clear();
    } else {
      if (!cur.empty()) cur += '\n';
      cur += line;
    }
    at = end + 1;
  }
  if (!cur.empty()) docs.push_back(std::move(cur));
  return docs;
}

#if EXAMOE_HAVE_SENTENCEPIECE

bool tokenizer_available() { return true; }

struct Tokenizer::Impl {
  sentencepiece::SentencePieceProcessor sp;
};

void train_tokenizer(const TokenizerTraining& t) {
  EXA_REQUIRE(!t.corpus.empty(), "examoe-tokenize train: give at least one text file");
  EXA_REQUIRE(t.model_type == "bpe" || t.model_type == "unigram",
              "--model-type {} is not one of bpe, unigram", t.model_type);
  EXA_REQUIRE(t.vocab_size >= 300 && t.vocab_size <= (std::int64_t{1} << 20),
              "--vocab {} is out of range; choose 300 to 1048576 (the vocabulary holds the 256 byte pieces that "
              "keep every document exact; 4096 suits the bundled corpus)",
              t.vocab_size);
  std::string inputs;
  for (const auto& f : t.corpus) {
    EXA_REQUIRE(std::filesystem::is_regular_file(f), "{}: no such text file; check the corpus paths", f);
    inputs += (inputs.empty() ? "" : ",") + f;
  }
  // Sentences in corpus order and every character kept: the same model from
  // the same files. No normalisation, whitespace kept as it is, and bytes
  // for what the vocabulary lacks (the newlines inside a document, which
  // line-based training never sees): decode(encode(document)) is the
  // document, byte for byte.
  const std::string args = fmt::format(
      "--input={} --model_prefix={} --vocab_size={} --model_type={} --character_coverage=1.0 "
      "--num_threads={} --shuffle_input_sentence=false --minloglevel=2 --normalization_rule_name=identity "
      "--remove_extra_whitespaces=false --byte_fallback=true --add_dummy_prefix=false",
      inputs, t.model_prefix, t.vocab_size, t.model_type, thread_count(t.threads, 64));
  const auto status = sentencepiece::SentencePieceTrainer::Train(args);
  EXA_REQUIRE(status.ok(),
              "examoe-tokenize train: SentencePiece failed: {} (the vocabulary must hold the 256 byte pieces and "
              "every character of the corpus, so a larger --vocab; one larger than the corpus supports needs a "
              "smaller --vocab)",
              status.ToString());
}

Tokenizer::Tokenizer(const std::string& model_path) : impl_(std::make_unique<Impl>()) {
  const auto status = impl_->sp.Load(model_path);
  EXA_REQUIRE(status.ok(), "{}: not a SentencePiece model ({}); make one with `examoe-tokenize train`", model_path,
              status.ToString());
}

Tokenizer::~Tokenizer() = default;

std::int64_t Tokenizer::vocab_size() const { return impl_->sp.GetPieceSize(); }
std::int32_t Tokenizer::eos_id() const { return impl_->sp.eos_id(); }

std::vector<std::uint32_t> Tokenizer::encode(const std::string& text) const {
  std::vector<int> ids;
  const auto status = impl_->sp.Encode(text, &ids);
  EXA_REQUIRE(status.ok(), "SentencePiece could not encode a document: {}", status.ToString());
  return std::vector<std::uint32_t>(ids.begin(), ids.end());
}

std::string Tokenizer::decode(const std::vector<std::uint32_t>& ids) const {
  std::string text;
  const auto status = impl_->sp.Decode(std::vector<int>(ids.begin(), ids.end()), &text);
  EXA_REQUIRE(status.ok(), "SentencePiece could not decode: {}", status.ToString());
  return text;
}

#else

bool tokenizer_available() { return false; }
struct Tokenizer::Impl {};
void train_tokenizer(const TokenizerTraining&) { no_sentencepiece(); }
Tokenizer::Tokenizer(const std::string&) { no_sentencepiece(); }
Tokenizer::~Tokenizer() = default;
std::int64_t Tokenizer::vocab_size() const { no_sentencepiece(); }
std::int32_t Tokenizer::eos_id() const { no_sentencepiece(); }
std::vector<std::uint32_t> Tokenizer::encode(const std::string&) const { no_sentencepiece(); }
std::string Tokenizer::decode(const std::vector<std::uint32_t>&) const { no_sentencepiece(); }

#endif

EncodeStats encode_corpus(const Tokenizer& tok, const std::vector<std::string>& files, const std::string& shard,
                          TokenDtype dtype, int threads) {
  EXA_REQUIRE(!files.empty(), "examoe-tokenize encode: give at least one text file");
  struct Part {
    std::vector<std::uint32_t> tokens;
    std::vector<std::uint64_t> starts;  // within the part
    std::int64_t bytes = 0;
    std::string error;
  };
  std::vector<Part> parts(files.size());
  const std::int32_t eos = tok.eos_id();
  auto encode_file = [&](std::size_t i) {
    try {
      const std::string text = read_text(files[i]);
      parts[i].bytes = std::int64_t(text.size());
      for (const auto& doc : split_documents(text)) {
        parts[i].starts.push_back(parts[i].tokens.size());
        const auto ids = tok.encode(doc);
        parts[i].tokens.insert(parts[i].tokens.end(), ids.begin(), ids.end());
        if (eos >= 0) parts[i].tokens.push_back(std::uint32_t(eos));
      }
    } catch (const std::exception& e) {
      parts[i].error = e.what();
    }
  };
  // Files are handed out in turn; the result is assembled in file order.
  const int n_threads = thread_count(threads, files.size());
  std::vector<std::thread> pool;
  for (int w = 0; w < n_threads; ++w)
    pool.emplace_back([&, w] {
      for (std::size_t i = std::size_t(w); i < files.size(); i += std::size_t(n_threads)) encode_file(i);
    });
  for (auto& t : pool) t.join();
  EncodeStats st;
  std::vector<std::uint32_t> all;
  DocumentIndex index;
  for (auto& p : parts) {
    EXA_REQUIRE(p.error.empty(), "{}", p.error);
    for (const auto s : p.starts) index.starts.push_back(all.size() + s);
    all.insert(all.end(), p.tokens.begin(), p.tokens.end());
    st.bytes += p.bytes;
  }
  EXA_REQUIRE(!all.empty(), "examoe-tokenize encode: the files hold no text (only blank lines)");
  index.tokens = all.size();
  write_shard(shard, all, tok.vocab_size(), dtype);
  write_document_index(shard + ".docs", index);
  st.tokens = std::int64_t(all.size());
  st.documents = std::int64_t(index.starts.size());
  return st;
}

}  // namespace exa::io
