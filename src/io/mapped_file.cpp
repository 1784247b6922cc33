#include "io/mapped_file.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.hpp"

namespace exa::io {

MappedFile MappedFile::open(const std::string& path, const std::string& fix, const std::string& empty) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  EXA_REQUIRE(fd >= 0, "{}: cannot open: {}; {}", path, std::strerror(errno), fix);
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw Error(fmt::format("{}: not a regular file; {}", path, fix));
  }
  if (st.st_size == 0) {
    ::close(fd);
    throw Error(fmt::format("{}: {}", path, empty));
  }
  const auto size = static_cast<std::size_t>(st.st_size);
  void* p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  const int err = errno;
  ::close(fd);  // the mapping outlives the descriptor
  EXA_REQUIRE(p != MAP_FAILED, "{}: cannot map {} bytes: {}", path, size, std::strerror(err));
  MappedFile f;
  f.data_ = std::shared_ptr<const unsigned char>(static_cast<const unsigned char*>(p), [size](const unsigned char* q) {
    ::munmap(const_cast<unsigned char*>(q), size);
  });
  f.size_ = size;
  f.path_ = path;
  return f;
}

}  // namespace exa::io
