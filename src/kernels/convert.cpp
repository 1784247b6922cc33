#include "kernels/convert.hpp"

namespace exa::kernels {
template void fp32_to_bf16(const View1<const float>&, const View1<bf16>&, const ExecSpace&);
template void fp32_to_bf16(const View2<const float>&, const View2<bf16>&, const ExecSpace&);
template void fp32_to_bf16(const View3<const float>&, const View3<bf16>&, const ExecSpace&);
template void fp32_to_bf16(const View1<float>&, const View1<bf16>&, const ExecSpace&);
template void fp32_to_bf16(const View2<float>&, const View2<bf16>&, const ExecSpace&);
template void fp32_to_bf16(const View3<float>&, const View3<bf16>&, const ExecSpace&);
template void bf16_to_fp32(const View1<const bf16>&, const View1<float>&, const ExecSpace&);
template void bf16_to_fp32(const View2<const bf16>&, const View2<float>&, const ExecSpace&);
template void bf16_to_fp32(const View3<const bf16>&, const View3<float>&, const ExecSpace&);
template void bf16_to_fp32(const View1<bf16>&, const View1<float>&, const ExecSpace&);
template void bf16_to_fp32(const View2<bf16>&, const View2<float>&, const ExecSpace&);
template void bf16_to_fp32(const View3<bf16>&, const View3<float>&, const ExecSpace&);
}  // namespace exa::kernels
