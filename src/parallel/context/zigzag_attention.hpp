#pragma once
// What both context-parallel attentions (ring_attention.hpp,
// all_to_all_attention.hpp) share: the Cp group's communicator, the zigzag
// placement of this rank's rows (which also places RoPE's positions), the
// kernels' tiles, and the shape of one call.
#include <memory>
#include <utility>
#include <vector>

#include "comm/communicator.hpp"
#include "core/error.hpp"
#include "kernels/attention.hpp"
#include "model/seams/core_attention.hpp"
#include "parallel/context/zigzag.hpp"

namespace exa::parallel::context {

template <class T, class D = Device>
class ZigzagAttention : public model::CoreAttention<T, D> {
 public:
  using typename model::CoreAttention<T, D>::A4;
  using typename model::CoreAttention<T, D>::Lse;

  ZigzagAttention(std::shared_ptr<comm::Communicator> cp_comm, kernels::AttentionTiles tiles)
      : comm_(std::move(cp_comm)), zz_{comm_->size(), comm_->rank()}, tiles_(tiles) {}

  std::vector<model::TokenChunk> token_chunks(index_t rows) const override { return zz_.chunks(rows); }

 protected:
  // One call: B sequences, chunks of c rows (2c local rows), H query and
  // Hkv key/value heads of hd.
  struct Shape {
    index_t B = 0, c = 0, H = 0, Hkv = 0, hd = 0;
    index_t chunk_kv() const { return B * c * Hkv * hd; }  // one chunk of k (or v)
    bool operator==(const Shape& o) const { return B == o.B && c == o.c && H == o.H && Hkv == o.Hkv && hd == o.hd; }
  };
  Shape shape(const A4& q, const A4& k) const {
    Shape s;
    s.B = q.extent(0);
    s.c = zz_.chunk_len(index_t(q.extent(1)) * zz_.cp);
    s.H = q.extent(2);
    s.Hkv = k.extent(2);
    s.hd = q.extent(3);
    EXA_REQUIRE(k.extent(1) == q.extent(1), "context attention: the rank's queries ({} rows) and keys ({} rows) "
                "must be the same zigzag chunks", q.extent(1), k.extent(1));
    return s;
  }

  std::shared_ptr<comm::Communicator> comm_;
  Zigzag zz_;
  kernels::AttentionTiles tiles_;
};

}  // namespace exa::parallel::context
