#include "model/unit_hooks.hpp"

#include <cstdlib>

#include "core/error.hpp"

namespace exa::model {

UnitHooks& no_unit_hooks() {
  static UnitHooks none;
  return none;
}

int unit_of(const std::string& name, std::int64_t n_layers) {
  if (name == "embed.weight" || name.rfind("embed.lora_", 0) == 0) return 0;  // the table and its adapters
  if (name == "norm.weight" || name == "lm_head.weight") return static_cast<int>(n_layers) + 1;
  const std::string pre = "layers.";
  if (name.compare(0, pre.size(), pre) == 0) {
    char* end = nullptr;
    const long l = std::strtol(name.c_str() + pre.size(), &end, 10);
    if (end != nullptr && *end == '.' && l >= 0 && l < n_layers) return static_cast<int>(l) + 1;
  }
  throw Error("unit_of: '" + name + "' is not a parameter of a " + std::to_string(n_layers) + "-layer model");
}

}  // namespace exa::model
