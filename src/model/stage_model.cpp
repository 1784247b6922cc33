#include "model/stage_model.hpp"

#include "model/stage_model_impl.hpp"

namespace exa::model {

template class StageModel<float, Device>;
template class StageModel<double, Device>;

}  // namespace exa::model
