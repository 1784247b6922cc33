#include "kernels/adamw.hpp"

namespace exa::kernels {
template void adamw_step(const View1<float>&, const View1<const float>&, const View1<float>&, const View1<float>&,
                         const AdamWHyper&, const ExecSpace&);
template void adamw_step(const View2<float>&, const View2<const float>&, const View2<float>&, const View2<float>&,
                         const AdamWHyper&, const ExecSpace&);
template void adamw_step(const View3<float>&, const View3<const float>&, const View3<float>&, const View3<float>&,
                         const AdamWHyper&, const ExecSpace&);
template void adamw_step(const View1<float>&, const View1<float>&, const View1<float>&, const View1<float>&,
                         const AdamWHyper&, const ExecSpace&);
template void adamw_step(const View2<float>&, const View2<float>&, const View2<float>&, const View2<float>&,
                         const AdamWHyper&, const ExecSpace&);
template void adamw_step(const View3<float>&, const View3<float>&, const View3<float>&, const View3<float>&,
                         const AdamWHyper&, const ExecSpace&);
}  // namespace exa::kernels
