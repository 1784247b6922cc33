#pragma once
// Every tensor of the model by its global name (docs/architecture.md, "The model") and global shape
// (PyTorch nn.Linear convention [out, in]), with how it is initialised and
// whether weight decay applies, how tensor and expert parallelism may
// partition it and over which group its gradient is reduced. This list is
// the model's single source of truth: the store, the optimizer, the
// parallel layers and the checkpoint all iterate over it.
#include <cstdint>
#include <string>
#include <vector>

#include "model/model_config.hpp"

namespace exa::model {

// The ranks a tensor's gradient is summed over once backward is done:
//   Data        the data-parallel group (dp * cp): every replica of the tensor
//   ExpertData  the expert-data group: the replicas of the same experts that
//               remain once expert parallelism has spread E over ep ranks
//   None        not reduced (each rank's gradient is its own)
enum class ReduceGroup { Data, ExpertData, None };

struct ParamSpec {
  enum class Init { Normal, Ones, Zeros };
  std::string name;
  std::vector<std::int64_t> shape;
  Init init = Init::Normal;
  double init_std = 0.0;  // Init::Normal only
  bool weight_decay = true;  // matrices decay; norm gains do not
  // Dimension split across the tensor-parallel ranks, -1 = replicated:
  // column-parallel (wq/wk/wv, w1/w3: output rows) dim 0, row-parallel
  // (wo, w2: input columns) dim 1, vocabulary-parallel embedding and LM head
  // dim 0; expert and shared-expert tensors split their FFN dimension (F).
  int tp_dim = -1;
  // Dimension split across the expert-parallel ranks (the expert index E of
  // moe.experts.*), -1 = not expert-partitioned.
  int ep_dim = -1;
  ReduceGroup reduce = ReduceGroup::Data;
  // False for the frozen model under LoRA: no optimizer state, no gradient
  // reduction, no place in the gradient norm (docs/architecture.md, "LoRA").
  bool trainable = true;

  std::int64_t numel() const;
};

// With cfg.lora enabled every tensor of the model is frozen and each
// targeted projection W [out, in] (or [S, out, in] for the shared experts) is
// followed by its adapters "<W>.lora_a" [r, in] and "<W>.lora_b" [out, r],
// split by tensor parallelism as W is: a column-parallel W's B takes its
// output rows, a row-parallel W's A its input columns, the other factor is
// whole on every rank and its gradient summed over tensor parallelism.
std::vector<ParamSpec> parameter_specs(const ModelConfig& cfg);

// "<W>.lora_a" / "<W>.lora_b" of base tensor name W (a trailing ".weight"
// dropped), and whether a name is one of them.
std::string lora_a_name(const std::string& base);
std::string lora_b_name(const std::string& base);
bool is_lora_adapter(const std::string& name);

}  // namespace exa::model
