#pragma once
// Subword tokenizers on SentencePiece (BPE or unigram): training a model
// from text files, and encoding a corpus into a token shard
// (io/token_shard.hpp) with a document index beside it
// (io/document_index.hpp). A document is a run of non-empty lines; blank
// lines separate documents, and each document's tokens end with the
// model's end-of-sequence token. `examoe-tokenize` is the command-line
// front end (docs/data.md).
//
// A build without SentencePiece (configure found no libsentencepiece-dev)
// has these functions, and each throws exa::Error saying so.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "io/token_shard.hpp"

namespace exa::io {

bool tokenizer_available();  // built with SentencePiece

struct TokenizerTraining {
  std::vector<std::string> corpus;   // text files
  std::string model_prefix;          // writes model_prefix.model and .vocab
  std::int64_t vocab_size = 4096;
  std::string model_type = "bpe";    // "bpe" | "unigram"
  int threads = 0;                   // 0: the machine's cores
};
// exa::Error naming the input and the fix (a missing file, a vocabulary
// the corpus cannot fill, an unknown model type).
void train_tokenizer(const TokenizerTraining& t);

class Tokenizer {
 public:
  explicit Tokenizer(const std::string& model_path);
  ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  std::int64_t vocab_size() const;
  std::int32_t eos_id() const;  // -1 when the model has none
  std::vector<std::uint32_t> encode(const std::string& text) const;
  std::string decode(const std::vector<std::uint32_t>& ids) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

struct EncodeStats {
  std::int64_t tokens = 0, documents = 0, bytes = 0;
};
// Encodes `files` (in parallel, one thread per file up to `threads`, 0 =
// the cores) into `shard` and its document index `shard + ".docs"`, in the
// files' order whatever the threads.
EncodeStats encode_corpus(const Tokenizer& tok, const std::vector<std::string>& files, const std::string& shard,
                          TokenDtype dtype, int threads = 0);

// A text's documents: its runs of non-empty lines, each joined by '\n'.
std::vector<std::string> split_documents(const std::string& text);

}  // namespace exa::io
