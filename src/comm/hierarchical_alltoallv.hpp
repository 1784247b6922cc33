#pragma once
// Hierarchical all-to-all-v (Tutel's "2DH" all-to-all) for the expert
// dispatch of expert parallelism: same result as MPI_Alltoallv over the flat
// group, in two exchanges so that each rank sends one aggregated message per
// remote node instead of one per remote rank.
//
//   auto hc = exa::comm::make_hierarchical(grid, Group::Ep);
//   exa::comm::hierarchical_alltoallv(hc, send, sc, sd, recv, rc, rd);   // == flat alltoallv over Ep
//
// Ranks: rank (node n, local index l) has hierarchical index h = n * L + l,
// with n = inter.rank(), l = local.rank(), L = local.size(). The
// (local, inter) forms index counts and displacements by h; the
// HierarchicalComms forms by the rank in the group the pair was made from
// (hc.flat_rank maps the two; for ProcessGrid's groups over pretend nodes
// they are equal, and make_hierarchical checks it).
//
// Algorithm (L ranks per node, N nodes; with L == 1 or N == 1 it is one
// plain all-to-all-v on the other communicator):
//  0. node-local allgather of the send counts (P = L*N ints per rank, so
//     every rank knows the counts of its node; one small node-local
//     collective, no inter-node count traffic: the receive side of the
//     inter-node exchange is the caller's own recv_counts);
//  1. node-local all-to-all-v: rank (n, l) hands local rank j all its rows
//     bound for local index j on any node, i.e. for ranks (m, j), m < N;
//  2. inter-node all-to-all-v within local index j: (n, j) sends (m, j) the
//     rows of all of node n's ranks bound for (m, j), one message per node
//     pair and local index. Every local rank carries its share (not one
//     leader per node) so that all ranks' links work at once and no rank
//     holds a whole node's traffic; the share is the destination's local
//     index, so the rows arrive at their destination and the node-local
//     scatter of a leader scheme is not needed.
// Local copies pack the rows before stages 1 and 2 and unpack them after
// stage 2 (skipped when each source node's chunks are consecutive in recv,
// e.g. displacements that are prefix sums of the counts).
//
// The stages are queued like the other hierarchical collectives (see
// "Progress and ordering" in comm/hierarchical.hpp): nonblocking, later
// stages posted from test() / wait(). Every rank must call it, including
// ranks that send and receive nothing. As with MPI, the counts of a pair
// must agree (what p sends q is what q expects from p).
//
// Throws exa::Error when the four arrays do not have one entry per rank, an
// entry is negative, a View form's counts reach past its View, or the nodes
// of `hc` are not aligned (HierarchicalComms::nodes_aligned).
#include <Kokkos_Core.hpp>
#include <cstddef>
#include <type_traits>
#include <vector>

#include "comm/communicator.hpp"
#include "comm/hierarchical.hpp"

namespace exa::comm {

// Raw forms: buffers in the communicators' memory; counts and displacements
// in elements. recv must not overlap send.
Request ihierarchical_alltoallv(Communicator& local, Communicator& inter, const void* send,
                                const std::vector<int>& send_counts, const std::vector<int>& send_displs, void* recv,
                                const std::vector<int>& recv_counts, const std::vector<int>& recv_displs, DType t);
Request ihierarchical_alltoallv(HierarchicalComms& hc, const void* send, const std::vector<int>& send_counts,
                                const std::vector<int>& send_displs, void* recv, const std::vector<int>& recv_counts,
                                const std::vector<int>& recv_displs, DType t);
inline void hierarchical_alltoallv(Communicator& local, Communicator& inter, const void* send,
                                   const std::vector<int>& sc, const std::vector<int>& sd, void* recv,
                                   const std::vector<int>& rc, const std::vector<int>& rd, DType t) {
  ihierarchical_alltoallv(local, inter, send, sc, sd, recv, rc, rd, t).wait();
}
inline void hierarchical_alltoallv(HierarchicalComms& hc, const void* send, const std::vector<int>& sc,
                                   const std::vector<int>& sd, void* recv, const std::vector<int>& rc,
                                   const std::vector<int>& rd, DType t) {
  ihierarchical_alltoallv(hc, send, sc, sd, recv, rc, rd, t).wait();
}

namespace detail {
// exa::Error unless every displs[p] + counts[p] fits in `extent` elements.
void require_alltoallv_extents(const std::vector<int>& send_counts, const std::vector<int>& send_displs,
                               std::size_t send_extent, const std::vector<int>& recv_counts,
                               const std::vector<int>& recv_displs, std::size_t recv_extent);

// Stages the Views in `c`'s memory and runs `raw(send_ptr, recv_ptr)`.
template <class S, class... P, class T, class... Q, class Raw>
Request staged_alltoallv(const Communicator& c, const Kokkos::View<S*, P...>& send, const std::vector<int>& sc,
                         const std::vector<int>& sd, const Kokkos::View<T*, Q...>& recv, const std::vector<int>& rc,
                         const std::vector<int>& rd, Raw&& raw) {
  static_assert(std::is_same_v<std::remove_const_t<S>, T>,
                "hierarchical_alltoallv: send and recv must hold the same type and recv must be writable");
  require_alltoallv_extents(sc, sd, send.extent(0), rc, rd, recv.extent(0));
  auto a = stage(c, send, true, false);
  // recv is copied in too: the elements no count covers must come back as
  // they were, as with MPI.
  auto b = stage(c, recv, true, true);
  Request r = raw(static_cast<const void*>(a.ptr), static_cast<void*>(b.ptr));
  r = finish(std::move(r), a);
  return finish(std::move(r), b);
}
}  // namespace detail

// View forms: Views outside the backend's memory are staged, and recv is
// copied back on completion.
template <class S, class... P, class T, class... Q>
Request ihierarchical_alltoallv(Communicator& local, Communicator& inter, const Kokkos::View<S*, P...>& send,
                                const std::vector<int>& sc, const std::vector<int>& sd,
                                const Kokkos::View<T*, Q...>& recv, const std::vector<int>& rc,
                                const std::vector<int>& rd) {
  return detail::staged_alltoallv(local, send, sc, sd, recv, rc, rd, [&](const void* s, void* r) {
    return ihierarchical_alltoallv(local, inter, s, sc, sd, r, rc, rd, dtype_of<T>());
  });
}
template <class S, class... P, class T, class... Q>
Request ihierarchical_alltoallv(HierarchicalComms& hc, const Kokkos::View<S*, P...>& send, const std::vector<int>& sc,
                                const std::vector<int>& sd, const Kokkos::View<T*, Q...>& recv,
                                const std::vector<int>& rc, const std::vector<int>& rd) {
  return detail::staged_alltoallv(*hc.local, send, sc, sd, recv, rc, rd, [&](const void* s, void* r) {
    return ihierarchical_alltoallv(hc, s, sc, sd, r, rc, rd, dtype_of<T>());
  });
}
template <class S, class... P, class T, class... Q>
void hierarchical_alltoallv(Communicator& local, Communicator& inter, const Kokkos::View<S*, P...>& send,
                            const std::vector<int>& sc, const std::vector<int>& sd, const Kokkos::View<T*, Q...>& recv,
                            const std::vector<int>& rc, const std::vector<int>& rd) {
  ihierarchical_alltoallv(local, inter, send, sc, sd, recv, rc, rd).wait();
}
template <class S, class... P, class T, class... Q>
void hierarchical_alltoallv(HierarchicalComms& hc, const Kokkos::View<S*, P...>& send, const std::vector<int>& sc,
                            const std::vector<int>& sd, const Kokkos::View<T*, Q...>& recv, const std::vector<int>& rc,
                            const std::vector<int>& rd) {
  ihierarchical_alltoallv(hc, send, sc, sd, recv, rc, rd).wait();
}

}  // namespace exa::comm
