// federated.balance = "steps" (train::balanced_steps): the fastest site
// trains local_steps, the others in proportion to their speed, rounded,
// never below one step; and FederatedOptions reads the deck's section
// (the majority threshold, the sites' files, slowdowns and the drop).
#include <gtest/gtest.h>

#include <vector>

#include "core/deck/config.hpp"
#include "train/federated.hpp"

using exa::train::balanced_steps;

TEST(FederatedBalance, StepsFollowTheSitesSpeed) {
  EXPECT_EQ(balanced_steps({0.1, 0.1, 0.1}, 20), (std::vector<std::int64_t>{20, 20, 20}));
  EXPECT_EQ(balanced_steps({0.1, 0.2, 0.5}, 20), (std::vector<std::int64_t>{20, 10, 4}));
  EXPECT_EQ(balanced_steps({0.3, 0.1, 0.53}, 20), (std::vector<std::int64_t>{7, 20, 4}));  // 6.67 and 3.77 rounded
  EXPECT_EQ(balanced_steps({0.01, 5.0}, 10), (std::vector<std::int64_t>{10, 1}));         // at least one step
}

TEST(FederatedOptions, ReadsTheDecksSection) {
  const auto c = exa::deck::Config::from_text(
      "[train]\nsteps = 40\n[federated]\nsites = 4\nlocal_steps = 10\nsecure = true\n"
      "site_data = \"a.txt, b.txt,c.txt,d.txt\"\nslowdown = \"1,1,2,3\"\ndrop = \"2:3\"\n",
      "fed.toml", {}, 8);
  const auto o = exa::train::FederatedOptions::from_deck(c);
  EXPECT_EQ(o.sites, 4);
  EXPECT_EQ(o.threshold, 3);  // 0: a majority of 4
  EXPECT_EQ(o.rounds, 4);
  EXPECT_EQ(o.data, (std::vector<std::string>{"a.txt", "b.txt", "c.txt", "d.txt"}));
  EXPECT_EQ(o.slowdown, (std::vector<double>{1, 1, 2, 3}));
  EXPECT_EQ(o.drop_site, 2);
  EXPECT_EQ(o.drop_round, 3);
  EXPECT_EQ(c.layout_world_size(), 2);  // each site's layout spans 8 / 4 ranks
}
