#pragma once
// What a mixture-of-experts layer's forward keeps for its backward
// (nn/mixture_of_experts.hpp), in one piece: a pipeline stashes it whole
// per micro-batch, since the routing and the exchange's plan belong to
// that micro-batch as much as its rows do.

#include "shardmesh/algebra/axis_set.hpp"
#include "shardmesh/ops/expert_exchange.hpp"
#include "shardmesh/ops/local/router.hpp"
#include "shardmesh/tensor/dtensor.hpp"

#include <Kokkos_Core.hpp>

#include <optional>

namespace shardmesh::parallel::detail {

template <class T, class MemorySpace>
struct experts_saved {
  using rows_view = Kokkos::View<T**, Kokkos::LayoutRight, MemorySpace>;

  dynamic_dtensor<T, 3, MemorySpace> x;  // the input
  axis_set token_axes;                   // the axes that split its tokens
  double auxiliary_weight = 0;           // d objective / d auxiliary losses
  ops::local::routing routing;
  std::optional<ops::expert_exchange<MemorySpace>> exchange;
  Kokkos::View<accumulation_t<T>**, Kokkos::LayoutRight, MemorySpace> gates;  // [N, k]
  rows_view rows_in, hidden, slots;  // rows at the experts, their hidden pre-activations, outputs back at the slots
};

}  // namespace shardmesh::parallel::detail
