#pragma once
// Federated training (docs/federated.md): federated.sites groups of
// consecutive ranks, each a site with its own data (federated.site_data),
// run dir (output.run_dir/site<K>) and Trainer in the deck's [parallel]
// layout. Every federated.local_steps steps (a round) the sites' models are
// averaged, weighted by the steps each trained, plainly or by secure
// aggregation (comm/secure_aggregation.hpp). Rank j of every site holds the
// same part of the model (same layout), so the ranks j of all sites average
// their parts among themselves: any layout works unchanged. Optimizer state
// stays with each site.
#include <mpi.h>

#include "core/deck/config.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace exa::train {

// The deck's [federated] section.
struct FederatedOptions {
  int sites = 1, threshold = 1;  // threshold: of secure aggregation (0 in the deck: a majority)
  std::int64_t local_steps = 1, rounds = 1;
  bool secure = false, balance = false;
  std::vector<std::string> data;  // per site
  std::vector<double> slowdown;   // per site, 1 = none
  int drop_site = -1;             // federated.drop: this site leaves round drop_round
  std::int64_t drop_round = -1;

  static FederatedOptions from_deck(const deck::Config& c);
};

// federated.balance = "steps": each site's steps in the next round, from its
// step time (averaged over the rounds): local_steps times the fastest
// site's step time over its own, rounded, at least 1.
std::vector<std::int64_t> balanced_steps(const std::vector<double>& step_seconds, std::int64_t local_steps);

// Site `site`'s deck: its data (federated.site_data's entry) and its own
// run directory output.run_dir/site<K> (and checkpoint directories, where
// the deck gave absolute ones), the rest as the deck says.
deck::Config federated_site_config(const deck::Config& cfg, int site);

// Runs it on `world` (federated.sites > 1).
struct FederatedResult {
  // The last round's global validation loss: the mean over the sites of the
  // averaged model's loss on each site's validation split.
  double val = 0;
  int signal = 0;         // a scheduler's stop signal that ended it at a round's end (0: ran to the end)
  std::int64_t step = 0;  // this rank's site's steps done
};
FederatedResult run_federated(const deck::Config& cfg, MPI_Comm world);

}  // namespace exa::train
