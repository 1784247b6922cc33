#include "kernels/permute.hpp"

namespace exa::kernels {
template PermutePlan<Device> permute_plan(const View2<int>&, int, index_t, const ExecSpace&);
template void permute_forward(const View2<float>&, const View1<int>&, const View2<float>&, const ExecSpace&);
template void permute_backward(const View2<float>&, const View2<int>&, const View2<float>&, const ExecSpace&);
template void unpermute_forward(const View2<float>&, const View2<float>&, const View2<int>&, const View2<float>&,
                                const ExecSpace&);
template void unpermute_backward(const View2<float>&, const View2<float>&, const View2<float>&, const View2<int>&,
                                 const View2<float>&, const View2<float>&, const ExecSpace&);
}  // namespace exa::kernels
