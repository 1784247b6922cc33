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

namespace exa::train {

// Runs it on `world` (federated.sites > 1); returns the last round's global
// validation loss (the mean over the sites of the averaged model's loss on
// each site's validation split).
double run_federated(const deck::Config& cfg, MPI_Comm world);

}  // namespace exa::train
