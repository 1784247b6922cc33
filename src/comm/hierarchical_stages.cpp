#include "comm/hierarchical_stages.hpp"

#include <algorithm>
#include <cstring>
#include <deque>
#include <map>

#include "comm/watchdog.hpp"
#include "core/error.hpp"
#include "core/types.hpp"

namespace exa::comm::hier {

namespace {

template <class Space>
using Raw = Kokkos::View<char*, Space, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;

// ---- Posting order -----------------------------------------------------
// A hierarchical operation posts its later stages from test() / wait(), once
// the stage before has completed: at different moments on different ranks,
// and interleaved differently with the other operations in flight (a ZeRO
// step has reduce-scatters, allgathers and allreduces out together). But MPI
// and NCCL match the collectives on a communicator by the order in which each
// rank posts them, so a plain chain per operation can pair bucket j's
// inter-node stage with bucket j+1's and mix their data. Instead every stage
// takes its place in its communicator's queue when the operation is created
// (program order: the same on every rank), and is posted only from the head
// of that queue, once its operation's previous stage has completed. Any
// test() / wait() of a hierarchical Request advances all queues.
// The price: a stage waits for the earlier operations' stages on the same
// communicator (bucket j+1's node-local reduce-scatter is posted after bucket
// j's node-local allgather of the allreduce).

struct Op {
  std::vector<Post> stages;
  std::size_t posted = 0;  // stages posted so far, in order
  Request current;         // the last stage posted
};

using Slot = std::pair<std::shared_ptr<Op>, std::size_t>;  // (operation, stage index)

// One queue per communicator. Touched from the thread that drives MPI only
// (MPI_THREAD_FUNNELED), like the communicators themselves.
std::map<const Communicator*, std::deque<Slot>>& queues() {
  static std::map<const Communicator*, std::deque<Slot>> q;
  return q;
}

// Posts every stage that heads its queue and whose previous stage is
// complete, until nothing moves. Empty queues are dropped so that a freed
// communicator's address can be reused.
void advance() {
  auto& qs = queues();
  for (bool moved = true; moved;) {
    moved = false;
    for (auto it = qs.begin(); it != qs.end();) {
      auto& q = it->second;
      while (!q.empty()) {
        const std::shared_ptr<Op> op = q.front().first;
        const std::size_t k = q.front().second;
        if (op->posted != k || !op->current.test()) break;
        // Dequeued only once posted: a post that throws is retried (and
        // throws again) on the next test() / wait() instead of hanging it.
        op->current = op->stages[k].second();
        ++op->posted;
        q.pop_front();
        moved = true;
      }
      it = q.empty() ? qs.erase(it) : std::next(it);
    }
  }
}

bool queues_empty() { return queues().empty(); }

class SequencedImpl final : public RequestImpl {
 public:
  explicit SequencedImpl(std::shared_ptr<Op> op) : op_(std::move(op)) {}
  bool test() override {
    advance();
    return op_->posted == op_->stages.size() && op_->current.test();
  }
  void wait() override {
    BoundedWait bound("a hierarchical collective", op_->stages.front().first->size());
    while (!test()) {
      // Blocking on our own posted stage is safe only when nothing is left to
      // post here: otherwise another rank may need a stage that only our
      // advance() posts before it can finish the one we would block on.
      if (queues_empty()) {
        op_->current.wait();
      } else {
        bound.poll();
      }
    }
  }

 private:
  std::shared_ptr<Op> op_;
};

}  // namespace

Bytes scratch(const Communicator& c, std::size_t bytes, char** ptr) {
  if (c.device_memory()) {
    auto v = std::make_shared<Kokkos::View<char*, exa::MemSpace>>(
        Kokkos::view_alloc(Kokkos::WithoutInitializing, "exa::comm::hier"), bytes);
    *ptr = v->data();
    return v;
  }
  auto v = std::make_shared<Kokkos::View<char*, Kokkos::HostSpace>>(
      Kokkos::view_alloc(Kokkos::WithoutInitializing, "exa::comm::hier"), bytes);
  *ptr = v->data();
  return v;
}

namespace {

// Free buffers of one memory kind, smallest first. Touched from the thread
// that drives MPI only, like the queues.
struct Pool {
  struct Buf {
    Bytes hold;  // the View
    char* data = nullptr;
    std::size_t capacity = 0;
  };
  std::vector<Buf> free;
};

constexpr std::size_t kPoolKeep = 8;  // free buffers kept per memory kind

Pool& pool(bool device) {
  static Pool pools[2];
  static bool hooked = false;
  if (!hooked) {
    // Views must not outlive Kokkos.
    Kokkos::push_finalize_hook([] {
      for (auto& p : pools) p.free.clear();
    });
    hooked = true;
  }
  return pools[device ? 1 : 0];
}

}  // namespace

Bytes pooled_scratch(const Communicator& c, std::size_t bytes, char** ptr) {
  const bool device = c.device_memory();
  Pool& p = pool(device);
  Pool::Buf buf;
  auto it = std::find_if(p.free.begin(), p.free.end(), [&](const Pool::Buf& b) { return b.capacity >= bytes; });
  if (it != p.free.end()) {
    buf = std::move(*it);
    p.free.erase(it);
  } else {
    buf.capacity = bytes;
    buf.hold = scratch(c, bytes, &buf.data);
  }
  *ptr = buf.data;
  // The handle gives the buffer back to the pool instead of freeing it.
  return Bytes(buf.data, [device, buf](void*) mutable {
    Pool& q = pool(device);
    auto at = std::lower_bound(q.free.begin(), q.free.end(), buf.capacity,
                               [](const Pool::Buf& b, std::size_t cap) { return b.capacity < cap; });
    q.free.insert(at, std::move(buf));
    if (q.free.size() > kPoolKeep) q.free.erase(q.free.begin());
  });
}

void copy(const Communicator& c, char* dst, const char* src, std::size_t bytes) {
  if (bytes == 0 || dst == src) return;
  if (c.device_memory()) {
    Kokkos::deep_copy(Raw<exa::MemSpace>(dst, bytes), Raw<exa::MemSpace>(const_cast<char*>(src), bytes));
  } else {
    std::memcpy(dst, src, bytes);
  }
}

void zero(const Communicator& c, char* dst, std::size_t bytes) {
  if (bytes == 0) return;
  if (c.device_memory()) {
    Kokkos::deep_copy(Raw<exa::MemSpace>(dst, bytes), char(0));
  } else {
    std::memset(dst, 0, bytes);
  }
}

void require_same_memory(const Communicator& local, const Communicator& inter, const char* what) {
  EXA_REQUIRE(local.device_memory() == inter.device_memory(),
              "{}: node-local ({}) and inter-node ({}) communicators use different memory; build both with the "
              "same Backend",
              what, local.backend(), inter.backend());
}

void to_host(const Communicator& c, void* host_dst, const void* src, std::size_t bytes) {
  if (bytes == 0) return;
  if (c.device_memory()) {
    Kokkos::deep_copy(Raw<Kokkos::HostSpace>(static_cast<char*>(host_dst), bytes),
                      Raw<exa::MemSpace>(static_cast<char*>(const_cast<void*>(src)), bytes));
  } else {
    std::memcpy(host_dst, src, bytes);
  }
}

void from_host(const Communicator& c, void* dst, const void* host_src, std::size_t bytes) {
  if (bytes == 0) return;
  if (c.device_memory()) {
    Kokkos::deep_copy(Raw<exa::MemSpace>(static_cast<char*>(dst), bytes),
                      Raw<Kokkos::HostSpace>(static_cast<char*>(const_cast<void*>(host_src)), bytes));
  } else {
    std::memcpy(dst, host_src, bytes);
  }
}

Request sequenced(std::vector<Post> stages) {
  if (stages.empty()) return Request();
  auto op = std::make_shared<Op>();
  op->stages = std::move(stages);
  for (std::size_t k = 0; k < op->stages.size(); ++k) queues()[op->stages[k].first].emplace_back(op, k);
  advance();  // posts the first stage unless earlier operations hold its communicator
  return Request(std::make_unique<SequencedImpl>(std::move(op)));
}

}  // namespace exa::comm::hier
