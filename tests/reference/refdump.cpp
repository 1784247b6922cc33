// refdump: the C++ half of the PyTorch reference tests (tests/reference/README.md).
//
//   refdump DECK [--set section.key=value]... --out DIR [--adamw-steps N] [--batch-seed S]
//
// Builds ExaMoE's model from the deck (single rank), and writes into DIR
// exactly the files the reference (run_reference.py) reads, plus its own
// results in the layout the reference writes:
//
//   DIR/ckpt/step_00000000/state.h5  the model at init (save_checkpoint): --weights
//   DIR/cfg.json                     Config::to_json():                      --config
//   DIR/batch.h5                     int32 inputs/targets [B,T]:             --batch
//   DIR/out.h5                       ExaMoE's results (same layout as the reference's out.h5):
//       logits [B,T,V] (fp32), loss/ce/aux/z (float64 scalars),
//       grads/<name> (fp32, global shape): d(micro-batch mean loss)/d(param), loss scale 1,
//       stats/layers.{i}/routed, kept [E] (int64): assignments per expert before/after capacity,
//       adamw/losses [N] (float64): the loss before each of N AdamW steps on the same batch,
//       adamw/final/<name> (fp32): the parameters after them.
//
// B = train.micro_batch, T = model.seq_len. The batch is a random token
// sequence s[0..T] per row (std::mt19937_64 seeded by --batch-seed, default
// train.seed), inputs = s[0..T-1], targets = s[1..T]. The model is
// initialised from train.seed. The AdamW steps run at the constant lr
// optim.lr with no warmup (the reference's convention): refdump appends
// --set optim.schedule=constant and optim.warmup_steps=0 so cfg.json says so
// too; clipping at optim.grad_clip, one micro-batch, loss scale 1.
#include <algorithm>
#include <hdf5.h>
#include <Kokkos_Core.hpp>
#include <fmt/format.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "comm/mpi_env.hpp"
#include "core/deck/config.hpp"
#include "core/error.hpp"
#include "core/runtime.hpp"
#include "io/checkpoint/checkpoint.hpp"
#include "model/model_config.hpp"
#include "model/parameter_specs.hpp"
#include "model/parameter_store.hpp"
#include "model/transformer.hpp"
#include "model/weights.hpp"
#include "optim/optimizer.hpp"

using namespace exa;
namespace fs = std::filesystem;

namespace {

// ---- minimal HDF5 writer (serial; the files are small) ----------------------

class H5Out {
 public:
  explicit H5Out(const std::string& path) : path_(path) {
    fid_ = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    EXA_REQUIRE(fid_ >= 0, "refdump: cannot create {}", path);
    lcpl_ = H5Pcreate(H5P_LINK_CREATE);
    H5Pset_create_intermediate_group(lcpl_, 1);
  }
  ~H5Out() {
    H5Pclose(lcpl_);
    if (fid_ >= 0) H5Fclose(fid_);
  }
  H5Out(const H5Out&) = delete;
  H5Out& operator=(const H5Out&) = delete;

  template <class T>
  void write(const std::string& name, const std::vector<std::int64_t>& shape, const T* data) {
    std::vector<hsize_t> dims(shape.begin(), shape.end());
    const hid_t space = shape.empty() ? H5Screate(H5S_SCALAR) : H5Screate_simple(int(dims.size()), dims.data(), nullptr);
    const hid_t type = h5type<T>();
    const hid_t ds = H5Dcreate2(fid_, name.c_str(), type, space, lcpl_, H5P_DEFAULT, H5P_DEFAULT);
    EXA_REQUIRE(ds >= 0, "refdump: cannot create dataset {} in {}", name, path_);
    EXA_REQUIRE(H5Dwrite(ds, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) >= 0, "refdump: cannot write {} in {}",
                name, path_);
    H5Dclose(ds);
    H5Sclose(space);
  }
  void scalar(const std::string& name, double v) { write<double>(name, {}, &v); }
  void attr(const std::string& name, const std::string& value) {
    const hid_t type = H5Tcopy(H5T_C_S1);
    H5Tset_size(type, value.size() + 1);
    H5Tset_strpad(type, H5T_STR_NULLTERM);
    const hid_t space = H5Screate(H5S_SCALAR);
    const hid_t a = H5Acreate2(fid_, name.c_str(), type, space, H5P_DEFAULT, H5P_DEFAULT);
    EXA_REQUIRE(a >= 0 && H5Awrite(a, type, value.c_str()) >= 0, "refdump: cannot write attribute {}", name);
    H5Aclose(a);
    H5Sclose(space);
    H5Tclose(type);
  }

 private:
  template <class T>
  static hid_t h5type() {
    if constexpr (std::is_same_v<T, float>) return H5T_NATIVE_FLOAT;
    else if constexpr (std::is_same_v<T, double>) return H5T_NATIVE_DOUBLE;
    else if constexpr (std::is_same_v<T, std::int32_t>) return H5T_NATIVE_INT32;
    else return H5T_NATIVE_INT64;
  }
  std::string path_;
  hid_t fid_ = -1, lcpl_ = -1;
};

template <class V>
std::vector<float> to_host(const V& v) {
  auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), v);
  return std::vector<float>(h.data(), h.data() + h.size());
}

void write_tensors(H5Out& out, const std::string& group, const model::ParameterStore& store, bool grads) {
  for (std::size_t i = 0; i < store.size(); ++i) {
    const auto& s = store.spec(i);
    if (grads && !s.trainable) continue;  // LoRA's frozen model has no gradient
    const auto h = to_host(grads ? store.grad(i) : store.value(i));
    EXA_REQUIRE(std::int64_t(h.size()) == s.numel(), "refdump: '{}' is not whole on this rank", s.name);
    out.write(group + "/" + s.name, s.shape, h.data());
  }
}

struct Args {
  std::string deck, out;
  std::vector<std::string> sets;
  std::int64_t adamw_steps = 10;
  long long batch_seed = -1;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string s = argv[i];
    auto next = [&]() -> std::string {
      EXA_REQUIRE(i + 1 < argc, "refdump: {} needs a value", s);
      return argv[++i];
    };
    if (s == "--set") a.sets.push_back(next());
    else if (s.rfind("--set=", 0) == 0) a.sets.push_back(s.substr(6));
    else if (s == "--out") a.out = next();
    else if (s == "--adamw-steps") a.adamw_steps = std::stoll(next());
    else if (s == "--batch-seed") a.batch_seed = std::stoll(next());
    else if (s == "-h" || s == "--help") {
      std::printf("usage: refdump DECK [--set section.key=value]... --out DIR [--adamw-steps N] [--batch-seed S]\n");
      std::exit(0);
    } else if (!s.empty() && s[0] == '-') {
      throw Error(fmt::format("refdump: unknown option {}", s));
    } else {
      EXA_REQUIRE(a.deck.empty(), "refdump: two decks given ({} and {})", a.deck, s);
      a.deck = s;
    }
  }
  EXA_REQUIRE(!a.deck.empty() && !a.out.empty(), "refdump: usage: refdump DECK [--set k=v]... --out DIR");
  EXA_REQUIRE(a.adamw_steps >= 0, "refdump: --adamw-steps must be >= 0");
  return a;
}

int run(const Args& a) {
  auto sets = a.sets;
  sets.push_back("optim.schedule=constant");
  sets.push_back("optim.warmup_steps=0");
  const auto cfg = deck::Config::load(a.deck, sets, 1);
  const auto mcfg = model::ModelConfig::from_deck(cfg);
  const std::int64_t B = cfg.get_int("train.micro_batch"), T = mcfg.seq_len, V = mcfg.vocab_size;
  const auto seed = static_cast<std::uint64_t>(cfg.get_int("train.seed"));

  fs::remove_all(a.out);
  fs::create_directories(a.out);
  const fs::path dir(a.out);

  // The trainable tensors first, as training holds them (LoRA: the adapters).
  auto specs = model::parameter_specs(mcfg);
  std::stable_partition(specs.begin(), specs.end(), [](const model::ParamSpec& s) { return s.trainable; });
  model::ParameterStore store(specs);
  store.initialize(seed);

  // The model at init, as a checkpoint (the reference's --weights).
  io::CheckpointMeta meta;
  meta.deck = cfg.deck_text();
  meta.config_json = cfg.to_json();
  const std::string step_dir = io::save_checkpoint((dir / "ckpt").string(), store, nullptr, meta, MPI_COMM_WORLD);
  {
    std::ofstream f(dir / "cfg.json");
    f << cfg.to_json(2) << "\n";
    std::ofstream w(dir / "weights_path.txt");
    w << (fs::path(step_dir) / io::kCheckpointFile).string() << "\n";
  }

  // The batch.
  std::vector<std::int32_t> hin(std::size_t(B * T)), htg(std::size_t(B * T));
  {
    std::mt19937_64 rng(a.batch_seed >= 0 ? std::uint64_t(a.batch_seed) : seed);
    std::uniform_int_distribution<std::int32_t> tok(0, std::int32_t(V - 1));
    for (std::int64_t b = 0; b < B; ++b) {
      std::vector<std::int32_t> s(std::size_t(T + 1));
      for (auto& x : s) x = tok(rng);
      for (std::int64_t t = 0; t < T; ++t) {
        hin[std::size_t(b * T + t)] = s[std::size_t(t)];
        htg[std::size_t(b * T + t)] = s[std::size_t(t + 1)];
      }
    }
    H5Out bf((dir / "batch.h5").string());
    bf.write("inputs", {B, T}, hin.data());
    bf.write("targets", {B, T}, htg.data());
  }
  Kokkos::View<std::int32_t**, Layout, Device> inputs("refdump::inputs", B, T), targets("refdump::targets", B, T);
  {
    auto hi = Kokkos::create_mirror_view(inputs);
    auto ht = Kokkos::create_mirror_view(targets);
    for (std::int64_t b = 0; b < B; ++b)
      for (std::int64_t t = 0; t < T; ++t) {
        hi(b, t) = hin[std::size_t(b * T + t)];
        ht(b, t) = htg[std::size_t(b * T + t)];
      }
    Kokkos::deep_copy(inputs, hi);
    Kokkos::deep_copy(targets, ht);
  }

  model::Transformer<float> net(mcfg);
  const auto w = model::bind_values(mcfg, store);
  const auto g = model::bind_grads(mcfg, store);

  H5Out out((dir / "out.h5").string());
  out.attr("dtype", "float32");
  out.attr("source", "examoe refdump");
  out.attr("config", cfg.to_json());

  // Forward and backward of the micro-batch mean loss, loss scale 1.
  store.zero_grads();
  const auto fr = net.forward(w, inputs, targets);
  {
    const auto logits = to_host(net.logits());  // before backward(), which overwrites them
    out.write("logits", {B, T, V}, logits.data());
  }
  net.backward(w, g, 1.0);
  out.scalar("loss", fr.loss.loss);
  out.scalar("ce", fr.loss.ce);
  out.scalar("aux", fr.loss.aux);
  out.scalar("z", fr.loss.z);
  write_tensors(out, "grads", store, true);
  std::int64_t dropped = 0;
  for (const auto& r : fr.routing) {
    const std::string p = fmt::format("stats/layers.{}/", r.layer);
    const std::int64_t E = std::int64_t(r.routed.size());
    out.write(p + "routed", {E}, r.routed.data());
    out.write(p + "kept", {E}, r.kept.data());
    dropped += r.dropped;
  }
  std::printf("refdump: B=%lld T=%lld params=%lld loss %.8g (ce %.8g, aux %.6g, z %.6g), %lld assignments dropped\n",
              (long long)B, (long long)T, (long long)store.local_numel(), fr.loss.loss, fr.loss.ce, fr.loss.aux,
              fr.loss.z, (long long)dropped);

  // N AdamW steps on the same batch: constant lr, no warmup, one micro-batch, loss scale 1.
  if (a.adamw_steps > 0) {
    optim::Optimizer opt(store,
                         optim::LrSchedule(cfg.get_float("optim.lr"), 0.0, 0, a.adamw_steps, optim::Decay::Constant),
                         optim::GradClipper::from_deck(cfg), optim::GradAccumulation{1, 1.0},
                         optim::AdamWConfig::from_deck(cfg));
    std::vector<double> losses;
    for (std::int64_t s = 0; s < a.adamw_steps; ++s) {
      store.zero_grads();
      const auto r = net.forward(w, inputs, targets);
      net.backward(w, g, 1.0);
      losses.push_back(r.loss.loss);
      const auto rep = opt.step(store, s);
      EXA_REQUIRE(rep.applied, "refdump: AdamW step {} was not applied (non-finite gradient norm)", s);
    }
    out.write("adamw/losses", {a.adamw_steps}, losses.data());
    write_tensors(out, "adamw/final", store, false);
    std::printf("refdump: %lld AdamW steps, loss %.8g -> %.8g\n", (long long)a.adamw_steps, losses.front(),
                losses.back());
  }
  std::printf("refdump: wrote %s\n", a.out.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  MpiEnvironment mpi(argc, argv);
  KokkosRuntime kokkos(argc, argv);
  try {
    EXA_REQUIRE(mpi.size() == 1, "refdump runs on one rank (got {})", mpi.size());
    return run(parse(argc, argv));
  } catch (const Error& e) {
    std::fprintf(stderr, "refdump: error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "refdump: error: %s\n", e.what());
    return 1;
  }
}
