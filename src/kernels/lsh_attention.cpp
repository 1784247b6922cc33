#include "kernels/lsh_attention.hpp"

namespace exa::kernels {
template void lsh_attention_forward(const View4<float>&, const View4<float>&, const View4<float>&,
                                    const View4<float>&, const View3<float>&, const LshConfig&, AttentionOffsets,
                                    const ExecSpace&);
template void lsh_attention_backward(const View4<float>&, const View4<float>&, const View4<float>&,
                                     const View4<float>&, const View4<float>&, const View3<float>&,
                                     const View4<float>&, const View4<float>&, const View4<float>&,
                                     const LshConfig&, AttentionOffsets, const ExecSpace&);
}  // namespace exa::kernels
