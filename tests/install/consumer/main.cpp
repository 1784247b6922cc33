#include <Kokkos_Core.hpp>
#include <cstdio>

#include "core/build_info.hpp"
#include "kernels/global_norm.hpp"

int main(int argc, char** argv) {
  Kokkos::initialize(argc, argv);
  int rc = 0;
  {
    exa::View1<float> v("v", 3);
    Kokkos::deep_copy(v, 2.0f);
    const double s = exa::kernels::global_sq_norm(v);
    std::printf("examoe %s: |v|^2 = %g\n", exa::version_string().c_str(), s);
    rc = (s == 12.0) ? 0 : 1;
  }
  Kokkos::finalize();
  return rc;
}
