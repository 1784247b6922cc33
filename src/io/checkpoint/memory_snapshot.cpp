#include "io/checkpoint/memory_snapshot.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <nlohmann/json.hpp>

#include "comm/mpi_env.hpp"
#include "core/error.hpp"
#include "io/checkpoint/box_holders.hpp"
#include "io/checkpoint/meta_json.hpp"
#include "io/checkpoint/piece_copy.hpp"
#include "io/checkpoint/piece_cover.hpp"

namespace exa::io {

namespace fs = std::filesystem;

namespace {

constexpr char kT0Magic[8] = {'E', 'X', 'A', 'M', 'O', 'E', 'T', '0'};
constexpr std::int64_t kT0Format = 1;

std::uint64_t t0_hash(const void* p, std::size_t n) { return XXH64(p, n, 0); }

std::string t0_prefix(const MemoryJob& job) { return "examoe-t0-" + job.key + "-"; }

struct T0Name {
  std::uint64_t step = 0, launch = 0;
  int owner = 0, holder = 0;
};

std::string t0_file(const MemoryJob& job, const T0Name& n) {
  return (fs::path(job.dir) / fmt::format("{}s{:08d}-g{:016x}-o{}-h{}", t0_prefix(job), n.step, n.launch, n.owner,
                                          n.holder))
      .string();
}

// The job's segments in job.dir (temporary files left out).
std::vector<std::pair<T0Name, std::string>> t0_list(const MemoryJob& job) {
  std::vector<std::pair<T0Name, std::string>> out;
  std::error_code ec;
  const std::string prefix = t0_prefix(job);
  for (fs::directory_iterator it(job.dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.rfind(prefix, 0) != 0 || name.find(".tmp") != std::string::npos) continue;
    T0Name n;
    unsigned long long step = 0, launch = 0;
    char tail = 0;
    if (std::sscanf(name.c_str() + prefix.size(), "s%llu-g%llx-o%d-h%d%c", &step, &launch, &n.owner, &n.holder,
                    &tail) != 4)
      continue;
    n.step = step;
    n.launch = launch;
    out.emplace_back(n, it->path().string());
  }
  return out;
}

template <class Keep>
int t0_remove_if(const MemoryJob& job, Keep keep) {
  int n = 0;
  for (const auto& [name, path] : t0_list(job)) {
    std::error_code ec;
    if (!keep(name) && fs::remove(path, ec)) ++n;
  }
  return n;
}

void t0_write_atomic(const std::string& path, const std::string& bytes) {
  const std::string tmp = fmt::format("{}.tmp-{}", path, ::getpid());
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    f.write(bytes.data(), std::streamsize(bytes.size()));
    f.close();
    if (!f) {
      std::error_code ec;
      fs::remove(tmp, ec);
      throw Error(fmt::format("cannot write the tier-0 snapshot {} ({} bytes): is {} full? Make room, or set "
                              "checkpoint.memory_every = 0",
                              path, bytes.size(), fs::path(path).parent_path().string()));
    }
  }
  fs::rename(tmp, path);
}

template <class T>
void t0_put(std::string& s, const T& v) {
  s.append(reinterpret_cast<const char*>(&v), sizeof(T));
}

// Host copy of a View's values.
std::vector<float> t0_host(const View1<float>& v) {
  auto h = Kokkos::create_mirror_view(v);
  Kokkos::deep_copy(h, v);
  return std::vector<float>(h.data(), h.data() + h.extent(0));
}

// Sends `out` to `to` and receives from `from` (sizes first), in chunks
// below INT_MAX bytes.
std::string t0_exchange(const std::string& out, int to, int from, MPI_Comm comm) {
  unsigned long long n_out = out.size(), n_in = 0;
  MPI_Sendrecv(&n_out, 1, MPI_UNSIGNED_LONG_LONG, to, 701, &n_in, 1, MPI_UNSIGNED_LONG_LONG, from, 701, comm,
               MPI_STATUS_IGNORE);
  std::string in(static_cast<std::size_t>(n_in), '\0');
  constexpr std::size_t C = std::size_t(1) << 30;
  std::vector<MPI_Request> reqs;
  for (std::size_t off = 0, k = 0; off < in.size(); off += C, ++k) {
    reqs.emplace_back();
    MPI_Irecv(in.data() + off, int(std::min(C, in.size() - off)), MPI_CHAR, from, int(702 + k % 1000), comm,
              &reqs.back());
  }
  for (std::size_t off = 0, k = 0; off < out.size(); off += C, ++k) {
    reqs.emplace_back();
    MPI_Isend(out.data() + off, int(std::min(C, out.size() - off)), MPI_CHAR, to, int(702 + k % 1000), comm,
              &reqs.back());
  }
  MPI_Waitall(int(reqs.size()), reqs.data(), MPI_STATUSES_IGNORE);
  return in;
}

// A segment's header; `data` is the file offset of its first value.
struct T0Header {
  nlohmann::json j;
  std::uint64_t data = 0;
};

// Reads and checks a segment's header; nullopt (and `why`) when it is damaged.
std::optional<T0Header> t0_read_header(const std::string& path, std::string& why) {
  std::ifstream f(path, std::ios::binary);
  char magic[8] = {};
  std::uint64_t n = 0, sum = 0;
  f.read(magic, 8);
  f.read(reinterpret_cast<char*>(&n), 8);
  if (!f || std::memcmp(magic, kT0Magic, 8) != 0 || n > (std::uint64_t(1) << 32)) {
    why = "not a tier-0 segment (bad magic or size)";
    return std::nullopt;
  }
  std::string text(static_cast<std::size_t>(n), '\0');
  f.read(text.data(), std::streamsize(n));
  f.read(reinterpret_cast<char*>(&sum), 8);
  if (!f || t0_hash(text.data(), text.size()) != sum) {
    why = "its header fails its checksum";
    return std::nullopt;
  }
  try {
    return T0Header{nlohmann::json::parse(text), 8 + 8 + n + 8};
  } catch (const nlohmann::json::exception& e) {
    why = std::string("its header does not parse: ") + e.what();
    return std::nullopt;
  }
}

model::Box t0_box(const nlohmann::json& p) {
  return model::Box{p.at("offset").get<std::vector<std::int64_t>>(), p.at("extent").get<std::vector<std::int64_t>>()};
}

bool t0_boxes_meet(const model::Box& a, const model::Box& b) {
  for (std::size_t d = 0; d < a.extent.size() && d < b.extent.size(); ++d)
    if (std::max(a.offset[d], b.offset[d]) >= std::min(a.offset[d] + a.extent[d], b.offset[d] + b.extent[d]))
      return false;
  return true;
}

// A tensor's top-k residual as this rank holds it now: its box, its index
// among the ranks holding the same box (world-rank order) and their number.
struct ResidualHolder {
  std::string name;
  model::Box box;
  View1<float> residual;  // empty: this rank holds none of the tensor
  std::int64_t holder = -1, holders = 0;
};

std::vector<ResidualHolder> t0_residual_holders(const std::vector<CheckpointTensor>& tensors,
                                                const OptimizerState& optim, MPI_Comm comm) {
  std::vector<ResidualHolder> out;
  for (const auto& t : tensors) {
    const auto it = optim.find(t.name);
    if (it == optim.end() || !it->second.has_residual) continue;
    const model::Shard s = model::resolve_shard(t.shard, t.name, t.shape);
    out.push_back({t.name, s.box, it->second.residual});
  }
  std::vector<std::optional<model::Box>> boxes;
  for (const auto& h : out) boxes.push_back(h.residual.extent(0) > 0 ? std::optional<model::Box>(h.box) : std::nullopt);
  const auto who = box_holders(boxes, comm);
  for (std::size_t i = 0; i < out.size(); ++i) {
    out[i].holder = who[i].holder;
    out[i].holders = who[i].holders;
  }
  return out;
}

// This rank's residual of `h` from the snapshot: the owners holding the
// same box wrote rows 0, 1, ... (world-rank order); holder j of a box now
// gets the sum, over its box, of the rows k with k mod holders == j (the
// disk tiers' rule, io/checkpoint.hpp). `without`: the snapshot has no
// residual of the tensor (zeros). A row no copy verifies sets `error`.
template <class Header>
std::vector<float> t0_fold_residual(const MemoryCandidate& c, Header& header, const ResidualHolder& h,
                                    std::string& error, bool& without) {
  std::vector<float> out(std::size_t(h.residual.extent(0)), 0.0f);
  struct Row {
    int owner;
    model::Box box;
  };
  std::vector<Row> rows;  // every owner's residual piece, in owner order
  for (int o = 0; o < c.world; ++o) {
    for (const auto& path : c.files[std::size_t(o)]) {
      const auto& hdr = header(path);
      if (!hdr) continue;
      for (const auto& p : hdr->j.at("pieces"))
        if (p.at("name") == h.name && p.contains("residual_data")) rows.push_back({o, t0_box(p)});
      break;
    }
  }
  if (rows.empty()) {
    without = true;
    return out;
  }
  if (h.holder < 0) return out;
  const Piece mine{h.box, {0, h.box.numel()}};
  for (const auto& row : rows) {
    std::int64_t k = 0;  // the row's index among its box's owners
    for (const auto& other : rows)
      if (other.owner < row.owner && other.box.offset == row.box.offset && other.box.extent == row.box.extent) ++k;
    if (k % h.holders != h.holder || !t0_boxes_meet(row.box, h.box)) continue;
    bool done = false;
    for (const auto& path : c.files[std::size_t(row.owner)]) {
      const auto& hdr = header(path);
      if (!hdr) continue;
      for (const auto& p : hdr->j.at("pieces")) {
        if (p.at("name") != h.name || !p.contains("residual_data")) continue;
        std::vector<float> v(std::size_t(row.box.numel()));
        std::ifstream f(path, std::ios::binary);
        f.seekg(std::streamoff(hdr->data + p.at("residual_data").template get<std::uint64_t>()));
        f.read(reinterpret_cast<char*>(v.data()), std::streamsize(v.size() * sizeof(float)));
        if (!f || t0_hash(v.data(), v.size() * sizeof(float)) != p.at("residual_sum").template get<std::uint64_t>())
          break;
        for_each_overlap_run(Piece{row.box, {0, row.box.numel()}}, mine,
                             [&](std::int64_t s, std::int64_t d, std::int64_t n) {
                               for (std::int64_t e = 0; e < n; ++e) out[std::size_t(d + e)] += v[std::size_t(s + e)];
                             });
        done = true;
        break;
      }
      if (done) break;
    }
    if (!done) {
      error = fmt::format("tier 0: rank {}'s top-k residual of {} verifies in no copy ({})", row.owner, h.name,
                          fmt::join(c.files[std::size_t(row.owner)], ", "));
      break;
    }
  }
  return out;
}

}  // namespace

std::string memory_job_key(const std::string& run_dir) {
  std::error_code ec;
  fs::path p = fs::weakly_canonical(fs::absolute(run_dir), ec);
  if (ec) p = fs::absolute(run_dir);
  const std::string s = p.string();
  return fmt::format("{:016x}", t0_hash(s.data(), s.size()));
}

std::uint64_t memory_model_fingerprint(const std::vector<CheckpointTensor>& tensors) {
  std::string s;
  for (const auto& t : tensors) s += fmt::format("{}[{}];", t.name, fmt::join(t.shape, ","));
  return t0_hash(s.data(), s.size());
}

MemoryJob memory_job(const std::string& dir, const std::string& run_dir,
                     const std::vector<CheckpointTensor>& tensors) {
  std::error_code ec;
  fs::path p = fs::weakly_canonical(fs::absolute(run_dir), ec);
  if (ec) p = fs::absolute(run_dir);
  MemoryJob job{dir, p.string(), memory_job_key(run_dir), memory_model_fingerprint(tensors), {}};
  for (const auto& t : tensors) job.tensors.emplace_back(t.name, t.shape);
  return job;
}

MemorySaveReport save_memory_snapshot(const MemoryJob& job, std::uint64_t launch,
                                      const std::vector<CheckpointTensor>& tensors, const OptimizerState& optim,
                                      const CheckpointMeta& meta, int buddy, MPI_Comm comm) {
  const int rank = comm_rank(comm), size = comm_size(comm);
  // Who sends to this rank: the inverse of the buddy permutation.
  std::vector<int> buddies(static_cast<std::size_t>(size));
  MPI_Allgather(&buddy, 1, MPI_INT, buddies.data(), 1, MPI_INT, comm);
  int from = rank;
  for (int r = 0; r < size; ++r)
    if (buddies[std::size_t(r)] == rank) from = r;

  nlohmann::json h;
  h["format"] = kT0Format;
  h["run_dir"] = job.run_dir;
  h["model"] = job.model;
  h["step"] = meta.step;
  h["launch"] = launch;
  h["owner"] = rank;
  h["world"] = size;
  h["optim"] = !optim.empty();
  h["meta"] = meta_to_json(meta);
  std::string data;
  nlohmann::json pieces = nlohmann::json::array();
  for (const auto& t : tensors) {
    const model::Shard s = model::resolve_shard(t.shard, t.name, t.shape);
    if (s.count == 0) continue;
    std::vector<View1<float>> arrays{t.value};
    if (const auto it = optim.find(t.name); it != optim.end()) {
      arrays.push_back(it->second.exp_avg);
      arrays.push_back(it->second.exp_avg_sq);
    }
    nlohmann::json p{{"name", t.name}, {"shape", t.shape}, {"offset", s.box.offset}, {"extent", s.box.extent},
                     {"begin", s.offset}, {"end", s.offset + s.count}, {"data", data.size()}};
    std::vector<std::uint64_t> sums;
    for (const auto& a : arrays) {
      const auto v = t0_host(a);
      EXA_REQUIRE(std::int64_t(v.size()) == s.count, "tier 0: {} holds {} values for a piece of {}", t.name,
                  v.size(), s.count);
      sums.push_back(t0_hash(v.data(), v.size() * sizeof(float)));
      data.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
    }
    p["sums"] = sums;
    // Top-k's residual covers the rank's whole box (io/checkpoint.hpp): its
    // own array after the others, found by its own offset.
    if (const auto it = optim.find(t.name);
        it != optim.end() && it->second.has_residual && it->second.residual.extent(0) > 0) {
      const auto v = t0_host(it->second.residual);
      EXA_REQUIRE(std::int64_t(v.size()) == s.box.numel(), "tier 0: {}'s top-k residual holds {} values for a box of {}",
                  t.name, v.size(), s.box.numel());
      p["residual_data"] = data.size();
      p["residual_sum"] = t0_hash(v.data(), v.size() * sizeof(float));
      data.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
    }
    pieces.push_back(std::move(p));
  }
  h["pieces"] = std::move(pieces);

  auto blob_for = [&](int holder) {
    h["holder"] = holder;
    const std::string text = h.dump();
    std::string blob(kT0Magic, 8);
    t0_put(blob, std::uint64_t(text.size()));
    blob += text;
    t0_put(blob, t0_hash(text.data(), text.size()));
    blob += data;
    return blob;
  };
  MemorySaveReport rep;
  const std::string own = blob_for(rank);
  rep.bytes = own.size();
  // The buddy's copy differs from the own one in the holder alone: send the
  // bytes the buddy will keep.
  const std::string copy = buddy != rank ? t0_exchange(blob_for(buddy), buddy, from, comm) : std::string();
  int ok = 1;
  try {
    fs::create_directories(job.dir);
    t0_write_atomic(t0_file(job, {meta.step, launch, rank, rank}), own);
    if (from != rank) t0_write_atomic(t0_file(job, {meta.step, launch, from, rank}), copy);
  } catch (const std::exception& e) {
    rep.error = e.what();
    ok = 0;
  }
  MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, comm);
  rep.ok = ok == 1;
  // Complete everywhere: the older snapshots (and other launches' copies of
  // this step) are no longer needed.
  if (rep.ok && rank == 0)
    t0_remove_if(job, [&](const T0Name& n) { return n.step == meta.step && n.launch == launch; });
  MPI_Barrier(comm);
  return rep;
}

std::optional<std::uint64_t> newest_memory_step(const MemoryJob& job) {
  std::optional<std::uint64_t> step;
  for (const auto& [n, path] : t0_list(job)) step = std::max(step.value_or(0), n.step);
  return step;
}

std::optional<MemoryCandidate> newest_memory_snapshot(const MemoryJob& job, std::vector<std::string>& notes) {
  std::map<std::pair<std::uint64_t, std::uint64_t>, std::vector<std::pair<T0Name, std::string>>> groups;
  for (auto& e : t0_list(job)) groups[{e.first.step, e.first.launch}].push_back(std::move(e));
  for (auto g = groups.rbegin(); g != groups.rend(); ++g) {  // newest step (and launch) first
    const auto [step, launch] = g->first;
    MemoryCandidate c{step, launch, 0, {}};
    std::vector<std::vector<nlohmann::json>> pieces;  // per owner: its first good header's pieces
    bool refused = false;
    auto files = g->second;
    // Own copies first: they sort before the copies of the same owner.
    std::sort(files.begin(), files.end(), [](const auto& a, const auto& b) {
      const bool ao = a.first.owner == a.first.holder, bo = b.first.owner == b.first.holder;
      return a.first.owner != b.first.owner ? a.first.owner < b.first.owner
                                            : ao != bo ? ao : a.first.holder < b.first.holder;
    });
    for (const auto& [name, path] : files) {
      std::string why;
      const auto hdr = t0_read_header(path, why);
      if (hdr) {
        const auto& j = hdr->j;
        if (j.value("format", 0) != kT0Format || j.value("run_dir", "") != job.run_dir) {
          why = fmt::format("written by another job ({})", j.value("run_dir", "?"));
        } else if (j.value("model", std::uint64_t(0)) != job.model) {
          notes.push_back(fmt::format("tier 0: refusing the step-{} snapshot {}: written for another model (tensors "
                                      "or shapes differ); it is not used",
                                      step, path));
          refused = true;
          break;
        } else if (j.value("step", std::uint64_t(0)) != step || j.value("owner", -1) != name.owner) {
          why = "its header does not match its name";
        } else {
          const int world = j.value("world", 0);
          if (c.world == 0) c.world = world;
          if (world != c.world || name.owner >= world) {
            why = fmt::format("written by a world of {} ranks, not {}", world, c.world);
          } else {
            c.files.resize(std::size_t(world));
            pieces.resize(std::size_t(world));
            if (c.files[std::size_t(name.owner)].empty()) pieces[std::size_t(name.owner)] = j.at("pieces");
            c.files[std::size_t(name.owner)].push_back(path);
            continue;
          }
        }
      }
      notes.push_back(fmt::format("tier 0: ignoring {}: {}", path, why));
    }
    if (refused || c.world == 0) continue;
    std::vector<int> missing;
    for (int o = 0; o < c.world; ++o) {
      const auto& f = c.files[std::size_t(o)];
      if (f.empty()) {
        missing.push_back(o);
      } else if (f.front().find(fmt::format("-o{}-h{}", o, o)) == std::string::npos) {
        notes.push_back(fmt::format("tier 0: rank {}'s own step-{} snapshot is gone; its pieces come from its "
                                    "buddy's copy {}",
                                    o, step, f.front()));
      }
    }
    // Every element of every tensor held by some owner (replicas may stand
    // in for a missing one).
    std::string gap;
    for (const auto& [tname, shape] : job.tensors) {
      std::vector<Piece> ps(std::size_t(c.world));
      for (int o = 0; o < c.world; ++o)
        for (const auto& p : pieces[std::size_t(o)])
          if (p.at("name") == tname)
            ps[std::size_t(o)] = Piece{t0_box(p), {p.at("begin").get<std::int64_t>(), p.at("end").get<std::int64_t>()}};
      for (auto& p : ps)
        if (p.box.extent.empty()) p.box = model::Box{std::vector<std::int64_t>(shape.size(), 0), shape};
      try {
        if (!PieceCover(shape, ps, tname).gaps().empty()) gap = tname;
      } catch (const Error&) {
        gap = tname;
      }
      if (!gap.empty()) break;
    }
    if (!gap.empty()) {
      notes.push_back(fmt::format("tier 0: the step-{} snapshot is incomplete ({} of {} ranks' segments missing, "
                                  "{} not covered); trying an older one",
                                  step, missing.size(), c.world, gap));
      continue;
    }
    return c;
  }
  return std::nullopt;
}

CheckpointMeta load_memory_snapshot(const MemoryCandidate& c, const std::vector<CheckpointTensor>& tensors,
                                    const OptimizerState& optim, MPI_Comm comm, std::vector<std::string>& notes) {
  const int rank = comm_rank(comm);
  std::string error;
  std::map<std::string, std::optional<T0Header>> headers;  // by file
  auto header = [&](const std::string& path) -> const std::optional<T0Header>& {
    auto it = headers.find(path);
    if (it == headers.end()) {
      std::string why;
      it = headers.emplace(path, t0_read_header(path, why)).first;
    }
    return it->second;
  };
  // Top-k's residuals: who holds the same box now (collective, so before
  // anything a rank may stop early on).
  const auto now = t0_residual_holders(tensors, optim, comm);
  // What this rank assembles: per tensor, the value and (when kept) moments.
  struct Target {
    Piece piece;
    std::vector<std::vector<float>> arrays;
    std::vector<char> filled;
  };
  std::vector<Target> targets(tensors.size());
  for (std::size_t i = 0; i < tensors.size() && error.empty(); ++i) {
    const auto& t = tensors[i];
    const model::Shard s = model::resolve_shard(t.shard, t.name, t.shape);
    auto& tg = targets[i];
    tg.piece = Piece{s.box, {s.offset, s.offset + s.count}};
    const std::size_t n_arrays = optim.count(t.name) ? 3 : 1;
    tg.arrays.assign(n_arrays, std::vector<float>(std::size_t(s.count)));
    tg.filled.assign(std::size_t(s.count), 0);
    if (s.count == 0) continue;
    for (int o = 0; o < c.world && error.empty(); ++o) {
      bool done = false;
      std::vector<std::string> failed;
      for (const auto& path : c.files[std::size_t(o)]) {
        const auto& hdr = header(path);
        if (!hdr) {
          failed.push_back(path + " (damaged header)");
          continue;
        }
        std::ifstream f(path, std::ios::binary);
        bool good = true;
        std::vector<std::vector<float>> tmp(n_arrays, std::vector<float>(std::size_t(s.count)));
        std::vector<char> fill(tg.filled);
        for (const auto& p : hdr->j.at("pieces")) {
          if (p.at("name") != t.name) continue;
          const Piece src{t0_box(p), {p.at("begin").get<std::int64_t>(), p.at("end").get<std::int64_t>()}};
          const auto sums = p.at("sums").get<std::vector<std::uint64_t>>();
          if (sums.size() < n_arrays) {
            good = false;
            break;
          }
          if (!t0_boxes_meet(src.box, tg.piece.box)) continue;  // only pieces sharing elements are read
          for (std::size_t a = 0; a < n_arrays && good; ++a) {
            std::vector<float> v(std::size_t(src.range.size()));
            f.seekg(std::streamoff(hdr->data + p.at("data").get<std::uint64_t>() + a * v.size() * sizeof(float)));
            f.read(reinterpret_cast<char*>(v.data()), std::streamsize(v.size() * sizeof(float)));
            if (!f || t0_hash(v.data(), v.size() * sizeof(float)) != sums[a]) {
              good = false;
              f.clear();
              break;
            }
            std::vector<char> mark(std::size_t(s.count), 0);
            copy_piece_overlap(src, v.data(), tg.piece, tmp[a].data(), a == 0 ? fill : mark);
          }
          if (!good) break;
        }
        if (!good) {
          failed.push_back(path);
          notes.push_back(fmt::format("tier 0: rank {}'s piece of {} in {} fails its checksum{}", o, t.name, path,
                                      &path != &c.files[std::size_t(o)].back() ? "; trying its next copy" : ""));
          continue;
        }
        // The copies agree, so taking the pieces from here is as good as any.
        for (std::size_t k = 0; k < fill.size(); ++k)
          if (fill[k] && !tg.filled[k])
            for (std::size_t a = 0; a < n_arrays; ++a) tg.arrays[a][k] = tmp[a][k];
        tg.filled = std::move(fill);
        done = true;
        break;
      }
      if (!done && !failed.empty())
        error = fmt::format("tier 0: rank {}'s piece of {} verifies in no copy ({})", o, t.name,
                            fmt::join(failed, ", "));
    }
    if (error.empty() && std::count(tg.filled.begin(), tg.filled.end(), 0) != 0)
      error = fmt::format("tier 0: the step-{} snapshot leaves elements of {} uncovered", c.step, t.name);
  }
  std::vector<std::vector<float>> residuals(now.size());
  bool without = false;
  for (std::size_t i = 0; i < now.size() && error.empty(); ++i)
    residuals[i] = t0_fold_residual(c, header, now[i], error, without);
  if (without && rank == 0)
    notes.push_back(fmt::format("tier 0: the step-{} snapshot holds no top-k residuals for some tensors (written "
                                "without comm.compression = \"topk\"): their error feedback starts from zero",
                                c.step));
  // Agree: the message of the lowest rank that failed, on every rank.
  int bad = error.empty() ? INT_MAX : rank;
  MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_MIN, comm);
  if (bad != INT_MAX) {
    unsigned long long n = error.size();
    MPI_Bcast(&n, 1, MPI_UNSIGNED_LONG_LONG, bad, comm);
    error.resize(static_cast<std::size_t>(n));
    MPI_Bcast(error.data(), int(n), MPI_CHAR, bad, comm);
    throw Error(error);
  }
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const auto& t = tensors[i];
    std::vector<View1<float>> views{t.value};
    if (const auto it = optim.find(t.name); it != optim.end()) {
      views.push_back(it->second.exp_avg);
      views.push_back(it->second.exp_avg_sq);
    }
    for (std::size_t a = 0; a < targets[i].arrays.size(); ++a) {
      auto h = Kokkos::create_mirror_view(views[a]);
      std::copy(targets[i].arrays[a].begin(), targets[i].arrays[a].end(), h.data());
      Kokkos::deep_copy(views[a], h);
    }
  }
  for (std::size_t i = 0; i < now.size(); ++i) {
    if (now[i].residual.extent(0) == 0) continue;
    auto h = Kokkos::create_mirror_view(now[i].residual);
    std::copy(residuals[i].begin(), residuals[i].end(), h.data());
    Kokkos::deep_copy(now[i].residual, h);
  }
  const auto& hdr = header(c.files.front().front());
  EXA_REQUIRE(hdr.has_value(), "tier 0: the header of {} no longer verifies", c.files.front().front());
  CheckpointMeta meta = meta_from_json(hdr->j.at("meta").get<std::string>());
  meta.has_optimizer = hdr->j.value("optim", false);
  meta.directory = fmt::format("tier 0 ({}/examoe-t0-*-s{:08d}, {} ranks' segments)",
                               fs::path(c.files.front().front()).parent_path().string(), c.step, c.world);
  return meta;
}

int remove_memory_snapshots(const MemoryJob& job, std::optional<std::uint64_t> before) {
  return t0_remove_if(job, [&](const T0Name& n) { return before && n.step >= *before; });
}

int remove_memory_snapshots_held_by(const MemoryJob& job, int holder) {
  return t0_remove_if(job, [&](const T0Name& n) { return n.holder != holder; });
}

}  // namespace exa::io
