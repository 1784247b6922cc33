#include "kernels/gemm.hpp"

// fp32 training forms on the default device.
namespace exa::kernels {
template void gemm(char, char, const float, const View2<float>&, const View2<float>&, const float,
                   const View2<float>&, const ExecSpace&);
template void gemm(char, char, const float, const View2<const float>&, const View2<const float>&, const float,
                   const View2<float>&, const ExecSpace&);
template void linear_forward(const View2<float>&, const View2<float>&, const View2<float>&, bool, const ExecSpace&);
template void linear_backward(const View2<float>&, const View2<float>&, const View2<float>&, const View2<float>&,
                              const View2<float>&, bool, bool, const ExecSpace&);
template void gemm_batched(char, char, const float, const View3<float>&, const View3<float>&, const float,
                           const View3<float>&, const ExecSpace&);
template void grouped_linear_forward(const View2<float>&, const View3<float>&, const std::vector<index_t>&,
                                     const View2<float>&, bool, const ExecSpace&);
template void grouped_linear_backward(const View2<float>&, const View3<float>&, const View2<float>&,
                                      const std::vector<index_t>&, const View2<float>&, const View3<float>&, bool,
                                      bool, const ExecSpace&);
}  // namespace exa::kernels
