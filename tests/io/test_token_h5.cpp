// HDF5 token datasets: any integer type, a configurable name, the
// vocab_size attribute, and the exact message of each malformed case.
#include <gtest/gtest.h>
#include <hdf5.h>

#include <cstdint>
#include <string>
#include <vector>

#include "io/dataset.hpp"
#include "io/token_h5.hpp"
#include "io_test_util.hpp"

using namespace exa::io;
using exa::io::test::error_of;
using exa::io::test::scratch;
using exa::io::test::write_bytes;

namespace {

// Writes `values` as dataset `name` of type `mem_type` (stored as `file_type`)
// in a new file; `dims` defaults to 1-D. Optional vocab_size attribute.
template <class T>
void write_h5(const std::string& path, const std::string& name, const std::vector<T>& values, hid_t mem_type,
              hid_t file_type, std::vector<hsize_t> dims = {}, std::int64_t vocab_attr = 0) {
  if (dims.empty()) dims = {values.size()};
  const hid_t f = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  ASSERT_GE(f, 0);
  const hid_t s = H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr);
  const hid_t d = H5Dcreate2(f, name.c_str(), file_type, s, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  ASSERT_GE(d, 0);
  if (!values.empty()) {
    ASSERT_GE(H5Dwrite(d, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()), 0);
  }
  if (vocab_attr > 0) {
    const hid_t as = H5Screate(H5S_SCALAR);
    const hid_t a = H5Acreate2(d, "vocab_size", H5T_STD_I64LE, as, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(a, H5T_NATIVE_INT64, &vocab_attr);
    H5Aclose(a);
    H5Sclose(as);
  }
  H5Dclose(d);
  H5Sclose(s);
  H5Fclose(f);
}

const std::string kRewrite = "write the tokens as a 1-D integer dataset named 'tokens'";

}  // namespace

TEST(TokenH5, ReadsInt32Tokens) {
  const std::string p = scratch("i32.h5");
  std::vector<std::int32_t> v(3000);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<std::int32_t>((i * 7919) % 256);
  write_h5(p, "tokens", v, H5T_NATIVE_INT32, H5T_STD_I32LE);
  const TokenStore s = read_h5_tokens(p, kDefaultH5Dataset, 256);
  EXPECT_EQ(s.vocab(), 256);
  EXPECT_EQ(s.width(), 2);
  ASSERT_EQ(s.size(), 3000);
  for (std::size_t i = 0; i < v.size(); ++i) ASSERT_EQ(s.at(i), static_cast<std::uint32_t>(v[i]));
}

TEST(TokenH5, NamedUint64DatasetWithVocabAttribute) {
  const std::string p = scratch("u64.h5");
  const std::vector<std::uint64_t> v = {0, 1, 69999, 42, 65536};
  write_h5(p, "ids", v, H5T_NATIVE_UINT64, H5T_STD_U64LE, {}, 70000);
  const TokenStore s = read_h5_tokens(p, "ids", 256);
  EXPECT_EQ(s.vocab(), 70000);  // the attribute wins over the caller's default
  EXPECT_EQ(s.width(), 4);
  for (std::size_t i = 0; i < v.size(); ++i) EXPECT_EQ(s.at(i), v[i]);
}

TEST(TokenH5, DatasetOpensHdf5) {
  const std::string p = scratch("ds.h5");
  std::vector<std::uint16_t> v(500);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<std::uint16_t>(i % 256);
  write_h5(p, "tokens", v, H5T_NATIVE_UINT16, H5T_STD_U16LE);
  DataSpec spec;
  spec.path = p;
  spec.format = DataFormat::hdf5;
  spec.seq_len = 16;
  spec.val_fraction = 0.1;
  const Dataset d = Dataset::open(spec);
  EXPECT_EQ(d.n_tokens(), 500);
  EXPECT_EQ(d.n_train(), 450);
}

TEST(TokenH5Errors, MissingAndEmptyFile) {
  const std::string p = scratch("nope.h5");
  EXPECT_EQ(error_of([&] { read_h5_tokens(p, "tokens", 256); }),
            p + ": cannot open: No such file or directory; check data.path in the deck");
  const std::string e = scratch("empty.h5");
  write_bytes(e, "");
  EXPECT_EQ(error_of([&] { read_h5_tokens(e, "tokens", 256); }), e + ": file is empty, not an HDF5 file; " + kRewrite);
}

TEST(TokenH5Errors, NotHdf5) {
  const std::string p = scratch("text.h5");
  write_bytes(p, "plain text, not HDF5\n");
  EXPECT_EQ(error_of([&] { read_h5_tokens(p, "tokens", 256); }),
            p + " is not an HDF5 file; set data.format to \"text\" or \"shard\" to match it, or " + kRewrite);
}

TEST(TokenH5Errors, NoSuchDataset) {
  const std::string p = scratch("other.h5");
  write_h5(p, "ids", std::vector<std::int32_t>{1, 2, 3}, H5T_NATIVE_INT32, H5T_STD_I32LE);
  EXPECT_EQ(error_of([&] { read_h5_tokens(p, "tokens", 256); }),
            p + ": no dataset 'tokens'; " + kRewrite + ", or name the dataset that holds them");
}

TEST(TokenH5Errors, NotOneDimensional) {
  const std::string p = scratch("2d.h5");
  write_h5(p, "tokens", std::vector<std::int32_t>(6, 1), H5T_NATIVE_INT32, H5T_STD_I32LE, {2, 3});
  EXPECT_EQ(error_of([&] { read_h5_tokens(p, "tokens", 256); }),
            p + ": dataset 'tokens' has 2 dimensions; token datasets are 1-D (flatten it)");
}

TEST(TokenH5Errors, NotIntegers) {
  const std::string p = scratch("float.h5");
  write_h5(p, "tokens", std::vector<float>{1, 2, 3}, H5T_NATIVE_FLOAT, H5T_IEEE_F32LE);
  EXPECT_EQ(error_of([&] { read_h5_tokens(p, "tokens", 256); }),
            p + ": dataset 'tokens' holds floating-point numbers, not integer tokens; " + kRewrite);
}

TEST(TokenH5Errors, EmptyDataset) {
  const std::string p = scratch("empty_ds.h5");
  write_h5(p, "tokens", std::vector<std::int32_t>{}, H5T_NATIVE_INT32, H5T_STD_I32LE, {0});
  EXPECT_EQ(error_of([&] { read_h5_tokens(p, "tokens", 256); }), p + ": dataset 'tokens' is empty; " + kRewrite);
}

TEST(TokenH5Errors, TokenOutOfRange) {
  const std::string p = scratch("range.h5");
  write_h5(p, "tokens", std::vector<std::int32_t>{3, 255, 256, 9000}, H5T_NATIVE_INT32, H5T_STD_I32LE);
  EXPECT_EQ(error_of([&] { read_h5_tokens(p, "tokens", 256); }),
            p + ": dataset 'tokens': token at position 2 is 256, not in [0, 256); retokenise the data, or set the "
                "vocabulary (attribute vocab_size, or model.vocab_size) to cover it");
  write_h5(p, "tokens", std::vector<std::int32_t>{3, -1}, H5T_NATIVE_INT32, H5T_STD_I32LE);
  EXPECT_EQ(error_of([&] { read_h5_tokens(p, "tokens", 256); }),
            p + ": dataset 'tokens': token at position 1 is -1, not in [0, 256); retokenise the data, or set the "
                "vocabulary (attribute vocab_size, or model.vocab_size) to cover it");
}

TEST(TokenH5Errors, TruncatedFile) {
  const std::string p = scratch("cut.h5");
  write_h5(p, "tokens", std::vector<std::int32_t>(20000, 7), H5T_NATIVE_INT32, H5T_STD_I32LE);
  std::filesystem::resize_file(p, 40000);  // HDF5 sees end-of-file before its recorded end
  EXPECT_EQ(error_of([&] { read_h5_tokens(p, "tokens", 256); }),
            p + ": HDF5 cannot open it (truncated or corrupt); re-create the file");
}
