// Token shards: uint16/uint32 round trips, the header layout, text
// conversion, and the exact message of every malformed-file case.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "io/token_shard.hpp"
#include "io/token_text.hpp"
#include "io_test_util.hpp"

using namespace exa::io;
using exa::io::test::error_of;
using exa::io::test::read_bytes;
using exa::io::test::scratch;
using exa::io::test::write_bytes;

namespace {

const std::string kRemake = "re-create the shard with `examoe convert --text FILE --out FILE.tok`";

std::vector<std::uint32_t> ramp(std::size_t n, std::uint32_t vocab) {
  std::vector<std::uint32_t> t(n);
  for (std::size_t i = 0; i < n; ++i) t[i] = static_cast<std::uint32_t>((i * 2654435761u) % vocab);
  return t;
}

void expect_tokens(const TokenStore& s, const std::vector<std::uint32_t>& want) {
  ASSERT_EQ(s.size(), static_cast<std::int64_t>(want.size()));
  for (std::size_t i = 0; i < want.size(); ++i) ASSERT_EQ(s.at(static_cast<std::int64_t>(i)), want[i]) << i;
}

// A valid 100-token uint16 shard's bytes, to corrupt.
std::string good_shard_bytes() {
  const std::string p = scratch("good.tok");
  write_shard(p, ramp(100, 300), 300, TokenDtype::uint16);
  return read_bytes(p);
}

}  // namespace

TEST(TokenShard, RoundTripUint16) {
  const std::string p = scratch("u16.tok");
  const auto want = ramp(5000, 65536);
  write_shard(p, want, 65536, TokenDtype::uint16);
  const TokenStore s = read_shard(p);
  EXPECT_EQ(s.width(), 2);
  EXPECT_EQ(s.vocab(), 65536);
  expect_tokens(s, want);
  EXPECT_EQ(read_bytes(p).size(), kShardHeaderBytes + 2 * want.size());
}

TEST(TokenShard, RoundTripUint32) {
  const std::string p = scratch("u32.tok");
  auto want = ramp(3000, 1u << 30);
  want[7] = (1u << 30) - 1;  // the largest representable token of this vocab
  write_shard(p, want, std::int64_t{1} << 30, TokenDtype::uint32);
  const TokenStore s = read_shard(p);
  EXPECT_EQ(s.width(), 4);
  EXPECT_EQ(s.vocab(), std::int64_t{1} << 30);
  expect_tokens(s, want);
  std::vector<std::int32_t> out(10);
  s.copy(5, 10, out.data());
  EXPECT_EQ(out[2], static_cast<std::int32_t>((1u << 30) - 1));
}

TEST(TokenShard, HeaderLayoutIsLittleEndian) {
  const std::string b = good_shard_bytes();
  ASSERT_EQ(b.size(), 32u + 200u);
  EXPECT_EQ(b.substr(0, 8), std::string("EXATOKS\0", 8));
  EXPECT_EQ(b.substr(8, 4), std::string("\x01\0\0\0", 4));             // version 1
  EXPECT_EQ(b.substr(12, 4), std::string("\x02\0\0\0", 4));            // uint16
  EXPECT_EQ(b.substr(16, 8), std::string("\x64\0\0\0\0\0\0\0", 8));    // 100 tokens
  EXPECT_EQ(b.substr(24, 8), std::string("\x2c\x01\0\0\0\0\0\0", 8));  // V = 300, reserved 0
  const auto t1 = ramp(2, 300)[1];
  EXPECT_EQ(static_cast<unsigned char>(b[34]), t1 & 0xff);
  EXPECT_EQ(static_cast<unsigned char>(b[35]), t1 >> 8);
}

TEST(TokenShard, ConvertTextIsByteLevel) {
  const std::string txt = scratch("hello.txt"), tok = scratch("hello.tok");
  const std::string text = "Hello, world!\n\xc3\xa9t\xc3\xa9\n";  // UTF-8 becomes its bytes
  write_bytes(txt, text);
  EXPECT_EQ(convert_text_to_shard(txt, tok, TokenDtype::uint16), static_cast<std::int64_t>(text.size()));
  const TokenStore s = read_shard(tok);
  EXPECT_EQ(s.vocab(), kByteVocab);
  ASSERT_EQ(s.size(), static_cast<std::int64_t>(text.size()));
  for (std::size_t i = 0; i < text.size(); ++i) EXPECT_EQ(s.at(i), static_cast<unsigned char>(text[i]));
  // The same tokens from text, uint16 and uint32 shards share a fingerprint.
  convert_text_to_shard(txt, scratch("hello32.tok"), TokenDtype::uint32);
  EXPECT_EQ(read_shard(scratch("hello32.tok")).fingerprint(), s.fingerprint());
  EXPECT_EQ(read_text_tokens(txt).fingerprint(), s.fingerprint());
}

TEST(TokenShardErrors, MissingFile) {
  const std::string p = scratch("nope.tok");
  EXPECT_EQ(error_of([&] { read_shard(p); }),
            p + ": cannot open: No such file or directory; check data.path in the deck");
}

TEST(TokenShardErrors, EmptyFile) {
  const std::string p = scratch("empty.tok");
  write_bytes(p, "");
  EXPECT_EQ(error_of([&] { read_shard(p); }), p + ": file is empty, not an ExaMoE token shard; convert text with "
                                                  "`examoe convert --text FILE --out FILE.tok`");
}

TEST(TokenShardErrors, BadMagic) {
  const std::string p = scratch("text.tok");
  write_bytes(p, "The quick brown fox jumps over the lazy dog.\n");
  const std::string want = p +
                           " is not an ExaMoE token shard (bad magic); convert text with "
                           "`examoe convert --text FILE --out FILE.tok`, or set data.format = \"text\" to train on "
                           "it as text";
  EXPECT_EQ(error_of([&] { read_shard(p); }), want);
  write_bytes(p, "Hi");  // shorter than the magic: still judged on the bytes there are
  EXPECT_EQ(error_of([&] { read_shard(p); }), want);
  write_bytes(p, "EXA");  // a prefix of the magic: a shard cut short, not a wrong format
  EXPECT_EQ(
      error_of([&] { read_shard(p); }),
      p + ": truncated: 3 bytes, shorter than the 32-byte token-shard header; the file was cut short, " + kRemake);
}

TEST(TokenShardErrors, TruncatedHeader) {
  const std::string p = scratch("short_header.tok");
  write_bytes(p, good_shard_bytes().substr(0, 20));
  EXPECT_EQ(
      error_of([&] { read_shard(p); }),
      p + ": truncated: 20 bytes, shorter than the 32-byte token-shard header; the file was cut short, " + kRemake);
}

TEST(TokenShardErrors, TruncatedTokens) {
  const std::string p = scratch("short_body.tok");
  write_bytes(p, good_shard_bytes().substr(0, 32 + 151));
  EXPECT_EQ(error_of([&] { read_shard(p); }),
            p +
                ": truncated: the header says 100 uint16 tokens but the file holds only 75 (151 bytes after the "
                "header); the file was cut short, " +
                kRemake);
}

TEST(TokenShardErrors, StrayBytes) {
  const std::string p = scratch("long.tok");
  write_bytes(p, good_shard_bytes() + "xyz");
  EXPECT_EQ(error_of([&] { read_shard(p); }),
            p + ": 3 stray bytes follow the 100 tokens the header announces; the file is corrupt, " + kRemake);
}

TEST(TokenShardErrors, UnsupportedVersion) {
  const std::string p = scratch("v7.tok");
  std::string b = good_shard_bytes();
  b[8] = 7;
  write_bytes(p, b);
  EXPECT_EQ(error_of([&] { read_shard(p); }),
            p + ": token-shard format version 7 is not supported (this ExaMoE reads version 1); " + kRemake);
}

TEST(TokenShardErrors, UnsupportedDtype) {
  const std::string p = scratch("u64.tok");
  std::string b = good_shard_bytes();
  b[12] = 8;
  write_bytes(p, b);
  EXPECT_EQ(error_of([&] { read_shard(p); }),
            p + ": token dtype code 8 is not supported (2 = uint16, 4 = uint32); " + kRemake);
}

// Tokens are int32 once read: a header vocabulary above 2^31 (which the
// writer refuses) would let tokens >= 2^31 through as negative ids.
TEST(TokenShardErrors, VocabAboveTheLimit) {
  const std::string p = scratch("vocab_big.tok");
  std::string b = good_shard_bytes();
  b[24] = 1;  // V = 0x80000001
  b[25] = 0;
  b[26] = 0;
  b[27] = static_cast<char>(0x80);
  write_bytes(p, b);
  EXPECT_EQ(error_of([&] { read_shard(p); }),
            p + ": header vocabulary size 2147483649 is above the shard limit 2^31; the file is corrupt, " + kRemake);
}

TEST(TokenShardErrors, TokenNotBelowVocab) {
  const std::string p = scratch("vocab.tok");
  std::vector<std::uint32_t> t = {1, 2, 3, 77, 4, 99, 5};
  write_shard(p, t, 300, TokenDtype::uint16);
  std::string b = read_bytes(p);
  b[24] = 50;  // header now claims V = 50: 77 at position 3 is the first token out of range
  b[25] = 0;
  write_bytes(p, b);
  EXPECT_EQ(error_of([&] { read_shard(p); }),
            p +
                ": token at position 3 is 77, not below the vocabulary size 50; the shard is corrupt or its header "
                "understates the vocabulary; " +
                kRemake);
}

TEST(TokenShardErrors, WriterRefusesBadTokens) {
  const std::string p = scratch("refused.tok");
  EXPECT_EQ(error_of([&] {
              write_shard(p, {5, 6, 300, 301}, 300, TokenDtype::uint16);
            }),
            p + ": token at position 2 is 300, not below the vocabulary size 300; nothing was written");
  EXPECT_EQ(error_of([&] { write_shard(p, {5}, 70000, TokenDtype::uint16); }),
            p + ": vocabulary size 70000 does not fit uint16 tokens; write the shard as uint32");
  EXPECT_FALSE(std::filesystem::exists(p));
  EXPECT_EQ(error_of([] { parse_token_dtype("int8"); }),
            "token dtype 'int8' is not supported; use uint16 (V <= 65536) or uint32");
}

TEST(TextTokensErrors, MissingAndEmpty) {
  const std::string p = scratch("nope.txt");
  EXPECT_EQ(error_of([&] { read_text_tokens(p); }),
            p + ": cannot open: No such file or directory; check data.path in the deck (the bundled corpus is "
                "data/corpus.txt)");
  EXPECT_EQ(error_of([&] { convert_text_to_shard(p, scratch("x.tok")); }),
            p + ": cannot open: No such file or directory; check data.path in the deck (the bundled corpus is "
                "data/corpus.txt)");
  const std::string e = scratch("empty.txt");
  write_bytes(e, "");
  EXPECT_EQ(error_of([&] { read_text_tokens(e); }),
            e + ": text file is empty; data.path must name a text file with some text in it");
}
