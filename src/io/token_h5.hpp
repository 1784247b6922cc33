#pragma once
// HDF5 token datasets: data tokenised elsewhere (e.g. by a Python pipeline
// with h5py), stored as a 1-D integer dataset of any integer type.
//
// Every rank reads the whole dataset serially (default file access, no
// MPI-IO): token sets for this code's scale fit in memory, and a serial read
// needs no collective agreement between ranks. Tokens are kept 2 bytes wide
// when the vocabulary allows, else 4.
#include <cstdint>
#include <string>

#include "io/token_store.hpp"

namespace exa::io {

inline constexpr const char* kDefaultH5Dataset = "tokens";

// Reads dataset `dataset` of HDF5 file `path`. The vocabulary size is the
// dataset's integer attribute "vocab_size" when it has one, else `vocab`.
// exa::Error naming the file and the fix for: missing or empty file, not
// HDF5, no such dataset, not 1-D, not integers, empty, token < 0 or >= V.
TokenStore read_h5_tokens(const std::string& path, const std::string& dataset, std::int64_t vocab);

}  // namespace exa::io
