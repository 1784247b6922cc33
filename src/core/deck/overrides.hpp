#pragma once
// `--set section.key=value` overrides from the command line.
#include <string>

#include "core/deck/schema.hpp"
#include "core/deck/value.hpp"

namespace exa::deck {

struct Override {
  std::string raw;  // as given: "train.steps=100"
  const KeySpec* spec = nullptr;
  Value value;  // of spec->type; range not yet checked
};

// Splits and type-checks one override. Throws exa::Error
// "--set <raw>: <problem>; <fix>" when it is malformed, names no schema key
// or its value does not parse as the key's type. The value is read by the
// key's type, so strings need no quotes (--set optim.schedule=linear); a
// value wrapped in double quotes has them removed.
Override parse_override(const std::string& raw);

}  // namespace exa::deck
