#include "kernels/router.hpp"

namespace exa::kernels {
template RouterLosses router_forward(const View2<float>&, const RouterOptions&, const View2<float>&,
                                     const View1<float>&, const View2<int>&, const View2<float>&,
                                     const View1<int>&, const ExecSpace&);
template RouterLosses router_forward(const View2<float>&, const View1<float>&, const RouterOptions&,
                                     const View2<float>&, const View1<float>&, const View2<int>&, const View2<float>&,
                                     const View1<int>&, const ExecSpace&);
template RouterLosses router_forward(const View2<float>&, const View1<float>&, const View1<int>&,
                                     const View1<int>&, const RouterOptions&, const View2<float>&, const View1<float>&,
                                     const View2<int>&, const View2<float>&, const View1<int>&, const ExecSpace&);
template void router_backward(const View2<float>&, const View2<float>&, const View1<float>&, const View2<int>&,
                              const View2<float>&, const View1<int>&, const RouterOptions&, double, double,
                              const View2<float>&, const ExecSpace&);
}  // namespace exa::kernels
