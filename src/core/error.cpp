#include "core/error.hpp"

namespace exa {

void internal_error(const char* file, int line, const std::string& what) {
  throw InternalError(fmt::format("internal error at {}:{}: {} (this is an ExaMoE bug; please report it)", file,
                          line, what));
}

}  // namespace exa
