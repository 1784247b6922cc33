#include "kernels/rope.hpp"

// fp32 training forms on the default device.
namespace exa::kernels {
template void rope_forward(const View4<float>&, double, index_t, const ExecSpace&);
template void rope_backward(const View4<float>&, double, index_t, const ExecSpace&);
template RopeTable<float, Device> make_rope_table<float, Device>(index_t, index_t, double, const ExecSpace&);
template void rope_forward(const View4<float>&, const RopeTable<float, Device>&, index_t, const ExecSpace&,
                            RopeDocuments);
template void rope_backward(const View4<float>&, const RopeTable<float, Device>&, index_t, const ExecSpace&,
                            RopeDocuments);
using BthdView = Kokkos::View<float****, Kokkos::LayoutRight, Device, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
template void rope_forward(const BthdView&, double, index_t, const ExecSpace&);
template void rope_backward(const BthdView&, double, index_t, const ExecSpace&);
template void rope_forward(const BthdView&, const RopeTable<float, Device>&, index_t, const ExecSpace&,
                            RopeDocuments);
template void rope_backward(const BthdView&, const RopeTable<float, Device>&, index_t, const ExecSpace&,
                            RopeDocuments);
template BthdView view_as_bthd(const View2<float>&, index_t, index_t, index_t, index_t);
}  // namespace exa::kernels
