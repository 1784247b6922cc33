#include "io/checkpoint/h5.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "core/error.hpp"

namespace exa::io::h5 {

#define H5_REQUIRE(cond, ...)                               \
  do {                                                      \
    if (!(cond)) throw Failure(::fmt::format(__VA_ARGS__)); \
  } while (0)

QuietErrors::QuietErrors() {
  H5Eget_auto2(H5E_DEFAULT, &func_, &data_);
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
}
QuietErrors::~QuietErrors() { H5Eset_auto2(H5E_DEFAULT, func_, data_); }

namespace {

herr_t collect(unsigned, const H5E_error2_t* e, void* data) {
  auto* lines = static_cast<std::vector<std::string>*>(data);
  if (e && e->desc && *e->desc) {
    std::string d = e->desc;
    if (std::find(lines->begin(), lines->end(), d) == lines->end()) lines->push_back(std::move(d));
  }
  return 0;
}

}  // namespace

std::string error_stack() {
  std::vector<std::string> lines;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, collect, &lines);
  H5Eclear2(H5E_DEFAULT);
  if (lines.empty()) return "HDF5 gave no reason";
  // The innermost entries say what actually went wrong; keep the message short.
  if (lines.size() > 4) lines.erase(lines.begin(), lines.end() - 4);
  return fmt::format("{}", fmt::join(lines, "; "));
}

hid_t check(hid_t id, const std::string& what) {
  if (id < 0) throw Failure(fmt::format("{}: {}", what, error_stack()));
  return id;
}

Id check(hid_t id, Id::Closer close, const std::string& what) { return Id(check(id, what), close); }

namespace {

Id scalar_space() { return space(H5Screate(H5S_SCALAR), "H5Screate"); }

void put(hid_t obj, const char* name, hid_t file_type, hid_t mem_type, hid_t sp, const void* buf) {
  if (H5Aexists(obj, name) > 0) check(H5Adelete(obj, name), fmt::format("replacing attribute '{}'", name));
  Id a = attr(H5Acreate2(obj, name, file_type, sp, H5P_DEFAULT, H5P_DEFAULT),
              fmt::format("creating attribute '{}'", name));
  // An empty array (null dataspace) has nothing to write.
  if (buf) check(H5Awrite(a, mem_type, buf), fmt::format("writing attribute '{}'", name));
}

Id open_attr(hid_t obj, const char* name) {
  const htri_t e = H5Aexists(obj, name);
  check(e, fmt::format("looking for attribute '{}'", name));
  H5_REQUIRE(e > 0, "attribute '{}' is missing", name);
  return attr(H5Aopen(obj, name, H5P_DEFAULT), fmt::format("opening attribute '{}'", name));
}

std::int64_t attr_elements(hid_t a, const char* name) {
  Id sp = space(H5Aget_space(a), fmt::format("attribute '{}'", name));
  const H5S_class_t cls = H5Sget_simple_extent_type(sp);
  if (cls == H5S_NULL) return 0;
  const hssize_t n = H5Sget_simple_extent_npoints(sp);
  check(static_cast<hid_t>(n), fmt::format("attribute '{}'", name));
  return static_cast<std::int64_t>(n);
}

template <class T>
T read_scalar(hid_t obj, const char* name, hid_t mem_type, H5T_class_t want, const char* kind) {
  Id a = open_attr(obj, name);
  Id t = type(H5Aget_type(a), fmt::format("attribute '{}'", name));
  H5_REQUIRE(H5Tget_class(t) == want, "attribute '{}' is not {}", name, kind);
  H5_REQUIRE(attr_elements(a, name) == 1, "attribute '{}' is not a single value", name);
  T v{};
  check(H5Aread(a, mem_type, &v), fmt::format("reading attribute '{}'", name));
  return v;
}

}  // namespace

void write_u64(hid_t obj, const char* name, std::uint64_t v) {
  Id sp = scalar_space();
  put(obj, name, H5T_STD_U64LE, H5T_NATIVE_UINT64, sp, &v);
}
void write_i64(hid_t obj, const char* name, std::int64_t v) {
  Id sp = scalar_space();
  put(obj, name, H5T_STD_I64LE, H5T_NATIVE_INT64, sp, &v);
}
void write_f64(hid_t obj, const char* name, double v) {
  Id sp = scalar_space();
  put(obj, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, sp, &v);
}
void write_u64s(hid_t obj, const char* name, const std::vector<std::uint64_t>& v) {
  const hsize_t n = v.size();
  Id sp = v.empty() ? space(H5Screate(H5S_NULL), "H5Screate") : space(H5Screate_simple(1, &n, nullptr), "H5Screate");
  put(obj, name, H5T_STD_U64LE, H5T_NATIVE_UINT64, sp, v.empty() ? nullptr : v.data());
}
void write_string(hid_t obj, const char* name, const std::string& s) {
  // Fixed-length, NUL-padded UTF-8 (h5py: bytes; .decode() gives the text).
  Id t = type(H5Tcopy(H5T_C_S1), "H5Tcopy");
  check(H5Tset_size(t, std::max<std::size_t>(1, s.size())), "H5Tset_size");
  check(H5Tset_strpad(t, H5T_STR_NULLPAD), "H5Tset_strpad");
  check(H5Tset_cset(t, H5T_CSET_UTF8), "H5Tset_cset");
  Id sp = scalar_space();
  std::string buf = s.empty() ? std::string(1, '\0') : s;
  put(obj, name, t, t, sp, buf.data());
}

bool has_attr(hid_t obj, const char* name) {
  const htri_t e = H5Aexists(obj, name);
  check(e, fmt::format("looking for attribute '{}'", name));
  return e > 0;
}

std::uint64_t read_u64(hid_t obj, const char* name) {
  return read_scalar<std::uint64_t>(obj, name, H5T_NATIVE_UINT64, H5T_INTEGER, "an integer");
}
std::int64_t read_i64(hid_t obj, const char* name) {
  return read_scalar<std::int64_t>(obj, name, H5T_NATIVE_INT64, H5T_INTEGER, "an integer");
}
double read_f64(hid_t obj, const char* name) {
  Id a = open_attr(obj, name);
  Id t = type(H5Aget_type(a), fmt::format("attribute '{}'", name));
  const H5T_class_t c = H5Tget_class(t);
  H5_REQUIRE(c == H5T_FLOAT || c == H5T_INTEGER, "attribute '{}' is not a number", name);
  H5_REQUIRE(attr_elements(a, name) == 1, "attribute '{}' is not a single value", name);
  double v = 0;
  check(H5Aread(a, H5T_NATIVE_DOUBLE, &v), fmt::format("reading attribute '{}'", name));
  return v;
}
std::vector<std::uint64_t> read_u64s(hid_t obj, const char* name) {
  Id a = open_attr(obj, name);
  Id t = type(H5Aget_type(a), fmt::format("attribute '{}'", name));
  H5_REQUIRE(H5Tget_class(t) == H5T_INTEGER, "attribute '{}' is not an integer array", name);
  std::vector<std::uint64_t> v(static_cast<std::size_t>(attr_elements(a, name)));
  if (!v.empty()) check(H5Aread(a, H5T_NATIVE_UINT64, v.data()), fmt::format("reading attribute '{}'", name));
  return v;
}
std::string read_string(hid_t obj, const char* name) {
  Id a = open_attr(obj, name);
  Id t = type(H5Aget_type(a), fmt::format("attribute '{}'", name));
  H5_REQUIRE(H5Tget_class(t) == H5T_STRING, "attribute '{}' is not a string", name);
  H5_REQUIRE(attr_elements(a, name) == 1, "attribute '{}' is not a single string", name);
  const htri_t vl = H5Tis_variable_str(t);
  check(vl, fmt::format("attribute '{}'", name));
  if (vl > 0) {  // written by another tool
    Id mt = type(H5Tcopy(H5T_C_S1), "H5Tcopy");
    check(H5Tset_size(mt, H5T_VARIABLE), "H5Tset_size");
    check(H5Tset_cset(mt, H5Tget_cset(t)), "H5Tset_cset");
    char* p = nullptr;
    check(H5Aread(a, mt, &p), fmt::format("reading attribute '{}'", name));
    std::string s = p ? std::string(p) : std::string();
    if (p) H5free_memory(p);
    return s;
  }
  const std::size_t n = H5Tget_size(t);
  H5_REQUIRE(n > 0, "attribute '{}' has an invalid string type", name);
  std::string s(n, '\0');
  check(H5Aread(a, t, s.data()), fmt::format("reading attribute '{}'", name));
  while (!s.empty() && s.back() == '\0') s.pop_back();
  return s;
}

namespace {
herr_t collect_attr(hid_t, const char* name, const H5A_info_t*, void* data) {
  static_cast<std::vector<std::string>*>(data)->emplace_back(name);
  return 0;
}
}  // namespace

std::vector<std::string> attr_names(hid_t obj) {
  std::vector<std::string> names;
  hsize_t idx = 0;
  check(H5Aiterate2(obj, H5_INDEX_NAME, H5_ITER_INC, &idx, collect_attr, &names), "listing attributes");
  return names;
}

std::vector<std::string> link_names(hid_t g) {
  H5G_info_t info;
  check(H5Gget_info(g, &info), "reading a group");
  std::vector<std::string> names;
  names.reserve(info.nlinks);
  for (hsize_t i = 0; i < info.nlinks; ++i) {
    const ssize_t n = H5Lget_name_by_idx(g, ".", H5_INDEX_NAME, H5_ITER_INC, i, nullptr, 0, H5P_DEFAULT);
    check(static_cast<hid_t>(n), "listing a group");
    std::string s(static_cast<std::size_t>(n) + 1, '\0');
    check(
        static_cast<hid_t>(H5Lget_name_by_idx(g, ".", H5_INDEX_NAME, H5_ITER_INC, i, s.data(), s.size(), H5P_DEFAULT)),
        "listing a group");
    s.resize(static_cast<std::size_t>(n));
    names.push_back(std::move(s));
  }
  return names;
}

bool link_exists(hid_t loc, const std::string& path) {
  // H5Lexists needs every intermediate component to exist: walk them.
  std::string prefix;
  std::size_t pos = 0;
  while (pos <= path.size()) {
    const std::size_t next = path.find('/', pos);
    const std::string part = path.substr(pos, next == std::string::npos ? std::string::npos : next - pos);
    if (!part.empty()) {
      prefix += (prefix.empty() && path[0] != '/') ? part : "/" + part;
      const htri_t e = H5Lexists(loc, prefix.c_str(), H5P_DEFAULT);
      check(e, fmt::format("looking for '{}'", prefix));
      if (e <= 0) return false;
    }
    if (next == std::string::npos) break;
    pos = next + 1;
  }
  return true;
}

std::vector<std::int64_t> dataset_shape(hid_t dset) {
  Id sp = space(H5Dget_space(dset), "reading a dataset's shape");
  const int r = H5Sget_simple_extent_ndims(sp);
  check(r, "reading a dataset's shape");
  std::vector<hsize_t> dims(static_cast<std::size_t>(r));
  if (r > 0) check(H5Sget_simple_extent_dims(sp, dims.data(), nullptr), "reading a dataset's shape");
  return std::vector<std::int64_t>(dims.begin(), dims.end());
}

bool is_f32(hid_t dset) {
  Id t = type(H5Dget_type(dset), "reading a dataset's type");
  return H5Tget_class(t) == H5T_FLOAT && H5Tget_size(t) == 4;
}

std::string describe_type(hid_t dset) {
  Id t = type(H5Dget_type(dset), "reading a dataset's type");
  const std::size_t bits = 8 * H5Tget_size(t);
  switch (H5Tget_class(t)) {
    case H5T_FLOAT:
      return fmt::format("float{}", bits);
    case H5T_INTEGER:
      return fmt::format("{}int{}", H5Tget_sign(t) == H5T_SGN_NONE ? "u" : "", bits);
    case H5T_STRING:
      return "string";
    default:
      return fmt::format("a non-numeric {}-bit type", bits);
  }
}

}  // namespace exa::io::h5
