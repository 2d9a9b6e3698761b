// Deliberately broken, never built: a kernel (a KOKKOS_LAMBDA) calls a
// function that exists on the host only. GCC and Clang accept it, since
// Kokkos' host backends run kernels on the host; nvcc must reject it under
// tools/cuda-check's -Werror cross-execution-space-call, and the test
// cuda.host_call_in_kernel_fails checks that it does.
#include <Kokkos_Core.hpp>

namespace {

// Neither KOKKOS_FUNCTION nor constexpr: host code only.
int host_only(int i) { return 2 * i + 1; }

}  // namespace

void fill(Kokkos::View<int*> const& v) {
  Kokkos::parallel_for(
      "host_call_in_kernel", v.extent(0), KOKKOS_LAMBDA(std::size_t i) { v(i) = host_only(static_cast<int>(i)); });
}
