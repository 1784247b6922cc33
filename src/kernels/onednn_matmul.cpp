#include "kernels/onednn_matmul.hpp"

#include <dlfcn.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/bf16.hpp"
#include "core/fp16.hpp"
#include "core/error.hpp"
#include "core/thread_check.hpp"

#if EXAMOE_HAVE_ONEDNN
#include <dnnl.hpp>
#endif

namespace exa::kernels {

const char* onednn_missing() {
  return "bf16 and fp16 products need oneDNN, which this build does not have: install it (Debian: libdnnl-dev; "
         "Spack: examoe+onednn) and reconfigure with -DEXAMOE_ENABLE_ONEDNN=ON";
}

#if EXAMOE_HAVE_ONEDNN

namespace {

using dt = dnnl::memory::data_type;

dnnl::engine& cpu_engine() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

std::uint32_t bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

// A primitive per (transposes, alpha, beta), with the shapes and ldc given
// at execution (oneDNN's runtime dimensions): the expert products change
// their row counts every step, and a primitive per exact shape would build
// (about 0.25 ms each) and keep one for every count ever seen. Measured on
// the model's shapes (AVX512-BF16, one core), the runtime-shape kernel
// runs at 0.8-1.05x the fixed-shape one.
struct Key {
  bool ta, tb;
  std::uint32_t alpha, beta;
  dt type;  // of the packed operands: bf16, or f32 holding fp16 values
  bool operator==(const Key& o) const {
    return ta == o.ta && tb == o.tb && alpha == o.alpha && beta == o.beta && type == o.type;
  }
};

struct KeyHash {
  std::size_t operator()(const Key& key) const {
    return (std::size_t(key.alpha) * 1000003u ^ std::size_t(key.beta)) * 4u + std::size_t(key.ta) * 2u +
           std::size_t(key.tb) + 16u * std::size_t(key.type);
  }
};

using dims = dnnl::memory::dims;

constexpr dnnl::memory::dim R = DNNL_RUNTIME_DIM_VAL;

// op(A) is rows x cols from a packed A stored [rows,cols] (or [cols,rows]
// when transposed); likewise op(B). R for a size leaves it to execution.
// ld: the stored row stride (R, or 0 for packed).
dnnl::memory::desc operand(dt type, dnnl::memory::dim rows, dnnl::memory::dim cols, bool trans,
                           dnnl::memory::dim ld = 0) {
  if (ld == 0) ld = trans ? rows : cols;
  return dnnl::memory::desc(dims{rows, cols}, type, trans ? dims{1, ld} : dims{ld, 1});
}

dnnl::memory::desc result(dnnl::memory::dim rows, dnnl::memory::dim cols, dnnl::memory::dim ld) {
  return dnnl::memory::desc(dims{rows, cols}, dt::f32, dims{ld, 1});
}

dnnl::matmul::primitive_desc make_pd(const Key& key) {
  const dnnl::memory::desc a = operand(key.type, R, R, key.ta);
  const dnnl::memory::desc b = operand(key.type, R, R, key.tb);
  const dnnl::memory::desc c = result(R, R, R);
  dnnl::primitive_attr attr;
  float alpha, beta;
  std::memcpy(&alpha, &key.alpha, sizeof alpha);
  std::memcpy(&beta, &key.beta, sizeof beta);
  if (alpha != 1.0f) attr.set_output_scales(0, {alpha});
  if (beta != 0.0f) {
    dnnl::post_ops ops;
    ops.append_sum(beta);
    attr.set_post_ops(ops);
  }
  return dnnl::matmul::primitive_desc(dnnl::matmul::desc(a, b, c), attr, cpu_engine());
}

// Each thread's stream, primitives and bf16 operand scratch.
struct ThreadState {
  dnnl::stream stream{cpu_engine()};
  std::unordered_map<Key, dnnl::matmul, KeyHash> cache;
  std::vector<bf16> a, b;
  std::vector<float> a16, b16;  // fp16 (or bf16) values held as fp32
};

ThreadState& thread_state() {
  thread_local ThreadState s;
  return s;
}

// Packs the rows x cols fp32 matrix at p (row stride ld) into out, each
// value rounded: to bf16, or, held in fp32, to the value it rounds to.
template <class In, class Out, class Round>
void pack(const In* p, index_t rows, index_t cols, index_t ld, std::vector<Out>& out, Round round) {
  out.resize(std::size_t(rows) * std::size_t(cols));
  Out* o = out.data();
  for (index_t r = 0; r < rows; ++r) {
    const In* src = p + r * ld;
    Out* dst = o + r * cols;
    for (index_t c = 0; c < cols; ++c) dst[c] = round(float(src[c]));
  }
}

// The operand as the product reads it: a bf16 operand for bf16 kernels
// as it is stored (ld its row stride); else packed into `b16` (bf16
// kernels) or `f32` (values held in fp32), rounded by `round` (exact for
// a bf16 operand).
template <class Round>
std::pair<const void*, index_t> prepare(const MatmulOperand& x, index_t rows, index_t cols, bool bf16_kernels_on,
                                        std::vector<bf16>& b16, std::vector<float>& f32, Round round) {
  if (x.bf16 && bf16_kernels_on) return {x.data, x.ld};
  if (bf16_kernels_on) {
    pack(static_cast<const float*>(x.data), rows, cols, x.ld, b16, [](float v) { return to_bf16(v); });
    return {b16.data(), 0};
  }
  if (x.bf16)
    pack(static_cast<const bf16*>(x.data), rows, cols, x.ld, f32, [](float v) { return v; });
  else
    pack(static_cast<const float*>(x.data), rows, cols, x.ld, f32, round);
  return {f32.data(), 0};
}

// Whether oneDNN has bf16 matmul kernels for this CPU: 2.6 has them from
// AVX512 on (converting where there are no bf16 instructions), none below.
// Without them the bf16 values go to its fp32 kernels, held as fp32: the
// same products (bf16 x bf16 is exact in fp32), at fp32 speed.
bool bf16_kernels() {
  static const bool ok = [] {
    try {
      make_pd(Key{false, true, bits(1.0f), bits(0.0f), dt::bf16});
      return true;
    } catch (const dnnl::error&) {
      return false;
    }
  }();
  return ok;
}

const char* isa_name() {
  using isa = dnnl::cpu_isa;
  switch (dnnl::get_effective_cpu_isa()) {
    case isa::avx512_core_amx: return "AMX";
    case isa::avx512_core_bf16: return "AVX512-BF16";
    case isa::avx512_core_vnni: return "AVX512-VNNI";
    case isa::avx512_core: return "AVX512";
    case isa::avx2_vnni: return "AVX2-VNNI";
    case isa::avx2: return "AVX2";
    default: return "pre-AVX2";
  }
}

}  // namespace

bool onednn_available() { return true; }

void onednn_gemm(MatmulPrecision p, bool ta, bool tb, index_t m, index_t n, index_t k, float alpha, const float* A,
                 index_t lda, const float* B, index_t ldb, float beta, float* C, index_t ldc) {
  onednn_gemm(p, ta, tb, m, n, k, alpha, MatmulOperand{A, lda, false}, MatmulOperand{B, ldb, false}, beta, C, ldc);
}

void onednn_gemm(MatmulPrecision p, bool ta, bool tb, index_t m, index_t n, index_t k, float alpha, MatmulOperand A,
                 MatmulOperand B, float beta, float* C, index_t ldc) {
  EXA_REQUIRE(p != MatmulPrecision::fp32, "onednn_gemm: the fp32 products go to the BLAS, not here");
  EXA_REQUIRE(p == MatmulPrecision::bf16 || (!A.bf16 && !B.bf16),
              "onednn_gemm: a tensor stored in bf16 is an operand of an fp16 product; bf16 storage goes with bf16 "
              "products only");
  if (m == 0 || n == 0) return;
  if (k == 0 || alpha == 0.0f) {
    for (index_t i = 0; i < m; ++i)
      for (index_t j = 0; j < n; ++j) C[i * ldc + j] = beta == 0.0f ? 0.0f : beta * C[i * ldc + j];
    return;
  }
  ThreadState& s = thread_state();
  const bool on_bf16 = p == MatmulPrecision::bf16 && bf16_kernels();
  const auto round = [p](float x) { return p == MatmulPrecision::fp16 ? round_to_fp16(x) : to_float(to_bf16(x)); };
  const auto [pa, lda] = prepare(A, ta ? k : m, ta ? m : k, on_bf16, s.a, s.a16, round);
  const auto [pb, ldb] = prepare(B, tb ? n : k, tb ? k : n, on_bf16, s.b, s.b16, round);
  const dt type = on_bf16 ? dt::bf16 : dt::f32;
  const Key key{ta, tb, bits(alpha), bits(beta), type};
  auto it = s.cache.find(key);
  if (it == s.cache.end()) {
    try {
      it = s.cache.emplace(key, dnnl::matmul(make_pd(key))).first;
    } catch (const dnnl::error& e) {
      throw Error(fmt::format("oneDNN cannot build a {} matmul on this CPU ({}): set precision.compute = \"fp32\"",
                              to_string(p), e.what()));
    }
  }
  dnnl::memory ma(operand(type, m, k, ta, lda), cpu_engine(), const_cast<void*>(pa));
  dnnl::memory mb(operand(type, k, n, tb, ldb), cpu_engine(), const_cast<void*>(pb));
  dnnl::memory mc(result(m, n, ldc), cpu_engine(), C);
  it->second.execute(s.stream, {{DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, mb}, {DNNL_ARG_DST, mc}});
  s.stream.wait();
}

std::string onednn_describe() {
  const dnnl_version_t* v = dnnl_version();
  const Key key{false, true, bits(1.0f), bits(0.0f), bf16_kernels() ? dt::bf16 : dt::f32};
  return "oneDNN " + std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch) +
         " " + make_pd(key).impl_info_str() + ", " + isa_name() +
         (bf16_kernels() ? "" : "; no bf16 kernels for this CPU: bf16 values on the fp32 kernels");
}

void onednn_match_blas_threads() {
  const ThreadSetup t = probe_threads();
  if (t.host_openmp) return;
  // oneDNN's OpenMP runtime, looked up rather than linked: ExaMoE's own
  // code is not built with OpenMP in a Serial build.
  using SetFn = void (*)(int);
  if (auto set = reinterpret_cast<SetFn>(dlsym(RTLD_DEFAULT, "omp_set_num_threads"))) set(std::max(1, t.blas_threads));
}

bool onednn_native_bf16() {
  using isa = dnnl::cpu_isa;
  const isa i = dnnl::get_effective_cpu_isa();
  return i == isa::avx512_core_bf16 || i == isa::avx512_core_amx;
}

#else

bool onednn_available() { return false; }

void onednn_gemm(MatmulPrecision, bool, bool, index_t, index_t, index_t, float, const float*, index_t, const float*,
                 index_t, float, float*, index_t) {
  throw Error(fmt::format("{}, or set precision.compute = \"fp32\"", onednn_missing()));
}

void onednn_gemm(MatmulPrecision, bool, bool, index_t, index_t, index_t, float, MatmulOperand, MatmulOperand, float,
                 float*, index_t) {
  throw Error(fmt::format("{}, or set precision.compute = \"fp32\"", onednn_missing()));
}

std::string onednn_describe() { return ""; }

void onednn_match_blas_threads() {}

bool onednn_native_bf16() { return false; }

#endif

}  // namespace exa::kernels
