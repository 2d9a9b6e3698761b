#pragma once
// MPI reads and writes host memory, and device memory only when the MPI
// library is GPU-aware. A staged buffer hands MPI a pointer it can use: the
// View itself where it can, otherwise a host mirror copied before sending
// and after receiving.
//
// Which path a build takes: HostSpace (and any space the host can access)
// goes straight to MPI. Other spaces go straight to MPI when gpu_aware_mpi()
// says so: SHARDMESH_GPU_AWARE_MPI=1 or =0 in the environment forces it,
// otherwise Open MPI's MPIX_Query_cuda_support() decides for CUDA builds, and
// everything else is staged.

#include <mpi.h>
#include <Kokkos_Core.hpp>
#if __has_include(<mpi-ext.h>)
#include <mpi-ext.h>
#endif

#include <cstdlib>
#include <string_view>

namespace shardmesh {

inline bool gpu_aware_mpi() {
  if (char const* forced = std::getenv("SHARDMESH_GPU_AWARE_MPI")) return std::string_view(forced) == "1";
#if defined(KOKKOS_ENABLE_CUDA) && defined(MPIX_CUDA_AWARE_SUPPORT) && MPIX_CUDA_AWARE_SUPPORT
  return MPIX_Query_cuda_support() == 1;
#else
  return false;
#endif
}

// The execution space that works on data in Space (a memory space or a device).
template <class Space>
using execution_space_of = typename Space::execution_space;

template <class Space>
inline constexpr bool host_accessible_v = Kokkos::SpaceAccessibility<Kokkos::HostSpace, Space>::accessible;

// Whether MPI must see a host copy of data in Space.
template <class Space>
bool needs_staging() {
  if constexpr (host_accessible_v<Space>)
    return false;
  else
    return !gpu_aware_mpi();
}

template <class T, class Space>
class staged_buffer {
 public:
  using view_type = Kokkos::View<T*, Space>;

  explicit staged_buffer(view_type view) : view_(view) {
    if (needs_staging<typename view_type::memory_space>())
      host_ = Kokkos::create_mirror_view(Kokkos::HostSpace{}, view);
  }
  // The pointer to hand MPI.
  [[nodiscard]] T* data() const { return host_.data() != nullptr ? host_.data() : view_.data(); }
  // Before MPI reads the buffer: copied on exec, which is then fenced.
  template <class ExecutionSpace>
  void to_mpi(ExecutionSpace const& exec) const {
    if (host_.data() == nullptr) return;
    Kokkos::deep_copy(exec, host_, view_);
    exec.fence("shardmesh::staging");
  }
  // After MPI wrote the buffer: copied on exec, which is then fenced.
  template <class ExecutionSpace>
  void from_mpi(ExecutionSpace const& exec) const {
    if (host_.data() == nullptr) return;
    Kokkos::deep_copy(exec, view_, host_);
    exec.fence("shardmesh::staging");
  }

 private:
  view_type view_;
  typename view_type::host_mirror_type host_;
};

}  // namespace shardmesh
