#include "comm/hierarchical_alltoallv.hpp"

#include <climits>
#include <cstdint>
#include <memory>
#include <utility>

#include "comm/hierarchical_stages.hpp"
#include "core/error.hpp"

namespace exa::comm {

using namespace hier;

namespace {

using Ints = std::vector<int>;

void require_counts(std::size_t ranks, const Ints& sc, const Ints& sd, const Ints& rc, const Ints& rd) {
  require_alltoallv_layout(ranks, sc, sd, rc, rd);
  const std::pair<const char*, const Ints*> arrays[] = {
      {"send_counts", &sc}, {"send_displs", &sd}, {"recv_counts", &rc}, {"recv_displs", &rd}};
  for (const auto& [name, v] : arrays) {
    for (std::size_t p = 0; p < v->size(); ++p) {
      EXA_REQUIRE((*v)[p] >= 0,
                  "hierarchical_alltoallv: {}[{}] = {} is negative; counts and displacements are element counts "
                  "and offsets >= 0",
                  name, p, (*v)[p]);
    }
  }
}

// Exclusive prefix sums of `counts` as MPI displacements.
Ints displs_of(const Ints& counts, const char* what) {
  Ints d(counts.size());
  std::int64_t total = 0;
  for (std::size_t i = 0; i < counts.size(); ++i) {
    d[i] = static_cast<int>(total);
    total += counts[i];
  }
  EXA_REQUIRE(total <= INT_MAX,
              "hierarchical_alltoallv: the {} buffer would hold {} elements, past MPI's int limit {}; exchange "
              "fewer rows at once",
              what, total, INT_MAX);
  return d;
}

std::size_t end_of(const Ints& counts, const Ints& displs) {
  return counts.empty() ? 0 : static_cast<std::size_t>(displs.back()) + static_cast<std::size_t>(counts.back());
}

// What stays alive between the stages of one operation.
struct ExchangeState {
  Bytes a_hold, b_hold, c_hold, d_hold, count_hold;
  char *a = nullptr, *b = nullptr, *c = nullptr, *d = nullptr, *counts = nullptr;
  Ints a_cnt, a_dsp;  // stage 1 send, per local rank: [dest local][dest node]
  Ints rows;          // rows[l * N + m]: what local rank l sends (node m, our local index)
  Ints b_dsp, c_cnt;  // stage 1 receive (per source local rank), stage 2 send (per node)
  Ints d_cnt, d_dsp;  // stage 2 receive, per source node
};

}  // namespace

namespace detail {

void require_alltoallv_extents(const Ints& sc, const Ints& sd, std::size_t send_extent, const Ints& rc,
                               const Ints& rd, std::size_t recv_extent) {
  require_alltoallv_layout(sc.size(), sc, sd, rc, rd);
  const auto check = [](const Ints& c, const Ints& d, std::size_t extent, const char* side) {
    for (std::size_t p = 0; p < c.size(); ++p) {
      const std::int64_t end = std::int64_t(d[p]) + c[p];
      EXA_REQUIRE(c[p] >= 0 && d[p] >= 0 && end <= static_cast<std::int64_t>(extent),
                  "hierarchical_alltoallv: {0}_displs[{1}] + {0}_counts[{1}] = {2} + {3} does not fit the {0} "
                  "View's {4} elements",
                  side, p, d[p], c[p], extent);
    }
  };
  check(sc, sd, send_extent, "send");
  check(rc, rd, recv_extent, "recv");
}

}  // namespace detail

Request ihierarchical_alltoallv(Communicator& local, Communicator& inter, const void* send, const Ints& sc,
                                const Ints& sd, void* recv, const Ints& rc, const Ints& rd, DType t) {
  require_same_memory(local, inter, "hierarchical_alltoallv");
  const int L = local.size(), N = inter.size(), P = L * N;
  require_counts(static_cast<std::size_t>(P), sc, sd, rc, rd);
  Communicator* lp = &local;
  Communicator* ip = &inter;
  if (L == 1 || N == 1) {
    // The hierarchical index is then the rank on the other communicator.
    Communicator* cp = N == 1 ? lp : ip;
    return sequenced({{cp, [=]() { return cp->ialltoallv(send, sc, sd, recv, rc, rd, t); }}});
  }
  const std::size_t es = dtype_size(t);
  const int j = local.rank();
  const auto h = [L](int node, int loc) { return static_cast<std::size_t>(node * L + loc); };
  auto st = std::make_shared<ExchangeState>();

  // Pack the rows for stage 1 now (send is ready at the call).
  st->a_cnt.assign(static_cast<std::size_t>(L), 0);
  for (int k = 0; k < L; ++k) {
    for (int m = 0; m < N; ++m) st->a_cnt[k] += sc[h(m, k)];
  }
  st->a_dsp = displs_of(st->a_cnt, "node-local send");
  st->a_hold = pooled_scratch(local, end_of(st->a_cnt, st->a_dsp) * es, &st->a);
  const char* in = static_cast<const char*>(send);
  for (int k = 0, off = 0; k < L; ++k) {
    for (int m = 0; m < N; ++m) {
      copy(local, st->a + std::size_t(off) * es, in + std::size_t(sd[h(m, k)]) * es, std::size_t(sc[h(m, k)]) * es);
      off += sc[h(m, k)];
    }
  }
  const std::size_t count_bytes = std::size_t(P) * sizeof(int);
  st->count_hold = pooled_scratch(local, count_bytes * (1 + std::size_t(L)), &st->counts);
  from_host(local, st->counts, sc.data(), count_bytes);

  // Stage 2 receives from (m', j) the rows of node m's ranks in local order:
  // straight into recv when they lie there back to back.
  Ints& d_cnt = st->d_cnt;
  Ints& d_dsp = st->d_dsp;
  d_cnt.assign(static_cast<std::size_t>(N), 0);
  d_dsp.assign(static_cast<std::size_t>(N), 0);
  bool direct = true;
  for (int m = 0; m < N; ++m) {
    int next = -1;  // where the next nonempty chunk must start
    for (int l = 0; l < L; ++l) {
      const int c = rc[h(m, l)];
      if (c == 0) continue;
      if (next < 0) d_dsp[m] = rd[h(m, l)];
      direct = direct && (next < 0 || rd[h(m, l)] == next);
      next = rd[h(m, l)] + c;
      d_cnt[m] += c;
    }
  }
  if (!direct) {
    d_dsp = displs_of(d_cnt, "inter-node receive");
    st->d_hold = pooled_scratch(local, end_of(d_cnt, d_dsp) * es, &st->d);
  }

  std::vector<Post> stages;
  stages.emplace_back(lp, [=]() {
    return lp->iallgather(st->counts, st->counts + count_bytes, static_cast<std::size_t>(P), DType::I32);
  });
  stages.emplace_back(lp, [=]() {
    Ints gathered(std::size_t(L) * std::size_t(P));  // [l * P + q]: what local rank l sends index q
    to_host(*lp, gathered.data(), st->counts + count_bytes, count_bytes * std::size_t(L));
    st->count_hold.reset();
    // rows[l * N + m]: rows local rank l sends (m, j). Local rank l hands us
    // its rows for (m, j), m = 0..N-1, node by node; we send (m, j) node m's.
    st->rows.resize(std::size_t(L) * std::size_t(N));
    Ints b_cnt(static_cast<std::size_t>(L), 0);
    st->c_cnt.assign(static_cast<std::size_t>(N), 0);
    for (int l = 0; l < L; ++l) {
      for (int m = 0; m < N; ++m) {
        const int c = gathered[std::size_t(l) * P + h(m, j)];
        st->rows[std::size_t(l) * N + m] = c;
        b_cnt[l] += c;
        st->c_cnt[m] += c;
      }
    }
    st->b_dsp = displs_of(b_cnt, "node-local receive");
    st->b_hold = pooled_scratch(*lp, end_of(b_cnt, st->b_dsp) * es, &st->b);
    return lp->ialltoallv(st->a, st->a_cnt, st->a_dsp, st->b, b_cnt, st->b_dsp, t);
  });
  stages.emplace_back(ip, [=]() {
    st->a_hold.reset();
    // Regroup by destination node: [m][l] from [l][m].
    const Ints c_dsp = displs_of(st->c_cnt, "inter-node send");
    st->c_hold = pooled_scratch(*ip, end_of(st->c_cnt, c_dsp) * es, &st->c);
    Ints from = st->b_dsp;  // read position in b per source l
    for (int m = 0, off = 0; m < N; ++m) {
      for (int l = 0; l < L; ++l) {
        const int c = st->rows[std::size_t(l) * N + m];
        copy(*ip, st->c + std::size_t(off) * es, st->b + std::size_t(from[l]) * es, std::size_t(c) * es);
        from[l] += c;
        off += c;
      }
    }
    st->b_hold.reset();
    return ip->ialltoallv(st->c, st->c_cnt, c_dsp, direct ? recv : st->d, st->d_cnt, st->d_dsp, t);
  });
  Request r = sequenced(std::move(stages));
  if (!direct) {
    r.then([=]() {
      char* out = static_cast<char*>(recv);
      for (int m = 0, off = 0; m < N; ++m) {
        for (int l = 0; l < L; ++l) {
          copy(*lp, out + std::size_t(rd[h(m, l)]) * es, st->d + std::size_t(off) * es, std::size_t(rc[h(m, l)]) * es);
          off += rc[h(m, l)];
        }
      }
    });
  }
  r.keep(st);
  return r;
}

Request ihierarchical_alltoallv(HierarchicalComms& hc, const void* send, const Ints& sc, const Ints& sd, void* recv,
                                const Ints& rc, const Ints& rd, DType t) {
  EXA_REQUIRE(hc.nodes_aligned,
              "hierarchical_alltoallv: the inter-node groups list the nodes in different orders (detected nodes "
              "whose ranks are interleaved); use a Group::Ep pair, pretend nodes with parallel.ranks_per_node, or "
              "the flat alltoallv");
  if (hc.flat_rank.empty()) return ihierarchical_alltoallv(*hc.local, *hc.inter, send, sc, sd, recv, rc, rd, t);
  const std::size_t P = hc.flat_rank.size();
  require_counts(P, sc, sd, rc, rd);
  Ints v[4];
  const Ints* flat[4] = {&sc, &sd, &rc, &rd};
  for (int a = 0; a < 4; ++a) {
    v[a].resize(P);
    for (std::size_t i = 0; i < P; ++i) v[a][i] = (*flat[a])[static_cast<std::size_t>(hc.flat_rank[i])];
  }
  return ihierarchical_alltoallv(*hc.local, *hc.inter, send, v[0], v[1], recv, v[2], v[3], t);
}

}  // namespace exa::comm
