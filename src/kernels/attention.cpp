#include "kernels/attention.hpp"

namespace exa::kernels {
template void attention_forward(const View4<float>&, const View4<float>&, const View4<float>&,
                                const View4<float>&, const View3<float>&, AttentionTiles, const ExecSpace&);
template void attention_backward(const View4<float>&, const View4<float>&, const View4<float>&,
                                 const View4<float>&, const View4<float>&, const View3<float>&,
                                 const View4<float>&, const View4<float>&, const View4<float>&, AttentionTiles,
                                 const ExecSpace&);
}  // namespace exa::kernels
