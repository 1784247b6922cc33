// The input deck: schema, defaults, overrides, typed access, the resolved
// dump, the decks shipped in input/, and every bad deck in tests/decks/bad/
// with its exact message.
//
// A bad deck states what it expects in header comments:
//   # expect: {deck}:5: unknown key 'd_modle' in [model]; did you mean 'd_model'?
//   # ranks: 6                  (optional: world size to validate for; default 1)
//   # set: model.n_heads=3      (optional, repeatable: --set overrides)
// {deck} stands for the deck's path as passed to the loader. The driver tests
// (tests/decks/CMakeLists.txt) read the same header, so one file pins the
// message for the library and for `examoe --check`.
#include <gtest/gtest.h>

#include <Kokkos_Macros.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "core/deck/config.hpp"
#include "core/deck/did_you_mean.hpp"
#include "core/deck/validate.hpp"
#include "core/error.hpp"

namespace {

namespace fs = std::filesystem;
using exa::deck::Config;
using exa::deck::Origin;
using exa::deck::Type;
using exa::deck::Value;

const std::string kSource = EXAMOE_SOURCE_DIR;

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::vector<std::string> input_decks() {
  std::vector<std::string> decks;
  for (const auto& e : fs::directory_iterator(kSource + "/input")) {
    if (e.path().extension() == ".toml") decks.push_back(e.path().string());
  }
  std::sort(decks.begin(), decks.end());
  return decks;
}

// The world sizes a shipped deck runs on: input/federated.toml's three
// sites need a multiple of three ranks.
std::vector<int> deck_ranks(const std::string& path) {
  if (path.find("/federated.toml") != std::string::npos) return {3, 6};
  return {1, 2, 4};
}

// The message Config::load throws, or "" when the deck loads.
std::string load_error(const std::string& path, const std::vector<std::string>& sets, int ranks) {
  try {
    Config::load(path, sets, ranks);
  } catch (const exa::Error& e) {
    return e.what();
  }
  return "";
}
std::string text_error(const std::string& text, const std::vector<std::string>& sets = {}, int ranks = 1) {
  try {
    Config::from_text(text, "mem.toml", sets, ranks);
  } catch (const exa::Error& e) {
    return e.what();
  }
  return "";
}

// ---------------------------------------------------------------- schema

TEST(DeckSchema, IsWellFormed) {
  std::set<std::string> names;
  std::size_t section = 0;
  for (const auto& k : exa::deck::schema()) {
    EXPECT_TRUE(names.insert(k.name()).second) << "duplicate key " << k.name();
    EXPECT_FALSE(k.doc.empty()) << k.name();
    EXPECT_EQ(exa::deck::type_of(k.def), k.type) << k.name() << ": default of the wrong type";
    EXPECT_FALSE(exa::deck::value_problem(k, k.def).has_value()) << k.name() << ": default out of range";
    // Keys are grouped by section, in sections() order (the dump relies on it).
    while (section < exa::deck::sections().size() && exa::deck::sections()[section] != k.section) ++section;
    ASSERT_LT(section, exa::deck::sections().size()) << k.name() << ": section missing or out of order";
  }
  EXPECT_EQ(exa::deck::sections().size(), 17u);
  for (const auto& s : exa::deck::sections()) {
    EXPECT_TRUE(std::any_of(exa::deck::schema().begin(), exa::deck::schema().end(),
                            [&](const auto& k) { return k.section == s; }))
        << "[" << s << "] has no keys";
  }
}

TEST(DeckSchema, ContractDefaults) {
  // docs/architecture.md fixes these; the model, parallel and data code rely on them.
  const Config c = Config::from_text("", "mem.toml", {}, 1);
  EXPECT_EQ(c.get_int("model.vocab_size"), 256);
  EXPECT_EQ(c.setting("model.n_kv_heads").spec->def, Value{std::int64_t{0}});
  EXPECT_DOUBLE_EQ(c.get_float("model.norm_eps"), 1e-5);
  EXPECT_DOUBLE_EQ(c.get_float("model.rope_theta"), 10000.0);
  EXPECT_FALSE(c.get_bool("model.tie_embeddings"));
  EXPECT_DOUBLE_EQ(c.get_float("model.init_std"), 0.02);
  EXPECT_EQ(c.get_int("moe.moe_every"), 1);
  EXPECT_EQ(c.get_int("moe.n_shared_experts"), 0);
  EXPECT_DOUBLE_EQ(c.get_float("moe.capacity_factor"), 0.0);
  EXPECT_TRUE(c.get_bool("moe.norm_topk"));
  EXPECT_DOUBLE_EQ(c.get_float("moe.aux_coef"), 0.01);
  EXPECT_DOUBLE_EQ(c.get_float("moe.z_coef"), 0.001);
  EXPECT_EQ(c.setting("parallel.dp").spec->def, Value{std::int64_t{0}});
  EXPECT_EQ(c.get_int("parallel.zero"), 0);
  EXPECT_EQ(c.get_int("parallel.ranks_per_node"), 0);
  EXPECT_FALSE(c.get_bool("parallel.hierarchical"));
  EXPECT_EQ(c.get_string("optim.schedule"), "cosine");
  EXPECT_EQ(c.get_string("data.path"), "data/corpus.txt");
  EXPECT_EQ(c.get_string("data.format"), "text");
  EXPECT_EQ(c.get_string("precision.compute"), "fp32");
  EXPECT_EQ(c.get_string("comm.compression"), "none");
  EXPECT_EQ(exa::deck::find_key("parallel.zero")->hi, 3.0);
  EXPECT_EQ(exa::deck::find_key("optim.schedule")->allowed,
            (std::vector<std::string>{"cosine", "linear", "constant"}));
}

TEST(DeckSchema, DidYouMean) {
  EXPECT_EQ(exa::deck::edit_distance("d_modle", "d_model"), 1u);  // transposition is one edit
  EXPECT_EQ(exa::deck::edit_distance("D_MODEL", "d_model"), 0u);
  EXPECT_EQ(exa::deck::edit_distance("", "abc"), 3u);
  EXPECT_EQ(exa::deck::did_you_mean("stpes", {"seed", "steps"}), "steps");
  EXPECT_EQ(exa::deck::did_you_mean("learning_rate", {"lr", "min_lr"}), "");
}

// ---------------------------------------------------------------- loading

TEST(DeckLoad, EmptyDeckGivesDefaultsAndDerivedValues) {
  const Config c = Config::from_text("", "mem.toml", {}, 4);
  for (const auto& s : c.settings()) {
    EXPECT_EQ(s.origin, Origin::Default) << s.spec->name();
    if (s.derived.empty()) {
      EXPECT_EQ(s.value, s.spec->def) << s.spec->name();
    }
  }
  EXPECT_EQ(c.get_int("parallel.dp"), 4);  // world 4 / (pp*cp*tp = 1)
  EXPECT_EQ(c.get_int("model.n_kv_heads"), c.get_int("model.n_heads"));
  EXPECT_EQ(c.get_int("parallel.microbatches"), c.get_int("train.grad_accum"));
  EXPECT_EQ(c.get_int("output.metrics_every"), c.get_int("train.log_every"));
  EXPECT_EQ(c.setting("parallel.dp").derived, "0 -> world size 4 / (pp*cp*tp = 1)");
  EXPECT_EQ(c.world_size(), 4);
}

TEST(DeckLoad, TypedGettersOnTinyDeck) {
  const std::string path = kSource + "/input/tiny.toml";
  const Config c = Config::load(path, {}, 1);
  EXPECT_EQ(c.get_int("model.d_model"), 128);
  EXPECT_EQ(c.get_int("model.n_layers"), 4);
  EXPECT_EQ(c.get_int("moe.n_experts"), 8);
  EXPECT_EQ(c.get_int("train.micro_batch"), 8);
  EXPECT_DOUBLE_EQ(c.get_float("optim.lr"), 3e-3);
  EXPECT_EQ(c.get_string("memory.recompute"), "none");
  EXPECT_EQ(c.get_string("optim.schedule"), "cosine");
  EXPECT_EQ(c.deck_text(), read_text(path));  // kept verbatim for checkpoints
  EXPECT_EQ(c.deck_path(), path);
}

TEST(DeckLoad, FileValuesRecordTheirLine) {
  const Config c = Config::from_text("# comment\n[model]\n\nd_model = 64\n[optim]\nlr = 1\n", "mem.toml", {}, 1);
  EXPECT_EQ(c.setting("model.d_model").origin, Origin::File);
  EXPECT_EQ(c.setting("model.d_model").line, 4);
  EXPECT_EQ(c.setting("optim.lr").line, 6);
  EXPECT_DOUBLE_EQ(c.get_float("optim.lr"), 1.0);  // an integer is a fine float
  EXPECT_EQ(c.setting("model.n_layers").origin, Origin::Default);
}

TEST(DeckLoad, WrongGetterIsAnInternalError) {
  const Config c = Config::from_text("", "mem.toml", {}, 1);
  EXPECT_THROW(c.get_int("optim.lr"), exa::Error);
  EXPECT_THROW(c.get_string("model.d_model"), exa::Error);
  EXPECT_THROW(c.get_int("model.nope"), exa::Error);
  EXPECT_THROW(c.get_int("nodot"), exa::Error);
  try {
    c.get_bool("train.steps");
  } catch (const exa::Error& e) {
    EXPECT_NE(std::string(e.what()).find("internal error"), std::string::npos) << e.what();
  }
}

TEST(DeckLoad, OverridesBeatTheDeck) {
  const Config c = Config::load(kSource + "/input/tiny.toml",
                                {"train.steps=7", "optim.schedule=linear", "model.tie_embeddings=true",
                                 "optim.lr=1", "data.path=\"my corpus.txt\"", " train.seed = 9 "},
                                1);
  EXPECT_EQ(c.get_int("train.steps"), 7);
  EXPECT_EQ(c.get_string("optim.schedule"), "linear");
  EXPECT_TRUE(c.get_bool("model.tie_embeddings"));
  EXPECT_DOUBLE_EQ(c.get_float("optim.lr"), 1.0);
  EXPECT_EQ(c.get_string("data.path"), "my corpus.txt");
  EXPECT_EQ(c.get_int("train.seed"), 9);
  EXPECT_EQ(c.setting("train.steps").origin, Origin::Override);
  EXPECT_EQ(c.setting("train.steps").override, "train.steps=7");
  EXPECT_EQ(c.overrides().size(), 6u);
}

TEST(DeckLoad, LastOverrideWins) {
  const Config c = Config::from_text("", "mem.toml", {"train.steps=5", "train.steps=6"}, 1);
  EXPECT_EQ(c.get_int("train.steps"), 6);
  EXPECT_EQ(c.setting("train.steps").override, "train.steps=6");
}

TEST(DeckLoad, OverrideCanRescueABadDeckValue) {
  // Ranges are checked on final values, so --set can repair a deck in place.
  const std::string deck = "[optim]\nbeta1 = 2.0\n";
  EXPECT_EQ(text_error(deck), "mem.toml:2: optim.beta1 = 2.0 is out of range; it must be in [0, 1) (AdamW "
                              "first-moment decay)");
  EXPECT_EQ(text_error(deck, {"optim.beta1=0.8"}), "");
}

TEST(DeckLoad, NamesAndTypesAreCheckedBeforeRangesAndConsistency) {
  // d_model % n_heads and beta1 are both wrong, but the misspelt key is reported.
  const std::string deck = "[model]\nd_model = 100\nn_heads = 3\n[optim]\nbeta1 = 2.0\n[train]\nstepz = 1\n";
  EXPECT_EQ(text_error(deck), "mem.toml:7: unknown key 'stepz' in [train]; did you mean 'steps'?");
  // An override's name and type are checked before any range...
  EXPECT_EQ(text_error("[optim]\nbeta1 = 2.0\n", {"train.steps=x"}),
            "--set train.steps=x: train.steps must be an integer, not \"x\"; write e.g. --set train.steps=1000");
  // ...and ranges before consistency.
  EXPECT_EQ(text_error("[model]\nd_model = 100\nn_heads = 3\n[optim]\nbeta1 = 2.0\n"),
            "mem.toml:5: optim.beta1 = 2.0 is out of range; it must be in [0, 1) (AdamW first-moment decay)");
}

TEST(DeckLoad, UnreadableDeck) {
  const std::string path = kSource + "/input/no_such_deck.toml";
  EXPECT_EQ(load_error(path, {}, 1), path + ": cannot open the input deck (No such file or directory); check the path");
  EXPECT_EQ(load_error(kSource + "/input", {}, 1),
            kSource + "/input: is a directory, not an input deck; give a .toml file such as input/tiny.toml");
  EXPECT_THROW(Config::from_text("", "mem.toml", {}, 0), exa::Error);
}

// ---------------------------------------------------------------- output

// The dump line that starts with `prefix` ("steps = 7 "), or "".
std::string dump_line(const std::string& dump, const std::string& prefix) {
  std::istringstream in(dump);
  for (std::string line; std::getline(in, line);) {
    if (line.compare(0, prefix.size(), prefix) == 0) return line;
  }
  return "";
}
bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

TEST(DeckDump, TomlMarksOriginsAndLoadsBack) {
  for (const auto& path : input_decks()) {
    const int ranks = deck_ranks(path)[1];
    const Config c = Config::load(path, {"train.steps=70"}, ranks);
    const std::string dump = c.to_toml();
    const Config back = Config::from_text(dump, "dump.toml", {}, ranks);
    for (std::size_t i = 0; i < c.settings().size(); ++i) {
      EXPECT_EQ(back.settings()[i].value, c.settings()[i].value) << path << " " << c.settings()[i].spec->name();
    }
    EXPECT_TRUE(ends_with(dump_line(dump, "steps = 70 "), "  # --set train.steps=70")) << dump;
    EXPECT_NE(dump.find("# deck: " + path + "\n# ranks: " + std::to_string(ranks) + "\n"), std::string::npos) << dump;
  }
  // Line numbers come from the Config (FileValuesRecordTheirLine checks them),
  // so editing tiny.toml's comments does not break this test.
  const Config c = Config::from_text("[model]\nd_model = 128\n[parallel]\ndp = 0\n[optim]\nlr = 3e-3\n", "m.toml", {}, 2);
  const std::string dump = c.to_toml();
  EXPECT_TRUE(ends_with(dump_line(dump, "d_model = 128 "), "  # deck line 2")) << dump;
  EXPECT_TRUE(ends_with(dump_line(dump, "seed = 1234 "), "  # default")) << dump;
  EXPECT_TRUE(ends_with(dump_line(dump, "dp = 2 "), "  # deck line 4; 0 -> world size 2 / (pp*cp*tp = 1)")) << dump;
  EXPECT_TRUE(ends_with(dump_line(dump, "n_kv_heads = 4 "), "  # default; 0 -> model.n_heads")) << dump;
  EXPECT_TRUE(ends_with(dump_line(dump, "lr = 0.003 "), "  # deck line 6")) << dump;
  EXPECT_TRUE(ends_with(dump_line(dump, "rope_theta = 10000.0 "), "  # default")) << dump;  // floats stay floats
}

TEST(DeckDump, Json) {
  const Config c = Config::load(kSource + "/input/tiny.toml", {}, 1);
  const auto j = nlohmann::json::parse(c.to_json());
  EXPECT_EQ(j.at("model").at("d_model").get<int>(), 128);
  EXPECT_TRUE(j.at("optim").at("lr").is_number_float());
  EXPECT_DOUBLE_EQ(j.at("optim").at("lr").get<double>(), 3e-3);
  EXPECT_EQ(j.at("data").at("path").get<std::string>(), "data/corpus.txt");
  EXPECT_EQ(j.at("memory").at("recompute").get<std::string>(), "none");
  EXPECT_EQ(j.size(), exa::deck::sections().size());
  EXPECT_EQ(c.to_json().find('\n'), std::string::npos);  // compact by default: one JSON line
}

// ---------------------------------------------------------------- shipped decks

TEST(InputDecks, EveryDeckValidates) {
  const auto decks = input_decks();
  EXPECT_GE(decks.size(), 3u);
  for (const auto& path : decks) {
    for (const int ranks : deck_ranks(path)) EXPECT_EQ(load_error(path, {}, ranks), "") << path << " on " << ranks;
  }
}

TEST(InputDecks, FullDeckSetsEveryKey) {
  const Config c = Config::load(kSource + "/input/full.toml", {}, 1);
  for (const auto& s : c.settings()) EXPECT_EQ(s.origin, Origin::File) << s.spec->name() << " missing from full.toml";
  EXPECT_EQ(c.get_int("model.n_kv_heads"), 2);
  EXPECT_TRUE(c.get_bool("model.tie_embeddings"));
  EXPECT_EQ(c.get_int("moe.moe_every"), 2);
  EXPECT_EQ(c.get_int("moe.n_shared_experts"), 1);
  EXPECT_GT(c.get_float("moe.capacity_factor"), 0.0);
}

// ---------------------------------------------------------------- bad decks

struct BadDeck {
  std::string name, path, expect;
  int ranks = 1;
  std::vector<std::string> sets;
};
void PrintTo(const BadDeck& d, std::ostream* os) { *os << d.name; }

std::string header_value(const std::string& line, const std::string& tag) {
  return line.compare(0, tag.size(), tag) == 0 ? line.substr(tag.size()) : "";
}

std::vector<BadDeck> bad_decks() {
  std::vector<BadDeck> decks;
  for (const auto& e : fs::directory_iterator(kSource + "/tests/decks/bad")) {
    if (e.path().extension() != ".toml") continue;
    BadDeck d;
    d.name = e.path().stem().string();
    d.path = e.path().string();
    std::ifstream in(d.path);
    for (std::string line; std::getline(in, line);) {
      if (auto v = header_value(line, "# expect: "); !v.empty()) d.expect = v;
      if (auto v = header_value(line, "# ranks: "); !v.empty()) d.ranks = std::stoi(v);
      if (auto v = header_value(line, "# set: "); !v.empty()) d.sets.push_back(v);
    }
    const auto at = d.expect.find("{deck}");
    if (at != std::string::npos) d.expect.replace(at, 6, d.path);
    decks.push_back(d);
  }
  std::sort(decks.begin(), decks.end(), [](const BadDeck& a, const BadDeck& b) { return a.name < b.name; });
  return decks;
}

class BadDeckTest : public ::testing::TestWithParam<BadDeck> {};

TEST_P(BadDeckTest, StopsWithItsExactMessage) {
  const BadDeck& d = GetParam();
  ASSERT_FALSE(d.expect.empty()) << d.path << " has no '# expect: ' line";
  EXPECT_EQ(load_error(d.path, d.sets, d.ranks), d.expect);
}

INSTANTIATE_TEST_SUITE_P(Bad, BadDeckTest, ::testing::ValuesIn(bad_decks()),
                         [](const ::testing::TestParamInfo<BadDeck>& p) { return p.param.name; });

TEST(BadDecks, CoverTheIssue) { EXPECT_GE(bad_decks().size(), 12u); }

}  // namespace

namespace {

bool has(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

}  // namespace

// The load's own checks read keys; only what runs afterwards counts, on the
// Config or any copy of it.
TEST(DeckReads, UnreadKeysFollowTheReadsOfEveryCopy) {
  const Config c = Config::load(kSource + "/input/tiny.toml", {}, 1);
  const auto before = c.unread_keys();
  EXPECT_TRUE(has(before, "model.d_model"));
  EXPECT_TRUE(has(before, "parallel.tp"));
  EXPECT_TRUE(has(before, "memory.offload_experts"));
  const Config copy = c;  // NOLINT: the copy is the point
  (void)copy.get_int("model.d_model");
  (void)c.get_string("optim.schedule");
  const auto after = c.unread_keys();
  EXPECT_FALSE(has(after, "model.d_model"));
  EXPECT_FALSE(has(after, "optim.schedule"));
  EXPECT_EQ(after.size() + 2, before.size());
}

// A value the build does not run is refused where it is set, and the key
// accepted at its default.
TEST(DeckReads, NotBuiltValuesAreRefusedWhereSet) {
  const std::string tiny = kSource + "/input/tiny.toml";
  EXPECT_EQ(load_error(tiny, {"lora.init=zero_b"}, 1), "");
  EXPECT_NE(load_error(tiny, {"lora.init=pissa"}, 1)
                .find("--set lora.init=pissa: lora.init = \"pissa\" is not available in this build yet; set "
                      "lora.init = \"zero_b\""),
            std::string::npos);
  EXPECT_NE(exa::deck::schema_markdown().find("not built yet: \"pissa\""), std::string::npos);
  // A CUDA-only value: the reference says so in every build, and a build
  // without CUDA refuses it, saying why.
  EXPECT_NE(exa::deck::schema_markdown().find("CUDA builds only: \"tf32\""), std::string::npos);
  EXPECT_EQ(load_error(tiny, {"precision.matmul=fp32"}, 1), "");
#if !defined(KOKKOS_ENABLE_CUDA)
  EXPECT_NE(load_error(tiny, {"precision.matmul=tf32"}, 1)
                .find("--set precision.matmul=tf32: precision.matmul = \"tf32\" needs a CUDA build (TF32 is the "
                      "arithmetic of a GPU's tensor cores (cuBLAS)), and this build has none; set precision.matmul = "
                      "\"fp32\""),
            std::string::npos);
#endif
}
