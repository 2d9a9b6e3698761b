#pragma once
// A tensor of a layout made element by element from its global indices, on
// the tensor's memory's execution space: each rank computes exactly the
// elements it holds, and no rank builds the global tensor (parameters
// initialised shard by shard, nn/initializer.hpp).
//
//   auto w = generate<float>(mesh, layout{shard("tp"), replicate()}, {1024, 256},
//                            KOKKOS_LAMBDA(std::size_t i) { return 0.001 * static_cast<double>(i % 7); });
//
// f(i) takes the row-major global index of an element and runs on the
// device (a KOKKOS_LAMBDA, or a functor whose call is KOKKOS_FUNCTION); its
// result converts to T. Collective as zeros is (tensor/factories.hpp):
// every rank checks that all agree on the layout and extents first. A
// partial layout holds f's values once: on the first rank of each group it
// is partial over, the identity of its reduction on the others.

#include "shardmesh/algebra/axis_groups.hpp"
#include "shardmesh/algebra/owned_blocks.hpp"
#include "shardmesh/tensor/dtensor.hpp"
#include "shardmesh/tensor/factories.hpp"

#include <Kokkos_Core.hpp>

#include <array>
#include <cstddef>

namespace shardmesh {

template <class T, class MemorySpace = Kokkos::DefaultExecutionSpace::memory_space, std::size_t Rank, class F>
[[nodiscard]] dynamic_dtensor<T, Rank, MemorySpace> generate(device_mesh const& mesh, layout const& l,
                                                             std::array<std::size_t, Rank> const& global, F const& f,
                                                             execution_space_of<MemorySpace> const& exec = {}) {
  auto x = detail::allocated<T, Rank, MemorySpace>("generate", mesh, l, global);
  bound_layout const b = x.bound();
  auto const local = x.local();
  if (group_position(mesh.shape(), b.partial_axes, mesh.rank()) != 0) {
    Kokkos::deep_copy(exec, local, detail::reduction_identity<T>(b.op));
    exec.fence("shardmesh::generate");
    return x;
  }
  Kokkos::Array<std::size_t, Rank> global_stride{}, local_stride{};  // row-major
  std::size_t g = 1, h = 1;
  for (std::size_t d = Rank; d-- > 0;) {
    global_stride[d] = g;
    local_stride[d] = h;
    g *= global[d];
    h *= local.extent(d);
  }
  T* const data = local.data();
  for (owned_block const& block : owned_blocks(mesh.shape(), b, x.global_extents(), mesh.rank())) {
    Kokkos::Array<std::size_t, Rank> extents{}, first_global{}, first_local{};
    std::size_t count = 1;
    for (std::size_t d = 0; d < Rank; ++d) {
      extents[d] = block.extents[d];
      first_global[d] = block.global_offset[d];
      first_local[d] = block.local_offset[d];
      count *= block.extents[d];
    }
    Kokkos::parallel_for(
        "shardmesh::generate", Kokkos::RangePolicy<execution_space_of<MemorySpace>>(exec, 0, count),
        KOKKOS_LAMBDA(std::size_t k) {
          std::size_t at = 0, index = 0;
          for (std::size_t d = Rank; d-- > 0;) {
            std::size_t const i = k % extents[d];
            k /= extents[d];
            index += (first_global[d] + i) * global_stride[d];
            at += (first_local[d] + i) * local_stride[d];
          }
          data[at] = static_cast<T>(f(index));
        });
  }
  exec.fence("shardmesh::generate");
  return x;
}

}  // namespace shardmesh
