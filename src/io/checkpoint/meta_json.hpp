#pragma once
// A checkpoint's metadata (step, data cursor, schedule, deck, layout, /state
// arrays) as one JSON text: the HDF5 file guards it with a checksum
// (checkpoint_meta.cpp), a tier-0 memory snapshot stores it whole
// (memory_snapshot.hpp). Doubles and floats round-trip exactly.
#include <string>

#include "io/checkpoint/checkpoint.hpp"

namespace exa::io {

std::string meta_to_json(const CheckpointMeta& m);
// exa::Error or nlohmann's exception when `s` is not such a text.
CheckpointMeta meta_from_json(const std::string& s);

}  // namespace exa::io
