#include "train/replica_check.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <vector>

#include "comm/mpi_env.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "kernels/checksum.hpp"

namespace exa::train {

namespace {

constexpr int kFlipBit = 30;  // the exponent's highest: a large change, as real faults often are
constexpr int kRepairTag = 7411;

std::string rank_list(const std::vector<int>& ranks) {
  std::string s;
  for (std::size_t k = 0; k < ranks.size(); ++k) s += (k ? ", " : "") + std::to_string(ranks[k]);
  return s;
}

// Every rank's `mine` (a JSON array), concatenated in world-rank order.
nlohmann::json allgather_json(const nlohmann::json& mine, MPI_Comm world) {
  const std::string text = mine.dump();
  const int n = static_cast<int>(text.size());
  const int P = comm_size(world);
  std::vector<int> counts(static_cast<std::size_t>(P)), displs(static_cast<std::size_t>(P), 0);
  MPI_Allgather(&n, 1, MPI_INT, counts.data(), 1, MPI_INT, world);
  for (int r = 1; r < P; ++r) displs[std::size_t(r)] = displs[std::size_t(r - 1)] + counts[std::size_t(r - 1)];
  std::string all(std::size_t(displs.back() + counts.back()), ' ');
  MPI_Allgatherv(text.data(), n, MPI_CHAR, all.data(), counts.data(), displs.data(), MPI_CHAR, world);
  nlohmann::json out = nlohmann::json::array();
  for (int r = 0; r < P; ++r)
    for (auto& f : nlohmann::json::parse(all.substr(std::size_t(displs[std::size_t(r)]),
                                                    std::size_t(counts[std::size_t(r)]))))
      out.push_back(std::move(f));
  return out;
}

}  // namespace

// What one comparison found: the findings of the groups this rank leads
// (each group's rank 0 reports for its group, so each is listed once), and
// the zero-0 repairs this rank takes part in, in the same order on every
// rank of a group.
struct ReplicaCheck::Verdict {
  nlohmann::json findings = nlohmann::json::array();
  struct Repair {
    std::size_t tensor;
    MPI_Comm comm;
    int root;                 // group rank of a majority copy
    std::vector<int> to;      // group ranks of the corrupt copies
  };
  std::vector<Repair> repairs;
};

ReplicaCheck::ReplicaCheck(const deck::Config& cfg, const comm::ProcessGrid& grid, int zero)
    : grid_(grid), world_(grid.comm(comm::Group::World)), zero_(zero),
      every_(cfg.get_int("resilience.replica_check_every")) {
  EXA_REQUIRE(every_ == 0 || zero_ != 3,
              "resilience.replica_check_every = {} needs a replicated copy of the parameters, and under "
              "parallel.zero = 3 no rank holds one (each holds only its part): use zero 0, 1 or 2, or set "
              "replica_check_every = 0 (the checkpoint's checksums still guard the parts)",
              every_);
  if (every_ > 0 && grid.size(comm::Group::Data) == 1 && grid.size(comm::Group::ExpertData) == 1)
    log::info("resilience.replica_check_every = {}: no data-parallel replicas in this layout (dp x cp = 1), "
              "so there is nothing to compare",
              every_);
}

ReplicaCheck::Verdict ReplicaCheck::compare(parallel::data::DataParallel& dp, std::int64_t steps_done, bool report) {
  const auto& store = dp.store();
  std::vector<std::uint64_t> sums(store.size());
  for (std::size_t i = 0; i < store.size(); ++i) sums[i] = kernels::checksum(dp.replica_values(i));
  const int me_world = comm_rank(world_);
  Verdict v;
  for (const auto g : {comm::Group::Data, comm::Group::ExpertData}) {
    std::vector<std::size_t> idx;  // the tensors replicated over g
    for (std::size_t i = 0; i < store.size(); ++i)
      if ((store.spec(i).reduce == model::ReduceGroup::ExpertData) == (g == comm::Group::ExpertData))
        idx.push_back(i);
    const MPI_Comm c = grid_.comm(g);
    const int P = comm_size(c), me = comm_rank(c);
    if (P == 1 || idx.empty()) continue;
    const std::size_t m = idx.size();
    std::vector<std::uint64_t> mine(m), table(m * std::size_t(P));
    for (std::size_t j = 0; j < m; ++j) mine[j] = sums[idx[j]];
    MPI_Allgather(mine.data(), int(m), MPI_UINT64_T, table.data(), int(m), MPI_UINT64_T, c);
    std::vector<int> world_of(static_cast<std::size_t>(P));
    MPI_Allgather(&me_world, 1, MPI_INT, world_of.data(), 1, MPI_INT, c);
    for (std::size_t j = 0; j < m; ++j) {
      std::map<std::uint64_t, int> count;
      for (int r = 0; r < P; ++r) ++count[table[std::size_t(r) * m + j]];
      if (count.size() == 1) continue;
      const auto best = std::max_element(count.begin(), count.end(),
                                         [](const auto& a, const auto& b) { return a.second < b.second; });
      const bool majority = 2 * best->second > P;
      const std::string& name = store.spec(idx[j]).name;
      std::vector<int> odd, odd_world;  // the corrupt copies (all of them without a majority)
      int root = -1;
      for (int r = 0; r < P; ++r) {
        const bool agrees = majority && table[std::size_t(r) * m + j] == best->first;
        if (agrees && root < 0) root = r;
        if (!agrees) {
          odd.push_back(r);
          odd_world.push_back(world_of[std::size_t(r)]);
        }
      }
      if (!report) {
        if (me == 0) v.findings.push_back({{"tensor", name}, {"ranks", odd_world}});
        continue;
      }
      const std::string source = zero_ != 0   ? std::string("the master parts (re-gathered)")
                                 : majority ? fmt::format("rank {}", world_of[std::size_t(root)])
                                            : std::string();
      if (me == 0)
        v.findings.push_back({{"tensor", name}, {"ranks", odd_world}, {"majority", majority},
                              {"replicas", P}, {"source", source.empty() ? "none" : source}});
      if (majority && std::count(odd.begin(), odd.end(), me))
        log::warn("replica check after step {}: silent data corruption on rank {}: its copy of {} (checksum {}) "
                  "differs from the majority's ({}, {} of {} replicas); repairing it from {}",
                  steps_done, me_world, name, kernels::checksum_hex(mine[j]), kernels::checksum_hex(best->first),
                  best->second, P, source);
      if (!majority && me == 0)
        log::warn("replica check after step {}: silent data corruption: the {} replicas of {} disagree (ranks {}) "
                  "and no majority says which copy is right{}",
                  steps_done, P, name, rank_list(odd_world),
                  source.empty() ? std::string() : "; repairing them from " + source);
      if (majority && zero_ == 0) v.repairs.push_back({idx[j], c, root, odd});
    }
  }
  return v;
}

nlohmann::json ReplicaCheck::run(std::int64_t steps_done, parallel::data::DataParallel& dp) {
  Verdict v = compare(dp, steps_done, true);
  const nlohmann::json found = allgather_json(v.findings, world_);
  nlohmann::json rec{{"event", "replica_check"}, {"step", steps_done}, {"tensors", dp.store().size()},
                     {"mismatches", found.size()}, {"corrupt", found}};
  if (found.empty()) return rec;
  if (zero_ == 0) {
    for (const auto& f : found) {
      EXA_REQUIRE(f.at("majority").get<bool>(),
                  "replica check after step {}: silent data corruption: the {} data-parallel replicas of tensor {} "
                  "disagree (ranks {}) and with no majority nothing says which copy is right, so it cannot be "
                  "repaired in place. Resume from the last checkpoint (checkpoint.resume = true; "
                  "`examoe-ckpt verify` checks it), and run with 3 or more replicas (or parallel.zero = 1 or 2) "
                  "to repair such a fault without a restart",
                  steps_done, f.at("replicas").get<int>(), f.at("tensor").get<std::string>(),
                  rank_list(f.at("ranks").get<std::vector<int>>()));
    }
    // Every repair in the order all ranks of its group listed it: the root
    // sends its copy to each corrupt rank.
    for (const auto& r : v.repairs) {
      const auto values = dp.replica_values(r.tensor);
      auto host = Kokkos::create_mirror_view(values);
      const int me = comm_rank(r.comm), n = static_cast<int>(values.extent(0));
      if (me == r.root) {
        Kokkos::deep_copy(host, values);
        for (const int to : r.to) MPI_Send(host.data(), n, MPI_FLOAT, to, kRepairTag, r.comm);
      } else if (std::count(r.to.begin(), r.to.end(), me)) {
        MPI_Recv(host.data(), n, MPI_FLOAT, r.root, kRepairTag, r.comm, MPI_STATUS_IGNORE);
        Kokkos::deep_copy(values, host);
      }
    }
  } else {
    dp.params_updated();  // the working copies, gathered again from the master parts
  }
  const nlohmann::json still = allgather_json(compare(dp, steps_done, false).findings, world_);
  EXA_REQUIRE(still.empty(),
              "replica check after step {}: the replicas still disagree after the repair ({}): the fault persists "
              "(a failing device or memory?). Resume from the last checkpoint on other nodes",
              steps_done, still.dump());
  rec["repaired"] = true;
  log::info("replica check after step {}: {} corrupt cop{} repaired; the replicas agree again", steps_done,
            found.size(), found.size() == 1 ? "y" : "ies");
  return rec;
}

void ReplicaCheck::inject(std::int64_t steps_done, parallel::data::DataParallel& dp) {
  static const char* when = std::getenv("EXAMOE_FAULT_FLIP_AT_STEP");
  static const char* who = std::getenv("EXAMOE_FAULT_RANK");
  static const char* which = std::getenv("EXAMOE_FAULT_FLIP_TENSOR");
  if (injected_ || when == nullptr || std::atoll(when) != steps_done) return;
  if ((who != nullptr ? std::atoi(who) : 0) != comm_rank(world_)) return;
  injected_ = true;
  const auto& store = dp.store();
  std::size_t i = 0;
  for (; i < store.size(); ++i) {
    if (which != nullptr ? store.spec(i).name == which : dp.replica_values(i).extent(0) > 0) break;
  }
  EXA_REQUIRE(i < store.size(), "EXAMOE_FAULT_FLIP_TENSOR={}: rank {} holds no such tensor", which ? which : "",
              comm_rank(world_));
  const auto values = dp.replica_values(i);
  const std::size_t at = values.extent(0) / 2;
  auto one = Kokkos::subview(values, std::make_pair(at, at + 1));
  auto host = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), one);
  std::uint32_t bits;
  std::memcpy(&bits, host.data(), 4);
  bits ^= std::uint32_t(1) << kFlipBit;
  const float before = host(0);
  std::memcpy(host.data(), &bits, 4);
  Kokkos::deep_copy(one, host);
  log::warn("EXAMOE_FAULT_FLIP_AT_STEP={}: rank {} flips bit {} of {}[{}] after step {} ({} -> {}; fault injection)",
            when, comm_rank(world_), kFlipBit, store.spec(i).name, at, steps_done, before, host(0));
}

}  // namespace exa::train
