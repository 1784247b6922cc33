#pragma once
// Gradient-conflict projection across tasks, PCGrad (Yu et al. 2020;
// train.grad_projection = "pcgrad", docs/architecture.md "Gradient
// projection"). Given one gradient g_t per task:
//
//   for each task i:                 p_i = g_i
//     for each other task j, in a random order per (seed, step, i):
//       if p_i . g_j < 0:            p_i -= (p_i . g_j) / |g_j|^2  g_j
//   out = sum_i weight_i p_i
//
// Each p_i is projected against the other tasks' original gradients, onto
// the normal plane of each one it conflicts with (a negative dot product),
// as the paper's algorithm does. The vectors are this rank's part of each
// gradient; `dot` returns the global dot product of two such parts (the
// caller's reduction over the ranks holding the other parts), so the
// projection is the same in every layout.
#include <cstdint>
#include <functional>
#include <vector>

#include "core/types.hpp"

namespace exa::optim {

using GradPart = View1<float>;
using GlobalDot = std::function<double(const GradPart&, const GradPart&)>;

struct ProjectionReport {
  int conflicts = 0;                 // projections made (pairs i, j with p_i . g_j < 0 when visited)
  std::vector<double> cosines;       // cos(g_i, g_j) of the original gradients, i < j, row by row
};

// z = a x + b y over parts of one length (z may be y: the projection's
// update).
void axpbyz(double a, const GradPart& x, double b, const GradPart& y, const GradPart& z);
inline void axpby(double a, const GradPart& x, double b, const GradPart& y) { axpbyz(a, x, b, y, y); }

// The order in which task i visits the other tasks at `step`: a
// permutation of [0, K) without i, drawn from (seed, step, i).
std::vector<int> projection_order(std::uint64_t seed, std::int64_t step, int task, int tasks);

// out = sum_i weights[i] * p_i (above); `work` is scratch of the same
// length. out and work must not alias a task's gradient. `dot` must be
// symmetric. `sq`, when given, holds |g_i|^2 (dot(g_i, g_i)) already.
//
// Each pass over the parts is paid in memory bandwidth, so the work is
// what the result needs: the pairs' dots g_i . g_j once (the cosines need
// them anyway), reused while p_i is still g_i (before its first
// projection), and p_i copied into `work` only when it is projected.
ProjectionReport project_conflicts(const std::vector<GradPart>& grads, const std::vector<double>& weights,
                                   std::uint64_t seed, std::int64_t step, const GradPart& out, const GradPart& work,
                                   const GlobalDot& dot, std::vector<double> sq = {});

}  // namespace exa::optim
