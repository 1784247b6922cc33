#pragma once
// A fresh directory under the system's temporary directory for a
// benchmark's files (the caller removes it): <tmp>/<prefix>-XXXXXX, or ""
// when it cannot be made.
#include <stdlib.h>

#include <filesystem>
#include <string>

namespace exa::bench {

inline std::string make_temp_dir(const std::string& prefix) {
  std::string tmpl = (std::filesystem::temp_directory_path() / (prefix + "-XXXXXX")).string();
  return mkdtemp(tmpl.data()) != nullptr ? tmpl : std::string();
}

}  // namespace exa::bench
