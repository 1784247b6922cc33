#include "inference/evaluate_checkpoint.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <vector>

#include "comm/mpi_env.hpp"
#include "core/error.hpp"
#include "core/profiling.hpp"
#include "io/token_h5.hpp"
#include "io/token_shard.hpp"
#include "io/token_text.hpp"
#include "io/tokenizer.hpp"
#include "inference/checkpoint_model.hpp"
#include "inference/pipeline_ranks.hpp"
#include "kernels/matmul_precision.hpp"
#include "train/deck_dataset.hpp"

namespace exa::inference {

namespace fs = std::filesystem;

namespace {

constexpr char kHdf5Signature[8] = {'\x89', 'H', 'D', 'F', '\r', '\n', '\x1a', '\n'};

enum class FileKind { text, shard, hdf5 };

bool starts_with_bytes(const std::string& path, const char* magic, std::size_t n) {
  std::ifstream f(path, std::ios::binary);
  std::vector<char> head(n, 0);
  f.read(head.data(), static_cast<std::streamsize>(n));
  return f.gcount() == static_cast<std::streamsize>(n) && std::memcmp(head.data(), magic, n) == 0;
}

FileKind kind_of(const std::string& path) {
  std::string ext = fs::path(path).extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  if (ext == ".tok") return FileKind::shard;
  if (ext == ".h5" || ext == ".hdf5") return FileKind::hdf5;
  if (starts_with_bytes(path, io::kShardMagic, sizeof io::kShardMagic)) return FileKind::shard;
  if (starts_with_bytes(path, kHdf5Signature, sizeof kHdf5Signature)) return FileKind::hdf5;
  return FileKind::text;
}

// A text file through a SentencePiece model: each document's tokens and the
// end-of-sequence token, as examoe-tokenize encode writes a shard.
io::TokenStore encode_text(const std::string& path, const std::string& model) {
  const io::Tokenizer tok(model);
  std::ifstream in(path, std::ios::binary);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto ids = std::make_shared<std::vector<std::uint32_t>>();
  for (const auto& d : io::split_documents(text)) {
    for (const auto id : tok.encode(d)) ids->push_back(id);
    if (tok.eos_id() >= 0) ids->push_back(std::uint32_t(tok.eos_id()));
  }
  // Four little-endian bytes per token (the store's widest width).
  auto bytes = std::make_shared<std::vector<unsigned char>>(ids->size() * 4);
  for (std::size_t k = 0; k < ids->size(); ++k)
    for (int b = 0; b < 4; ++b) (*bytes)[4 * k + std::size_t(b)] = static_cast<unsigned char>((*ids)[k] >> (8 * b));
  io::TokenStore t(std::shared_ptr<const unsigned char>(bytes, bytes->data()), bytes->data(), 4,
                   std::int64_t(ids->size()), tok.vocab_size(), path);
  t.validate("encode it with the checkpoint's own tokenizer");
  return t;
}


}  // namespace

io::TokenStore read_token_file(const std::string& path, std::int64_t vocab, const std::string& h5_dataset,
                               const std::string& tokenizer) {
  const std::string kinds =
      "pass a token shard (.tok, made by `examoe convert --text FILE --out FILE.tok`), an HDF5 file (.h5) with "
      "a 1-D dataset \"tokens\", or a text file";
  EXA_REQUIRE(!path.empty(), "no tokens file given: {}", kinds);
  std::error_code ec;
  const auto st = fs::status(path, ec);
  EXA_REQUIRE(fs::exists(st), "tokens file {} does not exist; {}", path, kinds);
  EXA_REQUIRE(fs::is_regular_file(st), "tokens file {} is not a regular file; {}", path, kinds);
  EXA_REQUIRE(fs::file_size(path, ec) > 0, "tokens file {} is empty; {}", path, kinds);
  io::TokenStore t;
  switch (kind_of(path)) {
    case FileKind::shard: t = io::read_shard(path); break;
    case FileKind::hdf5: t = io::read_h5_tokens(path, h5_dataset, vocab); break;
    case FileKind::text:
      t = tokenizer.empty() ? io::read_text_tokens(path) : encode_text(path, tokenizer);
      break;
  }
  EXA_REQUIRE(t.vocab() <= vocab,
              "tokens file {} has vocabulary size {} but the checkpoint's model has model.vocab_size = {}; "
              "evaluate it with a model trained on the same tokenisation",
              path, t.vocab(), vocab);
  return t;
}

EvalReport evaluate_checkpoint(const EvalOptions& opt, MPI_Comm comm) {
  EXA_REQUIRE(opt.batch >= 0, "--batch must be at least 1, not {}", opt.batch);
  EXA_REQUIRE(opt.seq_len >= 0, "--seq-len must be at least 1, not {}", opt.seq_len);
  // --pp P: each replica's stages pass every batch's hidden state along;
  // a stage goes on to its next batch once the previous one has left, so
  // the stages work on successive batches at once.
  PipelineRanks ranks(comm, opt.pp);
  CheckpointModel m(opt.checkpoint, comm, false, ranks.stage(), ranks.stages());
  ranks.use_transport(comm::backend_named(m.config().get_string("comm.backend")));
  const auto& mc = m.model_config();
  const std::int64_t T = opt.seq_len > 0 ? opt.seq_len : mc.seq_len;
  const std::int64_t B = opt.batch > 0 ? opt.batch : std::max<std::int64_t>(1, m.config().get_int("train.micro_batch"));
  // A text file of a subword model goes through its tokenizer (--tokenizer,
  // else the checkpoint deck's data.tokenizer); bytes are tokens only for a
  // byte-level model.
  const std::string tok_path = opt.tokenizer.empty() ? train::deck_tokenizer_path(m.config()) : opt.tokenizer;
  EXA_REQUIRE(kind_of(opt.tokens_file) != FileKind::text || !tok_path.empty() || mc.vocab_size == io::kByteVocab,
              "tokens file {} is text, which reads as bytes, but checkpoint {} has model.vocab_size = {}: pass "
              "--tokenizer MODEL (the SentencePiece model it was trained with), or a shard",
              opt.tokens_file, m.directory(), mc.vocab_size);
  const io::TokenStore tokens = read_token_file(opt.tokens_file, mc.vocab_size, "tokens",
                                                kind_of(opt.tokens_file) == FileKind::text ? tok_path : "");
  const std::int64_t N = tokens.size();
  EXA_REQUIRE(N >= T + 1,
              "tokens file {} holds {} tokens, too few for one window of seq_len {}: evaluation needs at least {} "
              "tokens (seq_len + 1); pass a longer file or a smaller --seq-len",
              opt.tokens_file, N, T, T + 1);

  const std::int64_t full = (N - 1) / T, tail = (N - 1) % T;
  const std::int64_t W = full + (tail > 0 ? 1 : 0);
  const std::int64_t P = ranks.replicas(), r = ranks.replica();
  const std::int64_t lo = W * r / P, hi = W * (r + 1) / P;

  using Tok = Kokkos::View<std::int32_t**, Layout, Device>;
  Tok in, tg;
  View1<float> ce;
  View2<float> hidden;
  double sum = 0;
  std::int64_t count = 0;
  auto& model = m.model();
  auto run_batch = [&](std::int64_t first, std::int64_t nb, std::int64_t len) {
    if (std::int64_t(in.extent(0)) != nb || std::int64_t(in.extent(1)) != len) {
      in = Tok("exa::eval::inputs", nb, len);
      tg = Tok("exa::eval::targets", nb, len);
      ce = View1<float>("exa::eval::ce", nb * len);
      if (!ranks.first()) hidden = View2<float>("exa::eval::hidden", nb * len, mc.d_model);
    }
    if (ranks.first() || ranks.last()) {
      auto hi_in = Kokkos::create_mirror_view(in);
      auto hi_tg = Kokkos::create_mirror_view(tg);
      for (std::int64_t b = 0; b < nb; ++b) {
        const std::int64_t start = (first + b) * T;
        tokens.copy(start, len, &hi_in(b, 0));
        tokens.copy(start + 1, len, &hi_tg(b, 0));
      }
      Kokkos::deep_copy(in, hi_in);
      Kokkos::deep_copy(tg, hi_tg);
    }
    const auto x = ranks.input(in, hidden, {nb, len});
    if (ranks.last()) {
      const auto s = model.eval(m.weights(), x, tg, ce);
      sum += s.loss_sum;
      count += s.n_valid;
    } else {
      ranks.forward_and_send(model, m.weights(), x);
    }
  };
  {
    ScopedRegion region("eval", true);
    const std::int64_t full_hi = std::min(hi, full);
    for (std::int64_t w = lo; w < full_hi; w += B) run_batch(w, std::min(B, full_hi - w), T);
    if (tail > 0 && lo <= full && full < hi) run_batch(full, 1, tail);
  }
  // Only the last stages counted.
  MPI_Allreduce(MPI_IN_PLACE, &sum, 1, MPI_DOUBLE, MPI_SUM, comm);
  MPI_Allreduce(MPI_IN_PLACE, &count, 1, MPI_INT64_T, MPI_SUM, comm);
  EXA_ASSERT(count == N - 1);

  EvalReport rep;
  rep.checkpoint = m.directory();
  rep.step = m.meta().step;
  rep.tokens_file = opt.tokens_file;
  rep.tokens = N;
  rep.predicted = count;
  rep.windows = W;
  rep.seq_len = T;
  rep.batch = B;
  rep.ce_sum = sum;
  rep.ce_nats_per_token = sum / double(count);
  rep.ppl = std::exp(rep.ce_nats_per_token);
  rep.transport = opt.pp > 1 ? ranks.transport() : "none";
  return rep;
}

std::string to_json_line(const EvalReport& r) {
  nlohmann::ordered_json j;
  j["checkpoint"] = r.checkpoint;
  j["tokens_file"] = r.tokens_file;
  j["tokens"] = r.tokens;
  j["windows"] = r.windows;
  j["seq_len"] = r.seq_len;
  j["ce_nats_per_token"] = r.ce_nats_per_token;
  j["ppl"] = r.ppl;
  j["step"] = r.step;
  j["predicted"] = r.predicted;
  j["batch"] = r.batch;
  // The products' precision the evaluation ran in (the training run's, or
  // fp32 where this build cannot: checkpoint_model.cpp).
  j["matmuls"] = kernels::to_string(kernels::matmul_precision());
  j["transport"] = r.transport;  // between the stages under --pp
  return j.dump();
}

}  // namespace exa::inference
