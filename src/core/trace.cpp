#include "core/trace.hpp"

#include <fmt/format.h>

#include <atomic>
#include <cstdio>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "core/error.hpp"

namespace exa {

namespace {

struct Event {
  const char* name;  // region names are string literals
  double start, end;
  int tid;
};

struct Recorder {
  std::atomic<bool> on{false};
  std::mutex mutex;
  std::vector<Event> events;
  std::unordered_map<std::thread::id, int> tids;
  int rank = 0;
};

Recorder& recorder() {
  static Recorder r;
  return r;
}

}  // namespace

void Trace::start(int rank) {
  auto& r = recorder();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.events.clear();
  r.tids.clear();
  r.rank = rank;
  r.on = true;
}

bool Trace::on() { return recorder().on.load(std::memory_order_relaxed); }

void Trace::span(const char* name, double start, double end) {
  auto& r = recorder();
  if (!r.on.load(std::memory_order_relaxed)) return;
  std::lock_guard<std::mutex> lock(r.mutex);
  const auto id = std::this_thread::get_id();
  auto it = r.tids.find(id);
  if (it == r.tids.end()) it = r.tids.emplace(id, int(r.tids.size())).first;
  r.events.push_back({name, start, end, it->second});
}

void Trace::stop_and_write(const std::string& path) {
  auto& r = recorder();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.on = false;
  std::FILE* f = std::fopen(path.c_str(), "w");
  EXA_REQUIRE(f != nullptr, "output.trace_steps: cannot write the trace '{}'; check output.run_dir", path);
  double first = r.events.empty() ? 0.0 : r.events.front().start;
  for (const auto& e : r.events) first = e.start < first ? e.start : first;
  std::string out = "{\"traceEvents\": [\n";
  for (std::size_t i = 0; i < r.events.size(); ++i) {
    const auto& e = r.events[i];
    out += fmt::format("{{\"name\": \"{}\", \"ph\": \"X\", \"ts\": {:.3f}, \"dur\": {:.3f}, \"pid\": {}, \"tid\": {}}}{}\n",
                       e.name, (e.start - first) * 1e6, (e.end - e.start) * 1e6, r.rank, e.tid,
                       i + 1 < r.events.size() ? "," : "");
  }
  out += "], \"displayTimeUnit\": \"ms\"}\n";
  const bool ok = std::fwrite(out.data(), 1, out.size(), f) == out.size();
  std::fclose(f);
  EXA_REQUIRE(ok, "output.trace_steps: writing the trace '{}' failed; check the space under output.run_dir", path);
  r.events.clear();
}

}  // namespace exa
