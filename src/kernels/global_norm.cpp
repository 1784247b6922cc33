#include "kernels/global_norm.hpp"

namespace exa::kernels {
template double global_sq_norm(const View1<float>&, const ExecSpace&);
template double global_sq_norm(const View2<float>&, const ExecSpace&);
template double global_sq_norm(const View3<float>&, const ExecSpace&);
}  // namespace exa::kernels
