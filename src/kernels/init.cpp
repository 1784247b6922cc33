#include "kernels/init.hpp"

namespace exa::kernels {
template void init_normal(const View1<float>&, PhiloxKey, double, index_t);
template void init_normal(const View2<float>&, PhiloxKey, double, index_t);
template void init_normal(const View3<float>&, PhiloxKey, double, index_t);
template void init_normal(const View1<float>&, std::uint64_t, const std::string&, double, index_t);
template void init_normal(const View2<float>&, std::uint64_t, const std::string&, double, index_t);
template void init_normal(const View3<float>&, std::uint64_t, const std::string&, double, index_t);
template void init_normal_box(const View1<float>&, PhiloxKey, double, const BoxIndex&, index_t);
template void init_normal_box(const View1<float>&, std::uint64_t, const std::string&, double, const BoxIndex&, index_t);
template void fill_constant(const View1<float>&, float);
template void fill_constant(const View2<float>&, float);
template void fill_constant(const View3<float>&, float);
}  // namespace exa::kernels
