#pragma once
// Softmax cross-entropy of logits [..., classes] against integer targets
// [...], averaged over a count every rank agrees on (by default the rows
// whose target is not negative: a negative target marks padding, which adds
// nothing to the loss or its gradient).
// The classes may be sharded (vocabulary parallelism): each rank works on
// its classes; the row max, the sum of exponentials and the target's logit
// are reductions over a sharded dimension, so they come out partial
// (algebra/propagation.hpp) and their all-reduces are planned like any
// other move. The logits are never gathered.

#include "shardmesh/algebra/axis_groups.hpp"
#include "shardmesh/algebra/propagation.hpp"
#include "shardmesh/algebra/shard_geometry.hpp"
#include "shardmesh/comm/all_reduce.hpp"
#include "shardmesh/ops/detail/op_support.hpp"
#include "shardmesh/ops/elementwise.hpp"
#include "shardmesh/ops/local/cross_entropy.hpp"
#include "shardmesh/ops/local/reshape.hpp"
#include "shardmesh/ops/reduction.hpp"
#include "shardmesh/tensor/device_scalar.hpp"
#include "shardmesh/tensor/dtensor.hpp"

#include <cstddef>
#include <string>

namespace shardmesh::ops {

// The loss, the sums and the scale in accumulation_t<T> (float for bf16 and fp16 logits).
// The loss stays in MemorySpace until read (tensor/device_scalar.hpp).
template <class T, std::size_t Rank, class MemorySpace>
struct cross_entropy_result {
  using accumulation = accumulation_t<T>;
  device_scalar<accumulation, MemorySpace> loss;
  // For backward: the logits as used, each row's max and sum of exponentials, the targets.
  dynamic_dtensor<T, Rank, MemorySpace> logits;
  dynamic_dtensor<accumulation, Rank - 1, MemorySpace> max, sum_exp;
  dynamic_dtensor<int, Rank - 1, MemorySpace> targets;
  accumulation scale;  // 1 / count
};

namespace detail {

// The first class of this rank's shard of the last dimension.
template <class T, std::size_t Rank, class MemorySpace>
std::size_t class_offset(dynamic_dtensor<T, Rank, MemorySpace> const& x) {
  bound_dim const classes = x.bound().dims[Rank - 1];
  if (classes.dist != distribution::block)
    throw invalid_layout_error("cross_entropy: the classes of " + x.notation() + " must be in blocks");
  return block_interval(x.mesh().shape(), classes, x.global_extents()[Rank - 1], x.mesh().coordinates()).begin;
}

}  // namespace detail

// count: the number of rows the loss averages over (0: the rows whose target
// is not negative, which the host then reads; a count given reads nothing).
template <class T, std::size_t Rank, class MemorySpace>
[[nodiscard]] cross_entropy_result<T, Rank, MemorySpace> cross_entropy(
    dynamic_dtensor<T, Rank, MemorySpace> const& logits, dynamic_dtensor<int, Rank - 1, MemorySpace> const& targets,
    double count = 0, execution_space_of<MemorySpace> const& exec = {}) {
  static_assert(Rank >= 2, "cross_entropy: logits are [..., classes]");
  require_held("cross_entropy", logits, targets);
  detail::require_same_mesh("cross_entropy", logits, targets);
  for (std::size_t d = 0; d + 1 < Rank; ++d)
    if (targets.global_extents()[d] != logits.global_extents()[d])
      throw mismatched_tensor_error("cross_entropy: targets " + targets.notation() + " do not fit " +
                                    logits.notation());
  bound_layout whole = logits.bound();  // partial logits are reduced first: the loss is not linear
  whole.partial_axes = {};
  whole.op = reduce_op::sum;
  auto const x = detail::to_layout(logits, whole, exec);
  // Row max: P(max) over the axes sharding the classes, then whole.
  auto const partial_max = reduce(x, Rank - 1, reduce_op::max, exec);
  bound_layout rows = partial_max.bound();
  rows.partial_axes = {};
  rows.op = reduce_op::sum;
  using A = accumulation_t<T>;
  auto const max = detail::converted<A>(detail::to_layout(partial_max, rows, exec), exec);  // a statistic: in A
  // Sum of exponentials and the target's logit: P(sum) the same way.
  bound_layout partial_rows = partial_max.bound();
  partial_rows.op = reduce_op::sum;
  tensor_index const row_extents = partial_max.global_extents();
  auto sum_exp = detail::make_like<A, Rank - 1, MemorySpace>(x.mesh(), partial_rows, row_extents);
  auto picked = detail::make_like<A, Rank - 1, MemorySpace>(x.mesh(), partial_rows, row_extents);
  auto const t = detail::to_layout(targets, rows, exec);
  local::cross_entropy_parts(exec, detail::rows_of(x.local()), local::flat(max.local()), local::flat(t.local()),
                             detail::class_offset(x), local::flat(sum_exp.local()), local::flat(picked.local()));
  auto const s = detail::to_layout(sum_exp, rows, exec);
  auto const p = detail::to_layout(picked, rows, exec);
  // Each row's loss, log(sum) + max - picked, summed over every row.
  auto const loss_rows = detail::make_like<A, Rank - 1, MemorySpace>(x.mesh(), rows, row_extents);
  auto const lv = local::flat(loss_rows.local());
  auto const sv = local::flat(s.local());
  auto const mv = local::flat(max.local());
  auto const pv = local::flat(p.local());
  auto const tv = local::flat(t.local());
  Kokkos::parallel_for(
      "shardmesh::cross_entropy_rows", Kokkos::RangePolicy<execution_space_of<MemorySpace>>(exec, 0, lv.size()),
      KOKKOS_LAMBDA(std::size_t i) { lv(i) = tv(i) < 0 ? A(0) : Kokkos::log(sv(i)) + mv(i) - pv(i); });
  // The loss summed over every row and the rows that count, in one all-reduce, in MemorySpace.
  Kokkos::View<double*, MemorySpace> sums("shardmesh::cross_entropy", 2);
  Kokkos::parallel_reduce(
      "shardmesh::cross_entropy_sum", Kokkos::RangePolicy<execution_space_of<MemorySpace>>(exec, 0, lv.size()),
      KOKKOS_LAMBDA(std::size_t i, double& acc) { acc += static_cast<double>(lv(i)); }, Kokkos::subview(sums, 0));
  Kokkos::parallel_reduce(
      "shardmesh::cross_entropy_count", Kokkos::RangePolicy<execution_space_of<MemorySpace>>(exec, 0, tv.size()),
      KOKKOS_LAMBDA(std::size_t i, double& acc) { acc += tv(i) < 0 ? 0.0 : 1.0; }, Kokkos::subview(sums, 1));
  axis_set const axes = sharding_axes(loss_rows.bound());
  if (!axes.empty()) all_reduce(x.mesh().group(axes), sums, reduce_op::sum, exec);
  double averaged = count;
  if (count <= 0) {  // the host reads the rows that count
    Kokkos::deep_copy(exec, averaged, Kokkos::subview(sums, 1));
    exec.fence("shardmesh::cross_entropy: the rows that count, read");
  }
  A const scale = static_cast<A>(averaged > 0 ? 1.0 / averaged : 0.0);
  typename device_scalar<A, MemorySpace>::view_type loss("shardmesh::cross_entropy_loss");
  Kokkos::parallel_for(
      "shardmesh::cross_entropy_loss", Kokkos::RangePolicy<execution_space_of<MemorySpace>>(exec, 0, 1),
      KOKKOS_LAMBDA(int) { loss() = static_cast<A>(sums(0)) * scale; });
  return {device_scalar<A, MemorySpace>(loss), x, max, s, t, scale};
}

// d(loss)/d(logits), in the layout the forward used, times dloss.
template <class T, std::size_t Rank, class MemorySpace>
[[nodiscard]] dynamic_dtensor<T, Rank, MemorySpace> cross_entropy_backward(
    cross_entropy_result<T, Rank, MemorySpace> const& f, accumulation_t<T> dloss = 1,
    execution_space_of<MemorySpace> const& exec = {}) {
  require_held("cross_entropy_backward", f.logits, f.max, f.sum_exp, f.targets);
  auto const& x = f.logits;
  auto dx = detail::make_like<T, Rank, MemorySpace>(x.mesh(), x.bound(), x.global_extents());
  local::cross_entropy_backward(exec, detail::rows_of(x.local()), local::flat(f.max.local()),
                                local::flat(f.sum_exp.local()), local::flat(f.targets.local()), detail::class_offset(x),
                                f.scale * dloss, detail::rows_of(dx.local()));
  return dx;
}

}  // namespace shardmesh::ops
