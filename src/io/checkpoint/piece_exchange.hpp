#pragma once
// Moving a model's state between two layouts of it inside a running job,
// over MPI: no file (docs/architecture.md "Expert growth"). Each rank
// holds a piece of every tensor in the old layout and wants its piece in
// the new one (model/shard.hpp: a box and a range of the box's row-major
// order); the tensors may also change shape along dimension 0, whose new
// rows are given as old rows (or left as the new piece holds them). Every
// element goes once from the lowest rank holding it (PieceCover) to every
// rank that wants it, in one all-to-all-v over the communicator, for all
// buffers of a piece at once (master values and the AdamW moments).
//
// Memory: the pieces, and one send and one receive buffer of what changes
// hands; no tensor is ever gathered whole.
#include <mpi.h>

#include <cstdint>
#include <string>
#include <vector>

#include "io/checkpoint/piece_cover.hpp"

namespace exa::io {

// One tensor, the same list in the same order on every rank.
struct ExchangeTensor {
  std::string name;
  std::vector<std::int64_t> from_shape, to_shape;
  // to row i (dimension 0) holds from row rows[i]; -1: the row is left as
  // the new piece holds it. Empty: the same tensor (from_shape == to_shape).
  std::vector<std::int64_t> rows;
};

// This rank's piece of one tensor in one layout: empty range when it holds
// none. values[b] points at buffer b's values (host memory, the piece's
// range order); every piece has the same number of buffers.
struct ExchangePiece {
  Piece piece;
  std::vector<float*> values;
};

struct ExchangeReport {
  std::int64_t sent = 0, received = 0;  // elements per buffer, this rank, to and from other ranks
};

// Collective over comm. `from[t]` and `to[t]` are this rank's pieces of
// tensors[t]. exa::Error (the same on every rank) when a to-element has no
// source: a row mapped to an old row that no rank holds.
ExchangeReport exchange_pieces(const std::vector<ExchangeTensor>& tensors, const std::vector<ExchangePiece>& from,
                               const std::vector<ExchangePiece>& to, MPI_Comm comm);

}  // namespace exa::io
