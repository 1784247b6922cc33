// Subword tokenizers (io/tokenizer.hpp) and the shard's document index
// (io/document_index.hpp): documents split at blank lines; the index
// written, read back and refused when damaged; with SentencePiece, a model
// trained on a small corpus encodes and decodes its documents, and
// encode_corpus writes the same shard and index with 1 or 2 threads, each
// document ending with the end-of-sequence token. A build without
// SentencePiece refuses with the package to install.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "io/document_index.hpp"
#include "io/tokenizer.hpp"
#include "io_test_util.hpp"

using namespace exa::io;
using exa::io::test::error_of;
using exa::io::test::read_bytes;
using exa::io::test::scratch;
using exa::io::test::write_bytes;

namespace {

// A small corpus of paragraphs from a few words, enough for a vocabulary of 100.
std::string corpus_text(int paragraphs) {
  const char* words[] = {"the", "expert", "router", "sends", "tokens", "to", "layers", "of", "a", "model",
                         "and", "gradients", "flow", "back", "through", "each", "rank"};
  std::string t;
  for (int p = 0; p < paragraphs; ++p) {
    for (int l = 0; l < 3; ++l) {
      for (int w = 0; w < 9; ++w) t += std::string(w ? " " : "") + words[(p * 7 + l * 5 + w * 3) % 17];
      t += "\n";
    }
    t += "\n";
  }
  return t;
}

}  // namespace

TEST(Tokenizer, DocumentsAreRunsOfNonEmptyLines) {
  EXPECT_EQ(split_documents("a\nb\n\n\nc\n"), (std::vector<std::string>{"a\nb", "c"}));
  EXPECT_EQ(split_documents("\n  \r\nx\r\n"), (std::vector<std::string>{"x"}));
  EXPECT_TRUE(split_documents("\n\n").empty());
}

TEST(DocumentIndex, RoundTripAndDamage) {
  const auto p = scratch("a.docs");
  write_document_index(p, {100, {0, 7, 40}});
  const auto d = read_document_index(p);
  EXPECT_EQ(d.tokens, 100u);
  EXPECT_EQ(d.starts, (std::vector<std::uint64_t>{0, 7, 40}));
  EXPECT_NE(error_of([&] { write_document_index(p, {10, {0, 5, 5}}); }).find("starts must rise"), std::string::npos);
  // Cut the last offset off: refused as truncated.
  const std::string bytes = read_bytes(p);
  write_bytes(p, bytes.substr(0, bytes.size() - 8));
  EXPECT_NE(error_of([&] { read_document_index(p); }).find("truncated"), std::string::npos);
  write_bytes(p, "not an index at all, just some text here");
  EXPECT_NE(error_of([&] { read_document_index(p); }).find("not an ExaMoE document index"), std::string::npos);
}

TEST(Tokenizer, TrainsEncodesAndDecodes) {
  const auto text = scratch("corpus.txt");
  write_bytes(text, corpus_text(60));
  TokenizerTraining t;
  t.corpus = {text};
  t.model_prefix = scratch("m");
  t.vocab_size = 400;
  if (!tokenizer_available()) {
    EXPECT_NE(error_of([&] { train_tokenizer(t); }).find("libsentencepiece-dev"), std::string::npos);
    return;
  }
  train_tokenizer(t);
  const Tokenizer tok(t.model_prefix + ".model");
  EXPECT_EQ(tok.vocab_size(), 400);
  EXPECT_GE(tok.eos_id(), 0);
  const std::string doc = "the expert router sends tokens\nto each rank";
  const auto ids = tok.encode(doc);
  EXPECT_LT(ids.size(), doc.size());  // subwords, not bytes
  EXPECT_EQ(tok.decode(ids), doc);  // newlines and all: bytes where the vocabulary has no piece
  EXPECT_NE(error_of([&] { Tokenizer bad(text); }).find("not a SentencePiece model"), std::string::npos);

  // Two files in one or two threads: the same shard and index, documents in
  // file order, each ending with the end-of-sequence token.
  const auto second = scratch("second.txt");
  write_bytes(second, "gradients flow back\n\nthrough each rank\n");
  const std::vector<std::string> files{text, second};
  const auto one = scratch("one.tok"), two = scratch("two.tok");
  const auto s1 = encode_corpus(tok, files, one, TokenDtype::uint16, 1);
  const auto s2 = encode_corpus(tok, files, two, TokenDtype::uint16, 2);
  EXPECT_EQ(read_bytes(one), read_bytes(two));
  EXPECT_EQ(read_bytes(one + ".docs"), read_bytes(two + ".docs"));
  EXPECT_EQ(s1.documents, 60 + 2);
  EXPECT_EQ(s1.tokens, s2.tokens);
  const auto index = read_document_index(one + ".docs");
  const auto shard = read_shard(one);
  ASSERT_EQ(index.starts.size(), 62u);
  EXPECT_EQ(index.tokens, std::uint64_t(shard.size()));
  for (std::size_t k = 1; k < index.starts.size(); ++k)
    EXPECT_EQ(shard.at(std::int64_t(index.starts[k]) - 1), std::uint32_t(tok.eos_id())) << "document " << k;
  EXPECT_EQ(shard.at(shard.size() - 1), std::uint32_t(tok.eos_id()));
}

// The bundled corpus's documents survive encoding: decode(encode(d)) == d,
// byte for byte, for every one of them.
TEST(Tokenizer, RoundTripsTheBundledCorpus) {
  if (!tokenizer_available()) GTEST_SKIP() << "built without SentencePiece";
  const std::string corpus = std::string(EXAMOE_SOURCE_DIR) + "/data/corpus.txt";
  TokenizerTraining t;
  t.corpus = {corpus};
  t.model_prefix = scratch("corpus_bpe");
  t.vocab_size = 1024;
  train_tokenizer(t);
  const Tokenizer tok(t.model_prefix + ".model");
  std::ifstream in(corpus, std::ios::binary);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto docs = split_documents(text);
  ASSERT_EQ(docs.size(), 11857u);
  std::size_t bad = 0, bytes = 0, tokens = 0;
  for (const auto& d : docs) {
    const auto ids = tok.encode(d);
    tokens += ids.size();
    bytes += d.size();
    if (tok.decode(ids) != d && bad++ < 3) ADD_FAILURE() << "document does not round-trip: " << d.substr(0, 80);
  }
  EXPECT_EQ(bad, 0u);
  std::printf("corpus round trip: %zu documents, %zu bytes in %zu tokens (%.2f bytes per token)\n", docs.size(),
              bytes, tokens, double(bytes) / double(tokens));
}
