#pragma once
// A whole file mapped read-only into memory. Token files can be far larger
// than the part a step touches, so they are mapped, not read: the OS pages in
// only the windows the sampler asks for, and ranks on one node share pages.
#include <cstddef>
#include <memory>
#include <string>

namespace exa::io {

class MappedFile {
 public:
  // Maps `path`. Throws exa::Error naming the file when it cannot be opened
  // ("<path>: cannot open: <reason>; <fix>") or is empty ("<path>: <empty>").
  // `fix` and `empty` are the caller's advice: what the file should have been.
  static MappedFile open(const std::string& path, const std::string& fix, const std::string& empty);

  const unsigned char* data() const { return data_.get(); }
  std::size_t size() const { return size_; }
  const std::string& path() const { return path_; }
  // Keeps the mapping alive for as long as any copy of the returned pointer.
  std::shared_ptr<const unsigned char> keepalive() const { return data_; }

 private:
  std::shared_ptr<const unsigned char> data_;
  std::size_t size_ = 0;
  std::string path_;
};

}  // namespace exa::io
