#pragma once
// Internals shared by the hierarchical collectives (hierarchical.cpp,
// hierarchical_alltoallv.cpp): scratch buffers and copies in the memory a
// communicator reads, and the per-communicator posting order of operations
// made of several stages (see hierarchical_stages.cpp and the "Progress and
// ordering" note in comm/hierarchical.hpp).
#include <cstddef>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "comm/communicator.hpp"

namespace exa::comm::hier {

using Bytes = std::shared_ptr<void>;

// `bytes` of scratch in the memory `c` reads; *ptr is its first byte (may be
// null for 0 bytes). The returned handle keeps it alive.
Bytes scratch(const Communicator& c, std::size_t bytes, char** ptr);
// The same from a pool: released buffers are kept (in the memory kind they
// were made for) and handed to the next request they fit, so that an
// operation run every step does not map fresh pages each time (the
// first-touch faults of a fresh buffer cost more than the copies into it).
// Holds the largest few buffers until Kokkos::finalize.
Bytes pooled_scratch(const Communicator& c, std::size_t bytes, char** ptr);
// Within the memory `c` reads.
void copy(const Communicator& c, char* dst, const char* src, std::size_t bytes);
void zero(const Communicator& c, char* dst, std::size_t bytes);
// Between host memory and the memory `c` reads (plain memcpy for MPI).
void to_host(const Communicator& c, void* host_dst, const void* src, std::size_t bytes);
void from_host(const Communicator& c, void* dst, const void* host_src, std::size_t bytes);

void require_same_memory(const Communicator& local, const Communicator& inter, const char* what);

// One stage: the communicator it runs on and the call that posts it.
using Post = std::pair<Communicator*, std::function<Request()>>;

// The Request of an operation made of `stages`, run one after another, each
// taking its place in its communicator's queue now (program order). A stage's
// post function runs once the stage before has completed, so it may read what
// that stage received.
Request sequenced(std::vector<Post> stages);

}  // namespace exa::comm::hier
