#pragma once
// MPI reads and writes host memory, and device memory only when the MPI
// library is GPU-aware. A staged buffer hands MPI a pointer it can use: the
// View itself where it can, otherwise a host mirror copied before sending
// and after receiving.
//
// Which path a buffer takes is a staging_policy, set per communicator
// (communicator::set_staging; a mesh's groups and submeshes share their
// mesh's). automatic, the default: HostSpace (and any space the host can
// access) goes straight to MPI; a CUDA or HIP device's memory goes straight
// to MPI when gpu_aware_mpi says so: SHARDMESH_GPU_AWARE_MPI=1 or =0 in
// the environment forces it, otherwise the MPI library is asked (Open
// MPI's MPIX_Query_cuda_support and MPIX_Query_rocm_support, MPICH's
// MPIX_GPU_query_support), and everything else is staged. always stages
// every buffer, host memory included (tests run the host-mirror path on a
// host-only build with it); never hands MPI every View as it is.

#include "shardmesh/comm/memory_kind.hpp"

#include <mpi.h>
#include <Kokkos_Core.hpp>
#if __has_include(<mpi-ext.h>)
#include <mpi-ext.h>
#endif

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

namespace shardmesh {

enum class staging_policy {
  automatic,  // through a host mirror only where MPI cannot read the memory
  always,     // through a host mirror, whatever the memory space
  never,      // straight to MPI, whatever the memory space (the MPI must then read it)
};

// Whether the MPI library says it reads and writes `device` memory (CUDA or
// HIP; false for other memory and other libraries). MPI must be initialised.
inline bool mpi_reads_device_memory(memory_kind device) {
  bool const cuda = device == memory_kind::cuda, hip = device == memory_kind::hip;
#if defined(OMPI_HAVE_MPI_EXT_CUDA) && OMPI_HAVE_MPI_EXT_CUDA
  if (cuda) return MPIX_Query_cuda_support() == 1;
#endif
#if defined(OMPI_HAVE_MPI_EXT_ROCM) && OMPI_HAVE_MPI_EXT_ROCM
  if (hip) return MPIX_Query_rocm_support() == 1;
#endif
#if defined(MPICH_NUMVERSION) && defined(MPIX_GPU_SUPPORT_CUDA) && defined(MPIX_GPU_SUPPORT_HIP)
  if (cuda || hip) {
    int supported = 0;
    MPIX_GPU_query_support(cuda ? MPIX_GPU_SUPPORT_CUDA : MPIX_GPU_SUPPORT_HIP, &supported);
    return supported != 0;
  }
#endif
  (void)cuda;
  (void)hip;
  return false;
}

// Whether MPI is handed `device` memory directly: SHARDMESH_GPU_AWARE_MPI=1
// or =0 forces it, else the MPI library says.
inline bool gpu_aware_mpi(memory_kind device) {
  if (char const* forced = std::getenv("SHARDMESH_GPU_AWARE_MPI")) return std::string_view(forced) == "1";
  return mpi_reads_device_memory(device);
}

// The execution space that works on data in Space (a memory space or a device).
template <class Space>
using execution_space_of = typename Space::execution_space;

template <class Space>
inline constexpr bool host_accessible_v = Kokkos::SpaceAccessibility<Kokkos::HostSpace, Space>::accessible;

// Where memory of Space (a memory or execution space) lives (memory_kind.hpp).
template <class Space>
constexpr memory_kind memory_kind_of() {
  using memory = typename Space::memory_space;
  if constexpr (host_accessible_v<memory>) return memory_kind::host;
#if defined(KOKKOS_ENABLE_CUDA)
  if constexpr (std::is_same_v<execution_space_of<memory>, Kokkos::Cuda>) return memory_kind::cuda;
#endif
#if defined(KOKKOS_ENABLE_HIP)
  if constexpr (std::is_same_v<execution_space_of<memory>, Kokkos::HIP>) return memory_kind::hip;
#endif
  return memory_kind::other_device;
}

// Whether MPI must see a host copy of data in Space under policy.
template <class Space>
bool needs_staging(staging_policy policy = staging_policy::automatic) {
  if (policy != staging_policy::automatic) return policy == staging_policy::always;
  if constexpr (host_accessible_v<Space>)
    return false;
  else
    return !gpu_aware_mpi(memory_kind_of<Space>());
}

// A block of a buffer that MPI reads or writes: elements [offset, offset + count).
struct buffer_part {
  std::size_t offset = 0;
  std::size_t count = 0;
};

template <class T, class Space>
class staged_buffer {
 public:
  using view_type = Kokkos::View<T*, Space>;

  // MPI uses all of view.
  explicit staged_buffer(view_type view, staging_policy policy = staging_policy::automatic)
      : staged_buffer(view, policy,
                      needs_staging<typename view_type::memory_space>(policy)
                          ? std::vector<buffer_part>{{0, view.extent(0)}}
                          : std::vector<buffer_part>{}) {}
  // MPI uses only `parts` of view (an all-to-all's blocks, which may leave
  // out what a rank keeps): only they are copied, so a staged receive
  // leaves the rest of view as it was. Precondition: the parts lie within view.
  staged_buffer(view_type view, staging_policy policy, std::vector<buffer_part> parts) : view_(view) {
    if (!needs_staging<typename view_type::memory_space>(policy)) return;
    staged_ = true;
    host_ = host_view(Kokkos::view_alloc(Kokkos::WithoutInitializing, std::string(view.label()) + " (staged)"),
                      view.extent(0));
    std::sort(parts.begin(), parts.end(), [](buffer_part a, buffer_part b) { return a.offset < b.offset; });
    for (buffer_part p : parts) {
      if (p.count == 0) continue;
      if (!ranges_.empty() && p.offset <= ranges_.back().second)
        ranges_.back().second = std::max(ranges_.back().second, p.offset + p.count);
      else
        ranges_.emplace_back(p.offset, p.offset + p.count);
    }
  }

  // Whether MPI sees a host mirror rather than the View.
  [[nodiscard]] bool staged() const { return staged_; }
  // The bytes each copy between the View and its mirror moves: 0 unless staged.
  [[nodiscard]] std::size_t staged_bytes() const {
    std::size_t n = 0;
    for (auto const& [begin, end] : ranges_) n += end - begin;
    return n * sizeof(T);
  }
  // The pointer to hand MPI.
  [[nodiscard]] T* data() const { return staged() ? host_.data() : view_.data(); }
  // Before MPI reads the buffer: copied on exec, which is then fenced.
  template <class ExecutionSpace>
  void to_mpi(ExecutionSpace const& exec) const {
    copy(exec, [&](range r) { Kokkos::deep_copy(exec, part(host_, r), part(view_, r)); });
  }
  // After MPI wrote the buffer: copied on exec, which is then fenced.
  template <class ExecutionSpace>
  void from_mpi(ExecutionSpace const& exec) const {
    copy(exec, [&](range r) { Kokkos::deep_copy(exec, part(view_, r), part(host_, r)); });
  }

 private:
  using host_view = Kokkos::View<T*, Kokkos::HostSpace>;
  using range = std::pair<std::size_t, std::size_t>;

  template <class View>
  static auto part(View const& v, range r) {
    return Kokkos::subview(v, r);
  }
  template <class ExecutionSpace, class Copy>
  void copy(ExecutionSpace const& exec, Copy&& one) const {
    if (ranges_.empty()) return;  // not staged, or nothing to copy
    for (range r : ranges_) one(r);
    exec.fence("shardmesh::staging");
  }

  view_type view_;
  bool staged_ = false;
  host_view host_;
  std::vector<range> ranges_;  // sorted, disjoint; empty unless staged
};

}  // namespace shardmesh
