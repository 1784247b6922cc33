#include "parallel/expert/expert_mover.hpp"

#include <algorithm>
#include <climits>
#include <string>

#include "core/error.hpp"

namespace exa::parallel::expert {

namespace {

struct Run {
  std::int64_t lo = 0, hi = 0;  // [lo, hi) of the box's row-major elements
};

struct Peer {
  int ep_rank = 0, expert_data = 0;
  std::vector<Run> runs;  // per expert tensor of the layer
};

// One piece of one expert's rows: box elements [src, src+len) of rank
// `from` become [dst, dst+len) of rank `to`.
struct Piece {
  int from = 0, to = 0;
  std::size_t tensor = 0;
  std::int64_t src = 0, dst = 0, len = 0;
};

std::vector<std::size_t> layer_tensors(const model::ParameterStore& store, std::int64_t layer) {
  const std::string prefix = "layers." + std::to_string(layer) + ".";
  std::vector<std::size_t> t;
  for (std::size_t i = 0; i < store.size(); ++i) {
    const auto& s = store.spec(i);
    if (s.ep_dim < 0 || s.name.rfind(prefix, 0) != 0) continue;
    EXA_REQUIRE(s.ep_dim == 0, "move_experts: {} splits experts on dimension {}, the mover expects 0", s.name,
                s.ep_dim);
    t.push_back(i);
  }
  return t;
}

std::vector<Peer> gather_peers(const model::ParameterStore& store, const std::vector<std::size_t>& tensors,
                               const MoverRank& where) {
  std::vector<std::int64_t> mine{where.ep_rank, where.expert_data};
  for (const auto i : tensors) {
    mine.push_back(store.shard(i).offset);
    mine.push_back(store.shard(i).offset + store.shard(i).count);
  }
  int n = 0;
  MPI_Comm_size(where.data, &n);
  std::vector<std::int64_t> all(mine.size() * std::size_t(n));
  MPI_Allgather(mine.data(), int(mine.size()), MPI_INT64_T, all.data(), int(mine.size()), MPI_INT64_T, where.data);
  std::vector<Peer> peers(static_cast<std::size_t>(n));
  for (int q = 0; q < n; ++q) {
    const std::int64_t* p = all.data() + std::size_t(q) * mine.size();
    peers[std::size_t(q)].ep_rank = int(p[0]);
    peers[std::size_t(q)].expert_data = int(p[1]);
    for (std::size_t t = 0; t < tensors.size(); ++t) peers[std::size_t(q)].runs.push_back({p[2 + 2 * t], p[3 + 2 * t]});
  }
  return peers;
}

// Every piece of the move, in an order every rank computes alike.
std::vector<Piece> plan_pieces(const model::ParameterStore& store, const std::vector<std::size_t>& tensors,
                               const std::vector<Peer>& peers, const ExpertMove& move, int slots) {
  const int E = int(move.from.size());
  std::vector<int> new_slot(std::size_t(E), 0);
  for (int p = 0; p < E; ++p) new_slot[std::size_t(move.to[std::size_t(p)])] = p;
  std::vector<Piece> pieces;
  for (int p_old = 0; p_old < E; ++p_old) {
    const int e = move.from[std::size_t(p_old)], p_new = new_slot[std::size_t(e)];
    if (p_new == p_old) continue;
    const int j_old = p_old / slots, j_new = p_new / slots;
    for (std::size_t t = 0; t < tensors.size(); ++t) {
      const std::int64_t R = store.shard(tensors[t]).box.numel() / slots;  // elements per expert in the box
      const std::int64_t shift = std::int64_t(p_old % slots - p_new % slots) * R;
      for (int to = 0; to < int(peers.size()); ++to) {
        const Peer& dst = peers[std::size_t(to)];
        if (dst.ep_rank != j_new) continue;
        const Run want{std::max(dst.runs[t].lo, (p_new % slots) * R), std::min(dst.runs[t].hi, (p_new % slots + 1) * R)};
        if (want.lo >= want.hi) continue;
        // Sources: the counterpart first (same expert-data index), then the
        // other holders of the old slot in rank order; each covers what it
        // owns of what is still missing.
        std::vector<int> from;
        for (int q = 0; q < int(peers.size()); ++q)
          if (peers[std::size_t(q)].ep_rank == j_old && peers[std::size_t(q)].expert_data == dst.expert_data)
            from.push_back(q);
        for (int q = 0; q < int(peers.size()); ++q)
          if (peers[std::size_t(q)].ep_rank == j_old && peers[std::size_t(q)].expert_data != dst.expert_data)
            from.push_back(q);
        std::vector<Run> missing{{want.lo + shift, want.hi + shift}};  // in the old slot's elements
        for (const int q : from) {
          std::vector<Run> still;
          const Run own = peers[std::size_t(q)].runs[t];
          for (const Run& m : missing) {
            const Run got{std::max(m.lo, own.lo), std::min(m.hi, own.hi)};
            if (got.lo >= got.hi) {
              still.push_back(m);
              continue;
            }
            pieces.push_back({q, to, t, got.lo, got.lo - shift, got.hi - got.lo});
            if (m.lo < got.lo) still.push_back({m.lo, got.lo});
            if (got.hi < m.hi) still.push_back({got.hi, m.hi});
          }
          missing = std::move(still);
        }
        EXA_REQUIRE(missing.empty(), "move_experts: layer {} expert {}: no rank holds part of its {}", move.layer, e,
                    store.spec(tensors[t]).name);
      }
    }
  }
  return pieces;
}

}  // namespace

std::int64_t move_experts(const model::ParameterStore& store, const std::vector<View1<float>>& buffers,
                          const MoverRank& where, const ExpertMove& move) {
  const auto tensors = layer_tensors(store, move.layer);
  EXA_REQUIRE(!tensors.empty(), "move_experts: layer {} has no expert tensors", move.layer);
  // A layer of another pipeline stage: no rank of this data group holds it.
  if (store.shard(tensors[0]).box.numel() == 0) return 0;
  const int E = int(store.spec(tensors[0]).shape[0]);
  EXA_REQUIRE(int(move.from.size()) == E && int(move.to.size()) == E,
              "move_experts: layer {} has {} experts, the placements name {} and {}", move.layer, E, move.from.size(),
              move.to.size());
  const int slots = int(store.shard(tensors[0]).box.extent[0]);
  const auto peers = gather_peers(store, tensors, where);
  const auto pieces = plan_pieces(store, tensors, peers, move, slots);
  int me = 0, n = 0;
  MPI_Comm_rank(where.data, &me);
  MPI_Comm_size(where.data, &n);

  std::vector<int> scount(std::size_t(n), 0), rcount(std::size_t(n), 0), sdispl(std::size_t(n), 0),
      rdispl(std::size_t(n), 0);
  std::int64_t sent = 0, received = 0;
  for (const Piece& p : pieces) {
    if (p.from == me) scount[std::size_t(p.to)] += int(p.len), sent += p.len;
    if (p.to == me) rcount[std::size_t(p.from)] += int(p.len), received += p.len;
  }
  EXA_REQUIRE(sent < INT_MAX && received < INT_MAX, "move_experts: layer {} moves {} elements, over int32 counts",
              move.layer, std::max(sent, received));
  for (int q = 1; q < n; ++q) {
    sdispl[std::size_t(q)] = sdispl[std::size_t(q - 1)] + scount[std::size_t(q - 1)];
    rdispl[std::size_t(q)] = rdispl[std::size_t(q - 1)] + rcount[std::size_t(q - 1)];
  }
  // Pieces go into each peer's message in plan order on both sides.
  const auto local = [&](const Piece& p, std::int64_t box_elem) {
    return store.local_offset(tensors[p.tensor]) + box_elem - store.shard(tensors[p.tensor]).offset;
  };
  std::vector<float> sbuf(std::size_t(std::max<std::int64_t>(sent, 1))),
      rbuf(std::size_t(std::max<std::int64_t>(received, 1)));
  for (const auto& buffer : buffers) {
    auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), buffer);
    std::vector<int> sat = sdispl, rat = rdispl;
    for (const Piece& p : pieces) {
      if (p.from != me) continue;
      std::copy_n(h.data() + local(p, p.src), p.len, sbuf.data() + sat[std::size_t(p.to)]);
      sat[std::size_t(p.to)] += int(p.len);
    }
    MPI_Alltoallv(sbuf.data(), scount.data(), sdispl.data(), MPI_FLOAT, rbuf.data(), rcount.data(), rdispl.data(),
                  MPI_FLOAT, where.data);
    for (const Piece& p : pieces) {
      if (p.to != me) continue;
      std::copy_n(rbuf.data() + rat[std::size_t(p.from)], p.len, h.data() + local(p, p.dst));
      rat[std::size_t(p.from)] += int(p.len);
    }
    Kokkos::deep_copy(buffer, h);
  }
  return sent;
}

}  // namespace exa::parallel::expert
