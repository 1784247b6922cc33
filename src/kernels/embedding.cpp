#include "kernels/embedding.hpp"

// fp32 training forms on the default device (tokens are int32).
namespace exa::kernels {
template void embedding_forward(const View2<float>&, const View1<std::int32_t>&, const View2<float>&,
                                const ExecSpace&);
template void embedding_forward(const View2<float>&, const View1<const std::int32_t>&, const View2<float>&,
                                const ExecSpace&);
template void embedding_backward(const View1<std::int32_t>&, const View2<float>&, const View2<float>&, bool,
                                 const ExecSpace&);
template void embedding_backward(const View1<const std::int32_t>&, const View2<float>&, const View2<float>&, bool,
                                 const ExecSpace&);
}  // namespace exa::kernels
