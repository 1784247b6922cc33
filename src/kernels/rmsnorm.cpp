#include "kernels/rmsnorm.hpp"

// fp32 training forms on the default device.
namespace exa::kernels {
template void rmsnorm_forward(const View2<float>&, const View1<float>&, const View2<float>&, const View1<float>&,
                              double, const ExecSpace&);
template void rmsnorm_backward(const View2<float>&, const View1<float>&, const View1<float>&, const View2<float>&,
                               const View2<float>&, const View1<float>&, bool, bool, const ExecSpace&);
}  // namespace exa::kernels
