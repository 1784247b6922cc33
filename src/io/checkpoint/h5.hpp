#pragma once
// Private to examoe_checkpoint: small RAII and error helpers over the HDF5 C
// API. No public header includes this (HDF5 stays a private dependency).
#include <hdf5.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/error.hpp"

namespace exa::io::h5 {

// What every helper here throws: an HDF5 call failed or an object is not
// what a checkpoint holds. Callers that know which file they read turn it
// into a "file is damaged" message.
class Failure : public Error {
 public:
  using Error::Error;
};

// An HDF5 identifier closed with the matching H5?close when it goes out of scope.
class Id {
 public:
  using Closer = herr_t (*)(hid_t);
  Id() = default;
  Id(hid_t id, Closer closer) : id_(id), close_(closer) {}
  Id(Id&& o) noexcept : id_(std::exchange(o.id_, H5I_INVALID_HID)), close_(o.close_) {}
  Id& operator=(Id&& o) noexcept {
    if (this != &o) {
      reset();
      id_ = std::exchange(o.id_, H5I_INVALID_HID);
      close_ = o.close_;
    }
    return *this;
  }
  Id(const Id&) = delete;
  Id& operator=(const Id&) = delete;
  ~Id() { reset(); }
  void reset() {
    if (id_ >= 0 && close_) close_(id_);
    id_ = H5I_INVALID_HID;
  }
  // Closes now and reports failure (H5Fclose: the final flush can fail).
  herr_t close() {
    herr_t rc = 0;
    if (id_ >= 0 && close_) rc = close_(id_);
    id_ = H5I_INVALID_HID;
    return rc;
  }
  hid_t get() const { return id_; }
  operator hid_t() const { return id_; }
  bool valid() const { return id_ >= 0; }

 private:
  hid_t id_ = H5I_INVALID_HID;
  Closer close_ = nullptr;
};

// Silences HDF5's automatic error printing for its lifetime (errors become
// exa::Error messages instead) and restores the previous handler.
class QuietErrors {
 public:
  QuietErrors();
  ~QuietErrors();
  QuietErrors(const QuietErrors&) = delete;
  QuietErrors& operator=(const QuietErrors&) = delete;

 private:
  H5E_auto2_t func_ = nullptr;
  void* data_ = nullptr;
};

// The current HDF5 error stack as one line ("a; b; c"), then cleared.
std::string error_stack();

// Throws h5::Failure "<what>: <HDF5 error stack>" when id < 0 / rc < 0.
hid_t check(hid_t id, const std::string& what);
Id check(hid_t id, Id::Closer close, const std::string& what);

inline Id file(hid_t id, const std::string& what) { return check(id, H5Fclose, what); }
inline Id group(hid_t id, const std::string& what) { return check(id, H5Gclose, what); }
inline Id dataset(hid_t id, const std::string& what) { return check(id, H5Dclose, what); }
inline Id space(hid_t id, const std::string& what) { return check(id, H5Sclose, what); }
inline Id type(hid_t id, const std::string& what) { return check(id, H5Tclose, what); }
inline Id attr(hid_t id, const std::string& what) { return check(id, H5Aclose, what); }
inline Id plist(hid_t id, const std::string& what) { return check(id, H5Pclose, what); }

// Attributes (scalars, 1-D uint64 arrays, UTF-8 strings).
void write_u64(hid_t obj, const char* name, std::uint64_t v);
void write_i64(hid_t obj, const char* name, std::int64_t v);
void write_f64(hid_t obj, const char* name, double v);
void write_u64s(hid_t obj, const char* name, const std::vector<std::uint64_t>& v);
void write_string(hid_t obj, const char* name, const std::string& s);

bool has_attr(hid_t obj, const char* name);
std::uint64_t read_u64(hid_t obj, const char* name);
std::int64_t read_i64(hid_t obj, const char* name);
double read_f64(hid_t obj, const char* name);
std::vector<std::uint64_t> read_u64s(hid_t obj, const char* name);
std::string read_string(hid_t obj, const char* name);
std::vector<std::string> attr_names(hid_t obj);

// Names of the links in a group, in name order.
std::vector<std::string> link_names(hid_t group);
bool link_exists(hid_t loc, const std::string& path);  // each component checked

// Dataset shape (rank >= 0) and whether its type is 32-bit IEEE float.
std::vector<std::int64_t> dataset_shape(hid_t dset);
std::string describe_type(hid_t dset);
bool is_f32(hid_t dset);

}  // namespace exa::io::h5
