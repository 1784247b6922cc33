#include "kernels/global_norm.hpp"

namespace exa::kernels {
template double global_sq_norm(const View1<float>&);
template double global_sq_norm(const View2<float>&);
template double global_sq_norm(const View3<float>&);
}  // namespace exa::kernels
