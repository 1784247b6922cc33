#include "io/token_h5.hpp"

#include <hdf5.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <vector>

#include "core/error.hpp"

namespace exa::io {

namespace {

// HDF5 prints its error stack to stderr by default; ExaMoE reports its own
// message instead, so the stack is silenced while this reader runs.
class QuietHdf5 {
 public:
  QuietHdf5() {
    H5Eget_auto2(H5E_DEFAULT, &func_, &data_);
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  }
  ~QuietHdf5() { H5Eset_auto2(H5E_DEFAULT, func_, data_); }
  QuietHdf5(const QuietHdf5&) = delete;
  QuietHdf5& operator=(const QuietHdf5&) = delete;

 private:
  H5E_auto2_t func_ = nullptr;
  void* data_ = nullptr;
};

// Owns one HDF5 identifier; closes it with the matching H5?close.
class Handle {
 public:
  Handle(hid_t id, herr_t (*close)(hid_t)) : id_(id), close_(close) {}
  ~Handle() {
    if (id_ >= 0) close_(id_);
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  hid_t get() const { return id_; }
  bool ok() const { return id_ >= 0; }

 private:
  hid_t id_;
  herr_t (*close_)(hid_t);
};

const char* class_name(H5T_class_t c) {
  switch (c) {
    case H5T_FLOAT:
      return "floating-point numbers";
    case H5T_STRING:
      return "strings";
    case H5T_COMPOUND:
      return "compound records";
    default:
      return "non-integer values";
  }
}

}  // namespace

TokenStore read_h5_tokens(const std::string& path, const std::string& dataset, std::int64_t vocab) {
  const QuietHdf5 quiet;
  const std::string ds = fmt::format("{}: dataset '{}'", path, dataset);
  const std::string rewrite = fmt::format("write the tokens as a 1-D integer dataset named '{}'", dataset);

  struct stat st {};
  EXA_REQUIRE(::stat(path.c_str(), &st) == 0, "{}: cannot open: {}; check data.path in the deck", path,
              std::strerror(errno));
  EXA_REQUIRE(st.st_size > 0, "{}: file is empty, not an HDF5 file; {}", path, rewrite);
  EXA_REQUIRE(H5Fis_hdf5(path.c_str()) > 0,
              "{} is not an HDF5 file; set data.format to \"text\" or \"shard\" to match it, or {}", path, rewrite);
  const Handle file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
  EXA_REQUIRE(file.ok(), "{}: HDF5 cannot open it (truncated or corrupt); re-create the file", path);
  EXA_REQUIRE(H5Lexists(file.get(), dataset.c_str(), H5P_DEFAULT) > 0,
              "{}: no dataset '{}'; {}, or name the dataset that holds them", path, dataset, rewrite);
  const Handle dset(H5Dopen2(file.get(), dataset.c_str(), H5P_DEFAULT), H5Dclose);
  EXA_REQUIRE(dset.ok(), "{} is not a dataset; {}", ds, rewrite);

  const Handle type(H5Dget_type(dset.get()), H5Tclose);
  const H5T_class_t cls = H5Tget_class(type.get());
  EXA_REQUIRE(cls == H5T_INTEGER, "{} holds {}, not integer tokens; {}", ds, class_name(cls), rewrite);
  const Handle space(H5Dget_space(dset.get()), H5Sclose);
  const int ndims = H5Sget_simple_extent_ndims(space.get());
  EXA_REQUIRE(ndims == 1, "{} has {} dimensions; token datasets are 1-D (flatten it)", ds, ndims);
  hsize_t n = 0;
  H5Sget_simple_extent_dims(space.get(), &n, nullptr);
  EXA_REQUIRE(n > 0, "{} is empty; {}", ds, rewrite);

  if (H5Aexists(dset.get(), "vocab_size") > 0) {
    const Handle attr(H5Aopen(dset.get(), "vocab_size", H5P_DEFAULT), H5Aclose);
    std::int64_t v = 0;
    EXA_REQUIRE(attr.ok() && H5Aread(attr.get(), H5T_NATIVE_INT64, &v) >= 0 && v > 0,
                "{}: attribute vocab_size is not a positive integer; fix or delete it", ds);
    vocab = v;
  }
  const int width = vocab <= 65536 ? 2 : 4;

  // Read in blocks through a 64-bit buffer: any stored integer type converts
  // into it, and a negative value is seen as negative, not wrapped.
  constexpr hsize_t kBlock = 1 << 20;
  auto bytes = std::make_shared<std::vector<unsigned char>>(static_cast<std::size_t>(n) * width);
  std::vector<std::int64_t> buf(static_cast<std::size_t>(std::min(n, kBlock)));
  for (hsize_t i0 = 0; i0 < n; i0 += kBlock) {
    hsize_t cnt = std::min(kBlock, n - i0);
    const Handle mem(H5Screate_simple(1, &cnt, nullptr), H5Sclose);
    H5Sselect_hyperslab(space.get(), H5S_SELECT_SET, &i0, nullptr, &cnt, nullptr);
    EXA_REQUIRE(H5Dread(dset.get(), H5T_NATIVE_INT64, mem.get(), space.get(), H5P_DEFAULT, buf.data()) >= 0,
                "{}: reading tokens {}..{} failed (truncated or corrupt file); re-create the file", ds, i0, i0 + cnt);
    for (hsize_t i = 0; i < cnt; ++i) {
      const std::int64_t t = buf[i];
      EXA_REQUIRE(t >= 0 && t < vocab,
                  "{}: token at position {} is {}, not in [0, {}); retokenise the data, or set the vocabulary "
                  "(attribute vocab_size, or model.vocab_size) to cover it",
                  ds, i0 + i, t, vocab);
      unsigned char* p = bytes->data() + (i0 + i) * width;
      for (int b = 0; b < width; ++b) p[b] = static_cast<unsigned char>(t >> (8 * b));
    }
  }
  const std::shared_ptr<const unsigned char> keep(bytes, bytes->data());
  TokenStore tokens(keep, bytes->data(), width, static_cast<std::int64_t>(n), vocab, path);
  tokens.validate("");  // already checked above; computes the fingerprint
  return tokens;
}

}  // namespace exa::io
