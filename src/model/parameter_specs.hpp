#pragma once
// Every tensor of the model by its DESIGN.md global name and global shape
// (PyTorch nn.Linear convention [out, in]), with how it is initialised and
// whether weight decay applies. This list is the model's single source of
// truth: the store, the optimizer and the checkpoint all iterate over it.
#include <cstdint>
#include <string>
#include <vector>

#include "model/model_config.hpp"

namespace exa::model {

struct ParamSpec {
  enum class Init { Normal, Ones };
  std::string name;
  std::vector<std::int64_t> shape;
  Init init = Init::Normal;
  double init_std = 0.0;  // Init::Normal only
  bool weight_decay = true;  // matrices decay; norm gains do not

  std::int64_t numel() const;
};

std::vector<ParamSpec> parameter_specs(const ModelConfig& cfg);

}  // namespace exa::model
