// examoe-tokenize: subword tokenizers for ExaMoE corpora (docs/data.md).
//
//   examoe-tokenize train --vocab N [--model-type bpe|unigram] --out PREFIX [--encode] CORPUS...
//       trains a SentencePiece model into PREFIX.model (and PREFIX.vocab);
//       with --encode also encodes CORPUS into PREFIX.tok (+ PREFIX.tok.docs)
//   examoe-tokenize encode --model M [--dtype uint16|uint32] -o SHARD CORPUS...
//       encodes text into a token shard and its document index (SHARD.docs)
//
// Documents are runs of non-empty lines; each ends with the model's
// end-of-sequence token. Train with `data.format = "shard"`, `data.path =
// SHARD` and `model.vocab_size` = the vocabulary printed here. No MPI.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <cstdio>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "io/tokenizer.hpp"

namespace {

void print_encoded(const exa::io::EncodeStats& st, const std::string& shard, std::int64_t vocab) {
  std::printf("examoe-tokenize: %s: %lld tokens in %lld documents from %lld bytes (%.2f bytes/token), vocabulary "
              "%lld; train with data.format = \"shard\", data.path = \"%s\", model.vocab_size = %lld\n",
              shard.c_str(), static_cast<long long>(st.tokens), static_cast<long long>(st.documents),
              static_cast<long long>(st.bytes), double(st.bytes) / double(std::max<std::int64_t>(st.tokens, 1)),
              static_cast<long long>(vocab), shard.c_str(), static_cast<long long>(vocab));
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"examoe-tokenize: train SentencePiece tokenizers and encode text into ExaMoE token shards"};
  app.require_subcommand(1);
  exa::io::TokenizerTraining t;
  std::vector<std::string> corpus;
  std::string model, out, dtype = "uint16";
  bool encode_too = false;
  int threads = 0;
  CLI::App* train = app.add_subcommand("train", "train a BPE or unigram model on text files");
  train->add_option("--vocab", t.vocab_size, "vocabulary size (4096 suits the bundled corpus)")->required();
  train->add_option("--model-type", t.model_type, "bpe or unigram")->check(CLI::IsMember({"bpe", "unigram"}));
  train->add_option("--out", t.model_prefix, "writes OUT.model and OUT.vocab")->required();
  train->add_flag("--encode", encode_too, "also encode the corpus into OUT.tok and OUT.tok.docs");
  train->add_option("corpus", corpus, "text files")->required()->check(CLI::ExistingFile);
  CLI::App* enc = app.add_subcommand("encode", "encode text files into a token shard and its document index");
  enc->add_option("--model", model, "a SentencePiece model (examoe-tokenize train)")->required()->check(CLI::ExistingFile);
  enc->add_option("-o,--out", out, "the shard to write (and OUT.docs)")->required();
  enc->add_option("--dtype", dtype, "uint16 (vocabulary <= 65536) or uint32")->check(CLI::IsMember({"uint16", "uint32"}));
  enc->add_option("corpus", corpus, "text files")->required()->check(CLI::ExistingFile);
  for (auto* s : {train, enc}) s->add_option("--threads", threads, "threads (0: the cores)");
  CLI11_PARSE(app, argc, argv);
  try {
    if (train->parsed()) {
      t.corpus = corpus;
      t.threads = threads;
      exa::io::train_tokenizer(t);
      std::printf("examoe-tokenize: wrote %s.model and %s.vocab (%s, vocabulary %lld)\n", t.model_prefix.c_str(),
                  t.model_prefix.c_str(), t.model_type.c_str(), static_cast<long long>(t.vocab_size));
      if (!encode_too) return 0;
      model = t.model_prefix + ".model";
      out = t.model_prefix + ".tok";
    }
    const exa::io::Tokenizer tok(model);
    // Without --dtype, the narrowest that holds the vocabulary; a --dtype
    // too narrow is refused by the shard writer.
    const bool dtype_given = enc->parsed() && enc->count("--dtype") > 0;
    const auto dt =
        exa::io::parse_token_dtype(!dtype_given && tok.vocab_size() > 65536 ? std::string("uint32") : dtype);
    print_encoded(exa::io::encode_corpus(tok, corpus, out, dt, threads), out, tok.vocab_size());
    return 0;
  } catch (const exa::Error& e) {
    std::fprintf(stderr, "examoe-tokenize: error: %s\n", e.what());
    return 1;
  }
}
