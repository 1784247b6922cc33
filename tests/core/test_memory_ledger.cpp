// The memory ledger (core/memory_ledger.hpp): categories from View labels,
// and every allocation and free counted, current and peak, per category.
#include <gtest/gtest.h>

#include <Kokkos_Core.hpp>

#include "core/memory_ledger.hpp"
#include "core/types.hpp"

using exa::MemCategory;
using exa::MemoryLedger;

TEST(MemoryLedger, CategoriesFollowTheLabels) {
  EXPECT_EQ(MemoryLedger::category_of("exa::params"), MemCategory::Parameters);
  EXPECT_EQ(MemoryLedger::category_of("exa::dp::param_slot"), MemCategory::Parameters);
  EXPECT_EQ(MemoryLedger::category_of("exa::dp::grad_slot"), MemCategory::Gradients);
  EXPECT_EQ(MemoryLedger::category_of("exa::optim::exp_avg"), MemCategory::Optimizer);
  EXPECT_EQ(MemoryLedger::category_of("exa::model::ea"), MemCategory::Activations);
  EXPECT_EQ(MemoryLedger::category_of("exa::dp::recv"), MemCategory::Communication);
  EXPECT_EQ(MemoryLedger::category_of("exa::pipeline::act_in"), MemCategory::Communication);
  EXPECT_EQ(MemoryLedger::category_of("exa::ckpt::snapshot"), MemCategory::Checkpoint);
  EXPECT_EQ(MemoryLedger::category_of("exa::inputs"), MemCategory::Workspace);
  EXPECT_EQ(MemoryLedger::category_of(""), MemCategory::Workspace);
  EXPECT_STREQ(MemoryLedger::name(MemCategory::Activations), "activations");
}

TEST(MemoryLedger, CountsEveryAllocationAndFree) {
  ASSERT_TRUE(MemoryLedger::install());
  const auto at = [](MemCategory c) { return MemoryLedger::snapshot()[std::size_t(c)]; };
  const auto before = at(MemCategory::Optimizer);
  MemoryLedger::restart_peaks();
  {
    exa::View1<float> a("exa::optim::test_a", 1000);
    exa::View1<double> b("exa::optim::test_b", 500);
    EXPECT_EQ(at(MemCategory::Optimizer).current - before.current, 4000 + 4000);
  }
  // Freed: back to where it was, the peak remembering both.
  EXPECT_EQ(at(MemCategory::Optimizer).current, before.current);
  EXPECT_EQ(at(MemCategory::Optimizer).peak - before.current, 8000);
  MemoryLedger::restart_peaks();
  EXPECT_EQ(at(MemCategory::Optimizer).peak, before.current);
}
