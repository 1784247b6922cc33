#include "parallel/expert/expert_mover.hpp"

#include <algorithm>
#include <climits>
#include <cstring>
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

// Sends every piece this rank holds and places every piece it receives:
// `host(t)` is a host copy of tensor t's buffer, `at(t, box_elem)` where a
// box element sits in it. One all-to-all-v over the data group.
template <class Host, class At>
std::int64_t exchange(const std::vector<Piece>& pieces, MPI_Comm comm, std::int64_t layer, Host host, At at) {
  int me = 0, n = 0;
  MPI_Comm_rank(comm, &me);
  MPI_Comm_size(comm, &n);
  std::vector<int> scount(std::size_t(n), 0), rcount(std::size_t(n), 0), sdispl(std::size_t(n), 0),
      rdispl(std::size_t(n), 0);
  std::int64_t sent = 0, received = 0;
  for (const Piece& p : pieces) {
    if (p.from == me) scount[std::size_t(p.to)] += int(p.len), sent += p.len;
    if (p.to == me) rcount[std::size_t(p.from)] += int(p.len), received += p.len;
  }
  EXA_REQUIRE(sent < INT_MAX && received < INT_MAX, "move_experts: layer {} moves {} elements, over int32 counts",
              layer, std::max(sent, received));
  for (int q = 1; q < n; ++q) {
    sdispl[std::size_t(q)] = sdispl[std::size_t(q - 1)] + scount[std::size_t(q - 1)];
    rdispl[std::size_t(q)] = rdispl[std::size_t(q - 1)] + rcount[std::size_t(q - 1)];
  }
  // Pieces go into each peer's message in plan order on both sides.
  std::vector<float> sbuf(std::size_t(std::max<std::int64_t>(sent, 1))),
      rbuf(std::size_t(std::max<std::int64_t>(received, 1)));
  std::vector<int> sat = sdispl, rat = rdispl;
  for (const Piece& p : pieces) {
    if (p.from != me) continue;
    std::copy_n(host(p.tensor) + at(p.tensor, p.src), p.len, sbuf.data() + sat[std::size_t(p.to)]);
    sat[std::size_t(p.to)] += int(p.len);
  }
  MPI_Alltoallv(sbuf.data(), scount.data(), sdispl.data(), MPI_FLOAT, rbuf.data(), rcount.data(), rdispl.data(),
                MPI_FLOAT, comm);
  for (const Piece& p : pieces) {
    if (p.to != me) continue;
    std::copy_n(rbuf.data() + rat[std::size_t(p.from)], p.len, host(p.tensor) + at(p.tensor, p.dst));
    rat[std::size_t(p.from)] += int(p.len);
  }
  return sent;
}

// The layer's expert tensors, or none when another pipeline stage holds
// the layer; checks the placements' size.
std::vector<std::size_t> layer_to_move(const model::ParameterStore& store, const ExpertMove& move) {
  const auto tensors = layer_tensors(store, move.layer);
  EXA_REQUIRE(!tensors.empty(), "move_experts: layer {} has no expert tensors", move.layer);
  if (store.shard(tensors[0]).box.numel() == 0) return {};
  const int E = int(store.spec(tensors[0]).shape[0]);
  EXA_REQUIRE(int(move.from.size()) == E && int(move.to.size()) == E,
              "move_experts: layer {} has {} experts, the placements name {} and {}", move.layer, E, move.from.size(),
              move.to.size());
  return tensors;
}

}  // namespace

std::int64_t move_experts(const model::ParameterStore& store, const std::vector<View1<float>>& buffers,
                          const MoverRank& where, const ExpertMove& move, const std::vector<bool>& trainable_only) {
  const auto all = layer_to_move(store, move);
  if (all.empty()) return 0;
  EXA_REQUIRE(trainable_only.empty() || trainable_only.size() == buffers.size(),
              "move_experts: {} trainable-only flags for {} buffers", trainable_only.size(), buffers.size());
  // The layer's trainable expert tensors (LoRA: the adapters, not the
  // frozen experts under them), for the buffers that hold only those.
  std::vector<std::size_t> trainable;
  for (const auto i : all)
    if (store.spec(i).trainable) trainable.push_back(i);
  const int slots = int(store.shard(all[0]).box.extent[0]);
  // Each set's pieces once, on every rank in the same order (collective).
  const auto pieces_all = plan_pieces(store, all, gather_peers(store, all, where), move, slots);
  std::vector<Piece> pieces_trainable;
  const bool any_trainable_only =
      std::find(trainable_only.begin(), trainable_only.end(), true) != trainable_only.end();
  if (any_trainable_only && !trainable.empty() && trainable.size() < all.size())
    pieces_trainable = plan_pieces(store, trainable, gather_peers(store, trainable, where), move, slots);
  std::int64_t sent = 0;
  for (std::size_t b = 0; b < buffers.size(); ++b) {
    const bool only = !trainable_only.empty() && trainable_only[b];
    if (only && trainable.empty()) continue;
    const auto& tensors = only && trainable.size() < all.size() ? trainable : all;
    const auto& pieces = only && trainable.size() < all.size() ? pieces_trainable : pieces_all;
    auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), buffers[b]);
    sent = exchange(
        pieces, where.data, move.layer, [&](std::size_t) { return h.data(); },
        [&](std::size_t t, std::int64_t box_elem) {
          return store.local_offset(tensors[t]) + box_elem - store.shard(tensors[t]).offset;
        });
    Kokkos::deep_copy(buffers[b], h);
  }
  return sent;
}

std::int64_t move_expert_boxes(const model::ParameterStore& store, const std::vector<View1<float>>& boxes,
                               const MoverRank& where, const ExpertMove& move) {
  const auto all = layer_to_move(store, move);
  if (all.empty()) return 0;
  EXA_REQUIRE(boxes.size() == store.size(), "move_expert_boxes: {} buffers for {} tensors", boxes.size(),
              store.size());
  // The layer's trainable expert tensors hold the state (a frozen one, as
  // LoRA's experts, has no residual). Checked before any collective: a
  // rank that stopped here would leave the others waiting in one.
  std::vector<std::size_t> tensors;
  std::size_t trainable = 0;
  for (const auto i : all) {
    trainable += store.spec(i).trainable ? 1 : 0;
    if (boxes[i].extent(0) > 0) tensors.push_back(i);
  }
  if (tensors.empty()) return 0;
  for (const auto i : tensors)
    EXA_REQUIRE(store.spec(i).trainable, "move_expert_boxes: the frozen {} has a buffer", store.spec(i).name);
  EXA_REQUIRE(tensors.size() == trainable,
              "move_expert_boxes: layer {}: {} of its {} trainable expert tensors have buffers", move.layer,
              tensors.size(), trainable);
  // Every rank holds its whole box: the counterpart of the new slot's rank
  // (same expert-data index) covers every piece.
  int n = 0;
  MPI_Comm_size(where.data, &n);
  std::vector<int> mine{where.ep_rank, where.expert_data}, ranks(2 * std::size_t(n));
  MPI_Allgather(mine.data(), 2, MPI_INT, ranks.data(), 2, MPI_INT, where.data);
  std::vector<Peer> peers(static_cast<std::size_t>(n));
  for (int q = 0; q < n; ++q) {
    peers[std::size_t(q)].ep_rank = ranks[2 * std::size_t(q)];
    peers[std::size_t(q)].expert_data = ranks[2 * std::size_t(q) + 1];
    for (const auto i : tensors) peers[std::size_t(q)].runs.push_back({0, store.shard(i).box.numel()});
  }
  const int slots = int(store.shard(tensors[0]).box.extent[0]);
  const auto pieces = plan_pieces(store, tensors, peers, move, slots);
  std::vector<Kokkos::View<float*, Kokkos::HostSpace>> h;
  for (const auto i : tensors) {
    EXA_REQUIRE(boxes[i].extent(0) == 0 || std::int64_t(boxes[i].extent(0)) == store.shard(i).box.numel(),
                "move_expert_boxes: {} has {} elements, its box {}", store.spec(i).name, boxes[i].extent(0),
                store.shard(i).box.numel());
    h.push_back(Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), boxes[i]));
  }
  const std::int64_t sent = exchange(
      pieces, where.data, move.layer, [&](std::size_t t) { return h[t].data(); },
      [](std::size_t, std::int64_t box_elem) { return box_elem; });
  for (std::size_t t = 0; t < tensors.size(); ++t) Kokkos::deep_copy(boxes[tensors[t]], h[t]);
  return sent;
}

std::vector<std::uint64_t> expert_box_checksums(const model::ParameterStore& store,
                                                const std::vector<View1<float>>& boxes, const MoverRank& where,
                                                std::int64_t layer, const std::vector<int>& expert_at) {
  std::vector<std::uint64_t> sums(expert_at.size(), 0);
  const auto tensors = layer_tensors(store, layer);
  if (!tensors.empty() && store.shard(tensors[0]).box.numel() > 0) {
    const int slots = int(store.shard(tensors[0]).box.extent[0]);
    for (const auto i : tensors) {
      if (boxes[i].extent(0) == 0) continue;
      auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), boxes[i]);
      const std::int64_t R = store.shard(i).box.numel() / slots;
      for (int k = 0; k < slots; ++k) {
        std::uint64_t sum = 0;
        for (std::int64_t x = std::int64_t(k) * R; x < std::int64_t(k + 1) * R; ++x) {
          std::uint32_t bits = 0;
          std::memcpy(&bits, h.data() + x, sizeof bits);
          sum += bits;
        }
        sums[std::size_t(expert_at[std::size_t(where.ep_rank * slots + k)])] += sum;
      }
    }
  }
  MPI_Allreduce(MPI_IN_PLACE, sums.data(), int(sums.size()), MPI_UINT64_T, MPI_SUM, where.data);
  return sums;
}

}  // namespace exa::parallel::expert
