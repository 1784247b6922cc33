#pragma once
// What `examoe-ckpt inspect` and `examoe-ckpt verify` print: a checkpoint's
// metadata, layout and tensor table, and the outcome of an offline check.
#include <string>

#include "io/checkpoint/checkpoint.hpp"

namespace exa::io {

// Metadata (step, tokens, data cursor, RNG and LR schedule state, writer,
// checksum roots), the layout that wrote it and one line per dataset
// (path, shape, elements, MiB, checksum, chunks). `with_deck` appends the
// stored deck text.
std::string format_checkpoint_info(const CheckpointInfo& info, bool with_deck);

// "OK: <file>: N datasets, M chunks verified" or one line per mismatching
// chunk naming the file, dataset, chunk, elements and both checksums.
std::string format_verify_result(const VerifyResult& r);

}  // namespace exa::io
