// The energy estimate (train/energy.hpp) on a fake powercap directory: which
// RAPL zones count, counter wrap-around, unreadable counters, the deck's
// power and the PUE, what reaches the step log, and (run at 1, 2 and 4
// ranks) one machine's counters shared by all its ranks while the grid
// pretends smaller nodes.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <mpi.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "comm/mpi_env.hpp"
#include "comm/process_grid.hpp"
#include "train/energy.hpp"

namespace fs = std::filesystem;
using exa::train::EnergyMeter;
using exa::train::EnergyOptions;
using exa::train::RaplCounters;
using exa::train::StepLog;

namespace {

class FakePowercap : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            ("examoe_test_energy_" + std::to_string(::getpid()) + "_" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(root_);
  }
  void TearDown() override { fs::remove_all(root_); }
  // Writes <root>/<zone>/<file> = value.
  void put(const std::string& zone, const std::string& file, const std::string& value) {
    fs::create_directories(root_ / zone);
    std::ofstream(root_ / zone / file) << value << "\n";
  }
  void zone(const std::string& name, std::uint64_t energy_uj, std::uint64_t range_uj) {
    put(name, "energy_uj", std::to_string(energy_uj));
    put(name, "max_energy_range_uj", std::to_string(range_uj));
  }
  std::string root() const { return root_.string(); }
  fs::path root_;
};

constexpr std::uint64_t kRange = 262143328850;  // a typical max_energy_range_uj

TEST_F(FakePowercap, PackagesCountSubZonesAndOtherEntriesDoNot) {
  zone("intel-rapl:0", 1'000'000, kRange);
  zone("intel-rapl:1", 5'000'000, kRange);
  zone("intel-rapl:0:0", 0, kRange);       // core: part of package 0
  zone("intel-rapl-mmio:0", 0, kRange);    // the same package through MMIO
  fs::create_directories(root_ / "intel-rapl");  // the control type, no counter
  RaplCounters rapl(root());
  ASSERT_TRUE(rapl.readable());
  EXPECT_EQ(rapl.domains(), 2u);
  zone("intel-rapl:0", 3'500'000, kRange);    // +2.5 J
  zone("intel-rapl:1", 6'000'000, kRange);    // +1 J
  zone("intel-rapl:0:0", 9'000'000, kRange);  // ignored
  zone("intel-rapl-mmio:0", 9'000'000, kRange);
  EXPECT_DOUBLE_EQ(rapl.joules(), 3.5);
  EXPECT_DOUBLE_EQ(rapl.joules(), 0.0);  // since the previous call
  zone("intel-rapl:1", 8'000'000, kRange);
  EXPECT_DOUBLE_EQ(rapl.joules(), 2.0);
}

TEST_F(FakePowercap, AWrappedCounterCountsTheWrap) {
  zone("intel-rapl:0", kRange - 500'000, kRange);
  RaplCounters rapl(root());
  zone("intel-rapl:0", 1'500'000, kRange);  // 0.5 J to the top, then 1.5 J
  EXPECT_DOUBLE_EQ(rapl.joules(), 2.0);
}

TEST_F(FakePowercap, UnreadableOrMissingCountersGiveNoEstimate) {
  put("intel-rapl:0", "energy_uj", "not a number");  // what a permission-less read looks like to us
  EXPECT_FALSE(RaplCounters(root()).readable());
  EXPECT_FALSE(RaplCounters((root_ / "absent").string()).readable());
  EnergyOptions o;
  o.powercap_root = root();
  EnergyMeter meter(o, 1, 1);
  EXPECT_FALSE(meter.enabled());
  StepLog s;
  meter.report(s, 10.0, 1000.0);
  EXPECT_FALSE(s.joules_per_token.has_value());
  EXPECT_EQ(meter.summary(1000.0, 2000.0), "");
  EXPECT_EQ(exa::train::format_line(s).find("J/tok"), std::string::npos);
  EXPECT_FALSE(exa::train::to_json(s).contains("energy"));
}

TEST_F(FakePowercap, RaplIsSharedOverTheHostsRanksAndScaledToTheWorld) {
  zone("intel-rapl:0", 0, kRange);
  EnergyOptions o;
  o.powercap_root = root();
  o.pue = 1.5;
  EnergyMeter meter(o, /*ranks_on_host=*/2, /*world=*/8);
  ASSERT_TRUE(meter.enabled());
  meter.restart();
  zone("intel-rapl:0", 100'000'000, kRange);  // the host used 100 J: 50 J per rank, 400 J for 8 ranks
  StepLog s;
  meter.report(s, 10.0, 1000.0);
  ASSERT_TRUE(s.joules_per_token.has_value());
  EXPECT_DOUBLE_EQ(*s.joules_per_token, 400.0 * 1.5 / 1000.0);
  EXPECT_DOUBLE_EQ(*s.kwh, 600.0 / 3.6e6);
  EXPECT_EQ(meter.source(), "RAPL: 1 package on rank 0's host (2 ranks), scaled to 8 ranks, PUE 1.5");
}

// Pretend nodes (parallel.ranks_per_node) split one machine for the grid,
// not for RAPL: the machine's counters are shared over all its ranks, so
// the ranks of one machine together measure exactly what it drew.
TEST(RaplOnOneMachine, PretendNodesShareTheMachinesCountersOverAllItsRanks) {
  const int rank = exa::comm_rank(MPI_COMM_WORLD), world = exa::comm_size(MPI_COMM_WORLD);
  exa::comm::GridSizes sizes;
  sizes.ranks_per_node = 1;  // every rank a node of its own, to the grid
  exa::comm::ProcessGrid grid(sizes);
  ASSERT_EQ(grid.ranks_per_node(), 1);
  ASSERT_EQ(grid.num_nodes(), world);

  // The machine's one sysfs tree, which every rank reads; rank 0 stands for
  // the hardware that advances it.
  int pid = ::getpid();
  MPI_Bcast(&pid, 1, MPI_INT, 0, MPI_COMM_WORLD);
  const fs::path root = fs::temp_directory_path() / ("examoe_test_energy_machine_" + std::to_string(pid));
  const auto counter = [&](std::uint64_t uj) {
    if (rank == 0) {
      fs::create_directories(root / "intel-rapl:0");
      std::ofstream(root / "intel-rapl:0" / "energy_uj") << uj << "\n";
      std::ofstream(root / "intel-rapl:0" / "max_energy_range_uj") << kRange << "\n";
    }
    MPI_Barrier(MPI_COMM_WORLD);
  };
  counter(7'000'000);
  EnergyOptions o;
  o.powercap_root = root.string();
  EnergyMeter meter(o, MPI_COMM_WORLD);
  ASSERT_TRUE(meter.enabled());
  meter.restart();
  MPI_Barrier(MPI_COMM_WORLD);  // every rank has its starting reading
  counter(107'000'000);          // the machine drew 100 J
  StepLog s;
  meter.report(s, 10.0, 1000.0);
  ASSERT_TRUE(s.joules_per_token.has_value());
  // 100 J over the world's 1000 tokens; pretend nodes counted as machines
  // would make it world x 100 J.
  EXPECT_DOUBLE_EQ(*s.joules_per_token, 0.1);
  EXPECT_DOUBLE_EQ(*s.kwh, 100.0 / 3.6e6);
  const auto ranks = fmt::format("{} rank{}", world, world == 1 ? "" : "s");
  EXPECT_EQ(meter.source(), fmt::format("RAPL: 1 package on rank 0's host ({}), scaled to {}, PUE 1", ranks, ranks));
  MPI_Barrier(MPI_COMM_WORLD);  // nobody reads the tree any more
  if (rank == 0) fs::remove_all(root);
}

TEST_F(FakePowercap, TheDecksPowerWinsOverRapl) {
  zone("intel-rapl:0", 0, kRange);
  EnergyOptions o;
  o.powercap_root = root();
  o.power_w_per_rank = 300;
  o.pue = 1.2;
  EnergyMeter meter(o, 2, 4);
  zone("intel-rapl:0", 999'000'000, kRange);  // not read
  StepLog a, b;
  meter.report(a, 10.0, 4000.0);  // 300 W x 4 ranks x 10 s x 1.2 = 14400 J
  meter.report(b, 5.0, 2000.0);   // 7200 J more
  EXPECT_DOUBLE_EQ(*a.joules_per_token, 3.6);
  EXPECT_DOUBLE_EQ(*b.joules_per_token, 3.6);
  EXPECT_DOUBLE_EQ(*b.kwh, 21600.0 / 3.6e6);
  EXPECT_NE(exa::train::format_line(b).find("| 3.6 J/tok 0.006 kWh"), std::string::npos) << exa::train::format_line(b);
  const auto j = exa::train::to_json(b);
  EXPECT_DOUBLE_EQ(j["energy"]["joules_per_token"].get<double>(), 3.6);
  // 6000 tokens at 3.6 J/token; a whole run of 1e6 tokens: 3.6e6 J = 1 kWh.
  const std::string sum = meter.summary(6000.0, 1e6);
  EXPECT_EQ(sum, "energy: 0.006 kWh for 6000 tokens (3.6 J/token; 300 W per rank (output.power_w_per_rank) x 4 "
                 "ranks, PUE 1.2); a whole run of 1000000 tokens: 1 kWh");
}

}  // namespace
