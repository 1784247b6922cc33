#pragma once
// View aliases and execution/memory spaces used across ExaMoE.
//
// Every tensor is a LayoutRight View (row-major, matching PyTorch and HDF5 so
// that checkpoints need no transposes). Kernels are templates over View
// types and run in the View's own execution space, so the same kernel serves
// device tensors in training and host `double` tensors in gradient checks.
#include <Kokkos_Core.hpp>
#include <cstdint>

namespace exa {

using ExecSpace = Kokkos::DefaultExecutionSpace;
using MemSpace = ExecSpace::memory_space;
using Device = Kokkos::Device<ExecSpace, MemSpace>;
using HostExecSpace = Kokkos::DefaultHostExecutionSpace;
using HostDevice = Kokkos::Device<HostExecSpace, Kokkos::HostSpace>;
using Layout = Kokkos::LayoutRight;

template <class T, class D = Device>
using View1 = Kokkos::View<T*, Layout, D>;
template <class T, class D = Device>
using View2 = Kokkos::View<T**, Layout, D>;
template <class T, class D = Device>
using View3 = Kokkos::View<T***, Layout, D>;
template <class T, class D = Device>
using View4 = Kokkos::View<T****, Layout, D>;

using index_t = std::int64_t;

// Execution space a kernel launched on View type V runs in.
template <class V>
using exec_of = typename V::execution_space;

// Scalar type (without const) held by View type V.
template <class V>
using scalar_of = typename V::non_const_value_type;

}  // namespace exa
