#include "kernels/cross_entropy.hpp"

// fp32 training forms on the default device (targets are int32, -1 = ignore).
namespace exa::kernels {
template CrossEntropySum cross_entropy_forward_sum(const View2<float>&, const View1<std::int32_t>&,
                                                   const View1<float>&, const ExecSpace&);
template double cross_entropy_forward(const View2<float>&, const View1<std::int32_t>&, const View1<float>&,
                                      const ExecSpace&);
template void cross_entropy_rows(const View2<float>&, const View1<std::int32_t>&, const View1<float>&,
                                 const View1<float>&, const ExecSpace&);
template void cross_entropy_backward(const View2<float>&, const View1<std::int32_t>&, const View1<float>&, double,
                                     index_t, const View2<float>&, const ExecSpace&);
}  // namespace exa::kernels
