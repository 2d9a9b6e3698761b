#pragma once
// An execution-space instance beside a given one, for work that must not
// queue behind it: the trainer packs and unpacks prefetched parameter
// gathers there while the layers compute on the given instance. On a
// device (CUDA, HIP: memory the host cannot read) it is a stream of its
// own (partition_space); on the host it is the given instance itself:
// host kernels run to completion when launched, so a second instance would
// only split the rank's threads between compute and copies.

#include <Kokkos_Core.hpp>

namespace shardmesh {

template <class ExecSpace>
[[nodiscard]] ExecSpace side_instance(ExecSpace const& exec) {
  if constexpr (Kokkos::SpaceAccessibility<Kokkos::HostSpace, typename ExecSpace::memory_space>::accessible)
    return exec;
  else
    return Kokkos::Experimental::partition_space(exec, 1)[0];
}

}  // namespace shardmesh
