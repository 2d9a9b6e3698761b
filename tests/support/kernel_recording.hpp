#pragma once
// Kokkos Tools callbacks that record every kernel (for and reduce) and
// every fence with its device id while a `recording` lives: what tests of
// execution-space instances check ("runs there, fences nothing else"); and
// two instances of an execution space to run them on.

#include <Kokkos_Core.hpp>

#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#if defined(KOKKOS_ENABLE_OPENMP)
#include <omp.h>
#endif

namespace shardmesh::test {

struct kokkos_event {
  std::string name;
  std::uint32_t device;
};

inline std::vector<kokkos_event> recorded_kernels;
inline std::vector<kokkos_event> recorded_fences;

namespace detail {
inline void record_kernel(char const* name, std::uint32_t device, std::uint64_t* id) {
  recorded_kernels.push_back({name, device});
  *id = 0;
}
inline void record_fence(char const* name, std::uint32_t device, std::uint64_t* id) {
  recorded_fences.push_back({name, device});
  *id = 0;
}
inline void ignore_end(std::uint64_t) {}
}  // namespace detail

class recording {
 public:
  recording() {
    recorded_kernels.clear();
    recorded_fences.clear();
    namespace tools = Kokkos::Tools::Experimental;
    tools::set_begin_parallel_for_callback(detail::record_kernel);
    tools::set_end_parallel_for_callback(detail::ignore_end);
    tools::set_begin_parallel_reduce_callback(detail::record_kernel);
    tools::set_end_parallel_reduce_callback(detail::ignore_end);
    tools::set_begin_fence_callback(detail::record_fence);
    tools::set_end_fence_callback(detail::ignore_end);
  }
  recording(recording const&) = delete;
  recording& operator=(recording const&) = delete;
  ~recording() {
    namespace tools = Kokkos::Tools::Experimental;
    tools::set_begin_parallel_for_callback(nullptr);
    tools::set_end_parallel_for_callback(nullptr);
    tools::set_begin_parallel_reduce_callback(nullptr);
    tools::set_end_parallel_reduce_callback(nullptr);
    tools::set_begin_fence_callback(nullptr);
    tools::set_end_fence_callback(nullptr);
  }
};

// Two instances of Space. OpenMP partitions its threads only with nested
// parallelism on (Kokkos 5.2's OpenMP gives every instance the same device
// id); elsewhere (CUDA, HIP) instances are streams.
template <class Space = Kokkos::DefaultExecutionSpace>
std::vector<Space> two_instances() {
#if defined(KOKKOS_ENABLE_OPENMP)
  if constexpr (std::is_same_v<Space, Kokkos::OpenMP>) omp_set_max_active_levels(2);
#endif
  auto const parts = Kokkos::Experimental::partition_space(Space{}, 1, 1);
  return {parts.begin(), parts.end()};
}

}  // namespace shardmesh::test
