// The bundled default corpus: present, large enough to learn from, small
// enough to ship, plain ASCII prose (what make-corpus.sh promises), and
// usable with the quick-start deck's sequence length.
#include <gtest/gtest.h>

#include <cctype>
#include <cstdint>
#include <string>

#include "io/dataset.hpp"
#include "io/sampler.hpp"
#include "io_test_util.hpp"

using namespace exa::io;

namespace {
const std::string kCorpus = std::string(EXAMOE_SOURCE_DIR) + "/data/corpus.txt";
}

TEST(Corpus, ExistsWithSizeBetween1And4MB) {
  const std::string bytes = exa::io::test::read_bytes(kCorpus);
  ASSERT_FALSE(bytes.empty()) << kCorpus << " is missing: regenerate it with scripts/make-corpus.sh";
  EXPECT_GE(bytes.size(), 1000000u);
  EXPECT_LE(bytes.size(), 4000000u);
}

TEST(Corpus, IsPrintableAsciiText) {
  const std::string bytes = exa::io::test::read_bytes(kCorpus);
  std::size_t printable = 0, letters = 0, spaces = 0;
  for (const char c : bytes) {
    const auto u = static_cast<unsigned char>(c);
    ASSERT_LT(u, 128u) << "make-corpus.sh transliterates to ASCII";  // so also < V = 256
    printable += (std::isprint(u) || u == '\n') ? 1 : 0;
    letters += std::isalpha(u) ? 1 : 0;
    spaces += u == ' ' ? 1 : 0;
  }
  EXPECT_GE(printable, bytes.size() * 999 / 1000);
  // Prose: mostly letters, with words separated by spaces.
  EXPECT_GE(letters, bytes.size() * 6 / 10);
  EXPECT_GE(spaces, bytes.size() / 10);
}

TEST(Corpus, SuppliesTheQuickStartDeck) {
  DataSpec spec;  // defaults: data/corpus.txt as text, val_fraction 0.05
  spec.path = kCorpus;
  spec.seq_len = 128;  // input/tiny.toml
  const Sampler s(Dataset::open(spec), 1234);
  EXPECT_EQ(s.data().tokens().vocab(), 256);
  EXPECT_GT(s.n_val_windows(), 500);
  const Batch b = s.train_batch(0, 8, 0, 1);
  EXPECT_EQ(b.inputs.size(), 8u * 128u);
}
