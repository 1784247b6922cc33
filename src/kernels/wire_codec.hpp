#pragma once
// Compressed wire formats for float payloads (comm.compression; the data-
// parallel gradient collectives, parallel/data/data_group.hpp). A payload
// of n values is packed into 32-bit words, so that any communicator moves
// it as I32 elements:
//
//   bf16  ceil(n/2) words: value i in the low (even i) or high (odd i) half
//         of word i/2, rounded to nearest even (core/bf16.hpp).
//   int8  ceil(n/Q) fp32 scales, then ceil(n/4) words of int8: block b of Q
//         values (Q = comm.quant_block) has scale s_b = max|x| / 127 over
//         the block and q_i = round(x_i * 127 / max|x|), so that
//         |x_i - q_i s_b| <= s_b / 2 up to float rounding (a block of
//         zeros has s_b = 0).
//
// Stochastic rounding (comm.stochastic_rounding): a bf16 or int8 value
// rounds up with probability equal to its distance from the value below,
// so E[decode(encode(x))] = x: the error of a sum of many payloads stays
// unbiased. The draw of value i is Philox's uniform at i under the key the
// caller passes, so the words are a function of the input and the key.
//
// Decoding a prefix of a payload gives that prefix of the values, so a
// payload encoded from a zero-padded block can be decoded into a shorter
// buffer. Encode and decode are deterministic: the same input (and key)
// gives the same words on every rank and backend.
#include <cstdint>
#include <string>

#include "core/philox.hpp"
#include "core/types.hpp"

namespace exa::kernels {

enum class WireFormat { F32, BF16, Int8 };

class WireCodec {
 public:
  // quant_block: values per int8 scale (> 0); stochastic: bf16 and int8
  // round stochastically (F32 has nothing to round).
  WireCodec(WireFormat format = WireFormat::F32, std::int64_t quant_block = 256,  // NOLINT: a value type
            bool stochastic = false);

  WireFormat format() const { return format_; }
  std::int64_t quant_block() const { return quant_block_; }
  bool stochastic() const { return stochastic_ && format_ != WireFormat::F32; }
  // Words an encoded payload of n values takes.
  std::int64_t words(std::int64_t n) const;
  // out[0, words(x.extent(0))) <- encode(x); `key` draws the stochastic
  // rounding (ignored when it is off).
  void encode(const View1<const float>& x, const View1<std::int32_t>& out, PhiloxKey key = {0, 0}) const;
  // y <- decode(in) over y's extent; `in` holds an encoded payload of
  // `encoded` >= y.extent(0) values. (Sums of decoded payloads are taken
  // apart, by add_into: a fused decode-and-add could contract into an FMA
  // and round differently from the sum of the decoded values.)
  void decode(const View1<const std::int32_t>& in, std::int64_t encoded, const View1<float>& y) const;

 private:
  WireFormat format_;
  std::int64_t quant_block_;
  bool stochastic_ = false;
};

// y += x, element by element (the same extent).
void add_into(const View1<float>& y, const View1<const float>& x);

// "none", "bf16", "int8" (the deck's names); "none" is F32.
WireFormat wire_format_from_name(const std::string& name);
const char* wire_format_name(WireFormat f);

}  // namespace exa::kernels
