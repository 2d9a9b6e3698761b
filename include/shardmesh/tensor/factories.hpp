#pragma once
// Tensors of a layout on a mesh, and the blocks of them a rank holds:
//
//   auto x = zeros<double>(mesh, layout{shard("r"), cyclic("c", 16)}, {1000, 999});
//   auto y = full<float, cols>(mesh, {64, 64}, 1.0f);     // a constant layout
//   for (owned_block const& b : owned_blocks(x)) ...       // global and local offsets
//
// Collective over the mesh: every rank checks that all agree on the layout
// and extents, and that the layout is valid there, before anything is
// allocated (the same typed error everywhere otherwise). A partial layout
// holds the value once: the first rank of each group it is partial over
// holds `value`, the others the identity of its reduction, so the reduced
// tensor is `value` everywhere.

#include "shardmesh/algebra/owned_blocks.hpp"
#include "shardmesh/tensor/detail/step_execution.hpp"
#include "shardmesh/tensor/dtensor.hpp"

#include <Kokkos_Core.hpp>

#include <array>
#include <cstddef>
#include <vector>

namespace shardmesh {

namespace detail {

template <class T, std::size_t Rank, class MemorySpace>
dynamic_dtensor<T, Rank, MemorySpace> allocated(char const* operation, device_mesh const& mesh, layout const& l,
                                                std::array<std::size_t, Rank> const& global) {
  using tensor = dynamic_dtensor<T, Rank, MemorySpace>;
  tensor_index g{};
  for (std::size_t d = 0; d < Rank; ++d) g[d] = global[d];
  // An invalid layout has no local extents: check_agreed then throws on every rank.
  tensor_index local{};
  if (!mesh.empty() && l.rank == Rank && layout_error<T>(operation, mesh.shape(), l).empty())
    local = local_extents(mesh.shape(), bind(mesh.shape(), l), g, mesh.rank());
  tensor x = tensor::adopt(mesh, l, g, allocate<typename tensor::view_type>("shardmesh::tensor", local));
  x.check_agreed(operation);
  return x;
}

template <class T, std::size_t Rank, class MemorySpace>
dynamic_dtensor<T, Rank, MemorySpace> filled(char const* operation, device_mesh const& mesh, layout const& l,
                                             std::array<std::size_t, Rank> const& global, T value,
                                             execution_space_of<MemorySpace> const& exec) {
  auto x = allocated<T, Rank, MemorySpace>(operation, mesh, l, global);
  bound_layout const b = x.bound();
  bool const holds_value = group_position(mesh.shape(), b.partial_axes, mesh.rank()) == 0;
  Kokkos::deep_copy(exec, x.local(), holds_value ? value : reduction_identity<T>(b.op));
  exec.fence("shardmesh::full");
  return x;
}

}  // namespace detail

// Uninitialised.
template <class T, class MemorySpace = Kokkos::DefaultExecutionSpace::memory_space, std::size_t Rank>
[[nodiscard]] dynamic_dtensor<T, Rank, MemorySpace> empty(device_mesh const& mesh, layout const& l,
                                                          std::array<std::size_t, Rank> const& global) {
  return detail::allocated<T, Rank, MemorySpace>("empty", mesh, l, global);
}

template <class T, class MemorySpace = Kokkos::DefaultExecutionSpace::memory_space, std::size_t Rank>
[[nodiscard]] dynamic_dtensor<T, Rank, MemorySpace> full(device_mesh const& mesh, layout const& l,
                                                         std::array<std::size_t, Rank> const& global, T value,
                                                         execution_space_of<MemorySpace> const& exec = {}) {
  return detail::filled<T, Rank, MemorySpace>("full", mesh, l, global, value, exec);
}

template <class T, class MemorySpace = Kokkos::DefaultExecutionSpace::memory_space, std::size_t Rank>
[[nodiscard]] dynamic_dtensor<T, Rank, MemorySpace> zeros(device_mesh const& mesh, layout const& l,
                                                          std::array<std::size_t, Rank> const& global,
                                                          execution_space_of<MemorySpace> const& exec = {}) {
  return detail::filled<T, Rank, MemorySpace>("zeros", mesh, l, global, T(0), exec);
}

// The same with extents written in braces: zeros<double>(mesh, l, {4, 6}).
template <class T, class MemorySpace = Kokkos::DefaultExecutionSpace::memory_space, std::size_t Rank>
[[nodiscard]] dynamic_dtensor<T, Rank, MemorySpace> empty(device_mesh const& mesh, layout const& l,
                                                          std::size_t const (&global)[Rank]) {
  return empty<T, MemorySpace>(mesh, l, std::to_array(global));
}

template <class T, class MemorySpace = Kokkos::DefaultExecutionSpace::memory_space, std::size_t Rank>
[[nodiscard]] dynamic_dtensor<T, Rank, MemorySpace> full(device_mesh const& mesh, layout const& l,
                                                         std::size_t const (&global)[Rank], T value,
                                                         execution_space_of<MemorySpace> const& exec = {}) {
  return full<T, MemorySpace>(mesh, l, std::to_array(global), value, exec);
}

template <class T, class MemorySpace = Kokkos::DefaultExecutionSpace::memory_space, std::size_t Rank>
[[nodiscard]] dynamic_dtensor<T, Rank, MemorySpace> zeros(device_mesh const& mesh, layout const& l,
                                                          std::size_t const (&global)[Rank],
                                                          execution_space_of<MemorySpace> const& exec = {}) {
  return zeros<T, MemorySpace>(mesh, l, std::to_array(global), exec);
}

// Constant layouts: the layout's own checks ran at compile time (dtensor).
template <class T, layout Layout, class MemorySpace = Kokkos::DefaultExecutionSpace::memory_space>
[[nodiscard]] dtensor<T, Layout, MemorySpace> empty(device_mesh const& mesh,
                                                    std::array<std::size_t, Layout.rank> const& global) {
  return dtensor<T, Layout, MemorySpace>(empty<T, MemorySpace>(mesh, Layout, global));
}

template <class T, layout Layout, class MemorySpace = Kokkos::DefaultExecutionSpace::memory_space>
[[nodiscard]] dtensor<T, Layout, MemorySpace> full(device_mesh const& mesh,
                                                   std::array<std::size_t, Layout.rank> const& global, T value,
                                                   execution_space_of<MemorySpace> const& exec = {}) {
  return dtensor<T, Layout, MemorySpace>(full<T, MemorySpace>(mesh, Layout, global, value, exec));
}

template <class T, layout Layout, class MemorySpace = Kokkos::DefaultExecutionSpace::memory_space>
[[nodiscard]] dtensor<T, Layout, MemorySpace> zeros(device_mesh const& mesh,
                                                    std::array<std::size_t, Layout.rank> const& global,
                                                    execution_space_of<MemorySpace> const& exec = {}) {
  return dtensor<T, Layout, MemorySpace>(zeros<T, MemorySpace>(mesh, Layout, global, exec));
}

// The blocks of x's shard, with their global and local offsets (owned_blocks.hpp).
template <class T, std::size_t Rank, class MemorySpace>
[[nodiscard]] std::vector<owned_block> owned_blocks(dynamic_dtensor<T, Rank, MemorySpace> const& x) {
  require_held("owned_blocks", x);
  return owned_blocks(x.mesh().shape(), x.bound(), x.global_extents(), x.mesh().rank());
}

}  // namespace shardmesh
