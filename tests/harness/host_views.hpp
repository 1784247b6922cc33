#pragma once
// Host vectors to device Views and back, for tests that build inputs and
// check results on the host.
#include <Kokkos_Core.hpp>
#include <string>
#include <vector>

#include "core/types.hpp"

namespace exa::test {

template <class T>
View1<T> to_device(const std::vector<T>& h, const char* label = "exa::test::to_device") {
  View1<T> v(std::string(label), h.size());
  auto m = Kokkos::create_mirror_view(v);
  for (std::size_t i = 0; i < h.size(); ++i) m(i) = h[i];
  Kokkos::deep_copy(v, m);
  return v;
}

template <class V>
std::vector<typename V::non_const_value_type> to_host(const V& v) {
  const auto m = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), v);
  return std::vector<typename V::non_const_value_type>(m.data(), m.data() + m.extent(0));
}

}  // namespace exa::test
