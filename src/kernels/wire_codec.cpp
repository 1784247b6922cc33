#include "kernels/wire_codec.hpp"

#include <fmt/format.h>

#include <string>

#include "core/bf16.hpp"
#include "core/error.hpp"

namespace exa::kernels {

namespace {

using Exec = Kokkos::RangePolicy<ExecSpace, Kokkos::IndexType<std::int64_t>>;

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

}  // namespace

WireCodec::WireCodec(WireFormat format, std::int64_t quant_block, bool stochastic)
    : format_(format), quant_block_(quant_block), stochastic_(stochastic) {
  EXA_REQUIRE(quant_block > 0, "WireCodec: quant_block = {} must be positive", quant_block);
}

std::int64_t WireCodec::words(std::int64_t n) const {
  switch (format_) {
    case WireFormat::F32: return n;
    case WireFormat::BF16: return ceil_div(n, 2);
    case WireFormat::Int8: return ceil_div(n, quant_block_) + ceil_div(n, 4);
  }
  return n;
}

void WireCodec::encode(const View1<const float>& x, const View1<std::int32_t>& out, PhiloxKey key) const {
  const std::int64_t n = std::int64_t(x.extent(0));
  EXA_ASSERT(std::int64_t(out.extent(0)) >= words(n));
  const bool sr = stochastic();
  switch (format_) {
    case WireFormat::F32:
      Kokkos::parallel_for(
          "exa::wire_encode_f32", Exec(0, n), KOKKOS_LAMBDA(const std::int64_t i) {
            out(i) = static_cast<std::int32_t>(kx::bits_of(x(i)));
          });
      break;
    case WireFormat::BF16:
      Kokkos::parallel_for(
          "exa::wire_encode_bf16", Exec(0, (n + 1) / 2), KOKKOS_LAMBDA(const std::int64_t w) {
            // Stochastic: a uniform 16-bit draw added to the magnitude's
            // bits below bf16's, then truncated (inf and NaN as they are).
            auto round = [&](std::int64_t i) -> std::uint32_t {
              if (!sr) return to_bf16(x(i)).bits;
              const std::uint32_t b = kx::bits_of(x(i));
              if ((b & 0x7f800000u) == 0x7f800000u) return to_bf16(x(i)).bits;
              const auto r = std::uint32_t(philox_uniform(key, std::uint64_t(i)) * 65536.0) & 0xffffu;
              return (b + r) >> 16;
            };
            const std::uint32_t lo = round(2 * w);
            const std::uint32_t hi = 2 * w + 1 < n ? round(2 * w + 1) : 0u;
            out(w) = static_cast<std::int32_t>(lo | (hi << 16));
          });
      break;
    case WireFormat::Int8: {
      const std::int64_t Q = quant_block_, nq = ceil_div(n, Q);
      // Each block writes its own scale word and its own bytes of the
      // payload (distinct bytes, so blocks sharing a word do not race).
      Kokkos::parallel_for(
          "exa::wire_encode_int8", Exec(0, nq), KOKKOS_LAMBDA(const std::int64_t b) {
            const std::int64_t lo = b * Q, hi = lo + Q < n ? lo + Q : n;
            float m = 0.0f;
            for (std::int64_t i = lo; i < hi; ++i) {
              const float a = x(i) < 0.0f ? -x(i) : x(i);
              m = a > m ? a : m;
            }
            out(b) = static_cast<std::int32_t>(kx::bits_of(m / 127.0f));
            // One reciprocal per block, then a multiply and a round half
            // away from zero per value: no division or branch in the loop.
            const float inv = m > 0.0f ? 127.0f / m : 0.0f;
            auto* q = reinterpret_cast<std::int8_t*>(out.data() + nq);
            for (std::int64_t i = lo; i < hi; ++i) {
              float r = x(i) * inv;
              r = r > 127.0f ? 127.0f : (r < -127.0f ? -127.0f : r);
              if (sr) {
                // floor(r + u), u uniform: up with probability r - floor(r).
                const double f = kx::floor(double(r) + (1.0 - philox_uniform(key, std::uint64_t(i))));
                q[i] = static_cast<std::int8_t>(f > 127.0 ? 127 : (f < -127.0 ? -127 : int(f)));
              } else {
                q[i] = static_cast<std::int8_t>(static_cast<int>(r + (r < 0.0f ? -0.5f : 0.5f)));
              }
            }
          });
      // The last word's unused bytes are zero, so equal inputs give equal words.
      if (n % 4 != 0) {
        const std::int64_t end = ceil_div(n, 4) * 4;
        Kokkos::parallel_for(
            "exa::wire_encode_int8_tail", Exec(0, 1), KOKKOS_LAMBDA(const std::int64_t) {
              auto* q = reinterpret_cast<std::int8_t*>(out.data() + nq);
              for (std::int64_t i = n; i < end; ++i) q[i] = 0;
            });
      }
      break;
    }
  }
}

void WireCodec::decode(const View1<const std::int32_t>& in, std::int64_t encoded, const View1<float>& y) const {
  const std::int64_t n = std::int64_t(y.extent(0));
  EXA_ASSERT(n <= encoded && std::int64_t(in.extent(0)) >= words(encoded));
  switch (format_) {
    case WireFormat::F32:
      Kokkos::parallel_for(
          "exa::wire_decode_f32", Exec(0, n), KOKKOS_LAMBDA(const std::int64_t i) {
            y(i) = kx::float_of(static_cast<std::uint32_t>(in(i)));
          });
      break;
    case WireFormat::BF16:
      Kokkos::parallel_for(
          "exa::wire_decode_bf16", Exec(0, n), KOKKOS_LAMBDA(const std::int64_t i) {
            const std::uint32_t w = static_cast<std::uint32_t>(in(i / 2));
            y(i) = to_float(bf16::from_bits(static_cast<std::uint16_t>(i % 2 == 0 ? w & 0xffffu : w >> 16)));
          });
      break;
    case WireFormat::Int8: {
      // The scales count the payload's own values (`encoded`; y may be a
      // prefix). One block per thread: its scale read once, no division.
      const std::int64_t Q = quant_block_, nq = ceil_div(encoded, Q), blocks = ceil_div(n, Q);
      Kokkos::parallel_for(
          "exa::wire_decode_int8", Exec(0, blocks), KOKKOS_LAMBDA(const std::int64_t b) {
            const float s = kx::float_of(static_cast<std::uint32_t>(in(b)));
            const auto* q = reinterpret_cast<const std::int8_t*>(in.data() + nq);
            const std::int64_t lo = b * Q, hi = lo + Q < n ? lo + Q : n;
            for (std::int64_t i = lo; i < hi; ++i) y(i) = float(q[i]) * s;
          });
      break;
    }
  }
}

void add_into(const View1<float>& y, const View1<const float>& x) {
  EXA_ASSERT(y.extent(0) == x.extent(0));
  Kokkos::parallel_for(
      "exa::add_into", Exec(0, std::int64_t(y.extent(0))), KOKKOS_LAMBDA(const std::int64_t i) { y(i) += x(i); });
}

WireFormat wire_format_from_name(const std::string& name) {
  if (name == "none") return WireFormat::F32;
  if (name == "bf16") return WireFormat::BF16;
  if (name == "int8") return WireFormat::Int8;
  throw Error(fmt::format("wire format \"{}\" is not one of none, bf16, int8", name));
}

const char* wire_format_name(WireFormat f) {
  switch (f) {
    case WireFormat::F32: return "none";
    case WireFormat::BF16: return "bf16";
    case WireFormat::Int8: return "int8";
  }
  return "none";
}

}  // namespace exa::kernels
