// Dataset: the train/validation split by position, its size errors, the
// vocabulary check against the model, and next-token windows.
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "io/dataset.hpp"
#include "io/token_shard.hpp"
#include "io_test_util.hpp"

using namespace exa::io;
using exa::io::test::error_of;
using exa::io::test::scratch;
using exa::io::test::write_bytes;

namespace {

// n tokens 0, 1, 2, ... (mod 256) as one-byte tokens: a token's value tells
// where it came from.
TokenStore counting(std::int64_t n, const std::string& name = "counting") {
  auto bytes = std::make_shared<std::vector<unsigned char>>(n);
  for (std::int64_t i = 0; i < n; ++i) (*bytes)[i] = static_cast<unsigned char>(i % 256);
  return TokenStore(std::shared_ptr<const unsigned char>(bytes, bytes->data()), bytes->data(), 1, n, 256, name);
}

}  // namespace

TEST(Dataset, SplitHoldsOutTheTail) {
  const Dataset d(counting(1000), 0.1, 16, 256);
  EXPECT_EQ(d.n_train(), 900);
  EXPECT_EQ(d.n_val(), 100);
}

TEST(Dataset, ValidationHasAtLeastOneWindow) {
  const Dataset d(counting(1000), 0.001, 16, 256);  // ceil(1.0) = 1 token: raised to seq_len + 1
  EXPECT_EQ(d.n_val(), 17);
  const Dataset none(counting(1000), 0.0, 16, 256);
  EXPECT_EQ(none.n_val(), 0);
  EXPECT_EQ(none.n_train(), 1000);
}

TEST(Dataset, TooSmallForSeqLen) {
  EXPECT_EQ(error_of([] { Dataset(counting(40), 0.05, 32, 256); }),
            "counting: 40 tokens are too few for model.seq_len = 32: training needs at least 33 tokens (seq_len + "
            "1) after 33 are held out for validation (data.val_fraction = 0.05); use more data or a smaller "
            "model.seq_len");
  EXPECT_EQ(error_of([] { Dataset(counting(10), 0.0, 10, 256); }),
            "counting: 10 tokens are too few for model.seq_len = 10: training needs at least 11 tokens (seq_len + "
            "1) after 0 are held out for validation (data.val_fraction = 0); use more data or a smaller "
            "model.seq_len");
  EXPECT_NO_THROW(Dataset(counting(66), 0.05, 32, 256));  // exactly two windows' worth
}

TEST(Dataset, VocabularyMustFitTheModel) {
  EXPECT_EQ(error_of([] { Dataset(counting(1000), 0.1, 16, 128); }),
            "counting: the data's vocabulary size is 256 but model.vocab_size = 128; set model.vocab_size = 256");
  EXPECT_NO_THROW(Dataset(counting(1000), 0.1, 16, 512));  // a larger model vocabulary is fine
}

TEST(Dataset, WindowIsNextTokenPrediction) {
  const Dataset d(counting(1000), 0.1, 8, 256);
  std::vector<std::int32_t> in(8), tg(8);
  d.window(100, in.data(), tg.data());
  for (int t = 0; t < 8; ++t) {
    EXPECT_EQ(in[t], 100 + t);
    EXPECT_EQ(tg[t], 101 + t);
  }
}

TEST(Dataset, OpensEveryFormat) {
  const std::string txt = scratch("ds.txt"), tok = scratch("ds.tok");
  std::string text;
  for (int i = 0; i < 50; ++i) text += "The quick brown fox jumps over the lazy dog. ";
  write_bytes(txt, text);
  convert_text_to_shard(txt, tok, TokenDtype::uint32);
  DataSpec spec;
  spec.path = txt;
  spec.seq_len = 32;
  const Dataset a = Dataset::open(spec);
  spec.path = tok;
  spec.format = parse_data_format("shard");
  const Dataset b = Dataset::open(spec);
  EXPECT_EQ(a.n_tokens(), static_cast<std::int64_t>(text.size()));
  EXPECT_EQ(a.n_train(), b.n_train());
  EXPECT_EQ(a.tokens().fingerprint(), b.tokens().fingerprint());
  EXPECT_EQ(error_of([] { parse_data_format("csv"); }), "data format 'csv' is not known; use text, shard or hdf5");
  spec.format = DataFormat::shard;
  spec.path = txt;  // text given as a shard: the bad-magic message, through Dataset::open
  EXPECT_NE(error_of([&] { Dataset::open(spec); }).find("is not an ExaMoE token shard (bad magic)"), std::string::npos);
}
