#include "kernels/swiglu.hpp"

// fp32 training forms on the default device.
namespace exa::kernels {
template void swiglu_forward(const View2<float>&, const View2<float>&, const View2<float>&, const ExecSpace&);
template void swiglu_backward(const View2<float>&, const View2<float>&, const View2<float>&, const View2<float>&,
                              const View2<float>&, const ExecSpace&);
}  // namespace exa::kernels
