#pragma once
// precision.compute and precision.matmul of a deck, applied to the
// process's matrix products (kernels/matmul_precision.hpp). Every driver
// that runs the model (training, evaluation, generation, the benchmark)
// calls use_deck_precision before its first step. docs/architecture.md,
// "Mixed precision", gives the recipe.
#include <string>

#include "core/deck/config.hpp"
#include "kernels/matmul_precision.hpp"

namespace exa::model {

// The deck's matmul precision, or an exa::Error naming what this build or
// this execution space lacks for it (and the fix).
kernels::MatmulPrecision matmul_precision_of(const deck::Config& cfg);

// precision.matmul = "tf32" (true) or "fp32"; an exa::Error where the build
// has no TF32 (no CUDA with cuBLAS), naming the fix.
bool tf32_of(const deck::Config& cfg);

// Sets the process's matmul precision and TF32 mode from the deck (throws
// as above).
void use_deck_precision(const deck::Config& cfg);

// For the start-up line: "fp32 matmuls" or "bf16 matmuls (oneDNN 2.6.3
// brg:avx512_core_bf16)", with a warning when the CPU has no bf16
// instructions.
std::string describe_precision();

}  // namespace exa::model
