#pragma once
// Cluster: what the planner knows of the machine a layout will run on
// (docs/planner.md): nodes and devices, each device's matmul peak per
// precision with the share of it model-sized products reach, its memory and
// memory bandwidth, the links inside a node and between nodes, and how the
// nodes are wired. Loaded
// from input/clusters/*.toml; `examoe-plan calibrate` writes one for the
// machine it runs on.
#include <string>

#include "plan/topology.hpp"

namespace exa::plan {

struct Link {
  double bandwidth_gbs = 0;  // GB/s each device can send (one direction), point to point
  double latency_us = 0;     // per message
  // What each rank's sends reach inside the MPI collectives (bytes a ring
  // algorithm sends per rank over the time): calibrated, else bandwidth_gbs.
  double allreduce_gbs = 0, alltoall_gbs = 0;
  // The allreduce rate on messages of 256 MiB, whose buffers no cache
  // holds, as a whole model's gradient (calibrated; 0: allreduce_gbs).
  // Between 16 and 256 MiB the rate follows log(message) from one to the
  // other.
  double allreduce_large_gbs = 0;
  // The share of a nonblocking collective's time that passes while the
  // rank computes without calling MPI: 1 where the library progresses on
  // its own (NCCL's stream, an MPI progress thread), near 0 where only
  // the rank's own MPI calls move it (calibrated).
  double overlap = 1;
  double allreduce() const { return allreduce_gbs > 0 ? allreduce_gbs : bandwidth_gbs; }
  // The allreduce rate for a message of `bytes` per rank.
  double allreduce(double bytes) const;
  // Of `comm` seconds of such collectives under `compute` seconds of work,
  // the part the work does not hide.
  double exposed(double comm, double compute) const;
  double alltoall() const { return alltoall_gbs > 0 ? alltoall_gbs : bandwidth_gbs; }
};

struct Cluster {
  std::string name;
  std::string source;    // file it was read from, or "built-in"
  Topology topology;     // how the nodes are wired (plan/topology.hpp)
  int nodes = 1, devices_per_node = 1;
  // Per device.
  double fp32_tflops = 0, bf16_tflops = 0, fp16_tflops = 0;  // dense matmul peak
  double matmul_efficiency = 0.7;     // achieved share of the fp32 peak on the model's products
  double low_precision_efficiency = 0.7;  // the same for bf16 and fp16 products (rounding the inputs costs)
  double attention_efficiency = 0.4;
  // A product of M rows reaches M / (M + gemm_half_rows) of the large
  // products' rate (0: no shape effect); calibrate fits it.
  double gemm_half_rows = 0;  // achieved share of the peak in attention's score and value products
  double memory_gib = 0;
  double memory_bandwidth_gbs = 0;
  // Passes over the stored activations the element-wise kernels (norms,
  // rope, softmax, SwiGLU, permute, AdamW's arrays) make per step, forward
  // and backward together: their time is bytes * passes / bandwidth.
  double elementwise_passes = 8;
  Link intra, inter;
  double storage_write_gbs = 1;  // checkpoint write bandwidth per node

  int devices() const { return nodes * devices_per_node; }
  // What a layout may fill: 90% of a device's memory, the rest left to the
  // runtime, the libraries' workspaces and fragmentation.
  double usable_memory_bytes() const { return 0.9 * memory_gib * 1073741824.0; }
  // Peak TFLOP/s of a product whose inputs are `precision` (fp32, bf16, fp16).
  double peak_tflops(const std::string& precision) const;
};

// Reads a cluster file. exa::Error naming the file, the key and the fix on
// a missing or out-of-range value.
Cluster load_cluster(const std::string& path);
// The cluster as a file load_cluster reads back.
std::string to_toml(const Cluster& c);

}  // namespace exa::plan
