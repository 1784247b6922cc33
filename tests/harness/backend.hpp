#pragma once
// The Kokkos backend a per-backend test executable exercises (set by CMake).
#include <Kokkos_Core.hpp>

#ifndef EXAMOE_TEST_EXECSPACE
#define EXAMOE_TEST_EXECSPACE Kokkos::DefaultExecutionSpace
#define EXAMOE_TEST_BACKEND_NAME "default"
#endif

namespace exa::test {
using TestExec = EXAMOE_TEST_EXECSPACE;
using TestMem = TestExec::memory_space;
using TestDevice = Kokkos::Device<TestExec, TestMem>;
}  // namespace exa::test
