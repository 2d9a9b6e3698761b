#pragma once
// Softmax over the rows of a rank's local shard: views [rows, n], the
// normalised dimension contiguous (as_rows(shard, n) gives one). A team per
// row: the row's max and sum are row reductions (row_loops.hpp), in
// accumulation_t of the elements (float for bf16 and fp16).

#include "shardmesh/comm/reduced_precision.hpp"
#include "shardmesh/ops/local/exponential.hpp"
#include "shardmesh/ops/local/reshape.hpp"
#include "shardmesh/ops/local/row_loops.hpp"

#include <Kokkos_Core.hpp>

#include <cstddef>
#include <optional>
#include <stdexcept>

namespace shardmesh::ops::local {

// A causal mask over a shard of a [..., queries, keys] tensor: row r is query
// position (r % period) + row_offset and column c is key position
// c + col_offset; a key after its query gets probability exactly 0. period
// is the number of query rows per batch on this rank (rows cycle through
// the batch's queries); the offsets place the shard in the global tensor.
struct causal_mask {
  std::size_t period;
  std::size_t row_offset;
  std::size_t col_offset;
};

namespace detail {

// How many leading columns of row r the mask leaves: keys are visible up to
// their query, so the visible columns are a prefix.
KOKKOS_INLINE_FUNCTION std::size_t visible_columns(causal_mask const& m, std::size_t r, std::size_t n) {
  std::size_t const query = r % m.period + m.row_offset;
  if (query < m.col_offset) return 0;
  return query - m.col_offset < n ? query - m.col_offset + 1 : n;
}

}  // namespace detail

// y = softmax(x) along each row, computed as exp(x - row max) / sum. With a
// mask, masked entries are 0 and take no part; a row with nothing visible
// (or whose visible entries are all -inf) is all zeros. y may be x. A mask
// with period 0 throws std::invalid_argument.
template <class ExecSpace, local_view<2, ExecSpace> X, local_view<2, ExecSpace> Y>
void softmax_forward(ExecSpace const& exec, X const& x, Y const& y, std::optional<causal_mask> const& mask = {}) {
  detail::require_same_extents("softmax_forward", "x", x, "y", y);
  if (mask && mask->period == 0)
    throw std::invalid_argument("shardmesh::ops::local::softmax_forward: a causal mask's period is 0");
  using T = typename Y::non_const_value_type;
  using A = accumulation_t<typename X::non_const_value_type>;
  using policy = Kokkos::TeamPolicy<ExecSpace>;
  std::size_t const n = x.extent(1);
  bool const masked = mask.has_value();
  causal_mask const m = mask.value_or(causal_mask{1, 0, 0});
  Kokkos::parallel_for(
      "shardmesh::softmax_forward", policy(exec, detail::league_size("softmax_forward", x.extent(0)), Kokkos::AUTO),
      KOKKOS_LAMBDA(typename policy::member_type const& team) {
        auto const r = static_cast<std::size_t>(team.league_rank());
        auto const xr = detail::row(x, r);
        auto const yr = detail::row(y, r);
        std::size_t visible = masked ? detail::visible_columns(m, r, n) : n;
        A const top = detail::row_max(team, visible, [&](std::size_t j) { return static_cast<A>(xr[j]); });
        if (top == Kokkos::reduction_identity<A>::max()) visible = 0;  // -inf everywhere: no finite weight
        // The exponentials are kept in y: one exp per entry (summed before y's rounding).
        A const total = detail::row_sum(team, visible, [&](std::size_t j) {
          A const e = exponential(static_cast<A>(xr[j]) - top);
          yr[j] = static_cast<T>(e);
          return e;
        });
        team.team_barrier();
        A const inverse = static_cast<A>(1) / total;
        detail::row_for(team, n, [&](std::size_t j) {
          yr[j] = static_cast<T>(j < visible ? static_cast<A>(yr[j]) * inverse : static_cast<A>(0));
        });
      });
}

// dx = y * (dy - sum_j dy_j y_j) along each row: the gradient through
// softmax_forward, masked or not (masked entries have y = 0, so dx = 0).
// dx may be dy.
template <class ExecSpace, local_view<2, ExecSpace> Y, local_view<2, ExecSpace> DY, local_view<2, ExecSpace> DX>
void softmax_backward(ExecSpace const& exec, Y const& y, DY const& dy, DX const& dx) {
  detail::require_same_extents("softmax_backward", "y", y, "dy", dy);
  detail::require_same_extents("softmax_backward", "y", y, "dx", dx);
  using T = typename DX::non_const_value_type;
  using A = accumulation_t<typename Y::non_const_value_type>;
  using policy = Kokkos::TeamPolicy<ExecSpace>;
  std::size_t const n = y.extent(1);
  Kokkos::parallel_for(
      "shardmesh::softmax_backward", policy(exec, detail::league_size("softmax_backward", y.extent(0)), Kokkos::AUTO),
      KOKKOS_LAMBDA(typename policy::member_type const& team) {
        auto const r = static_cast<std::size_t>(team.league_rank());
        auto const yr = detail::row(y, r);
        auto const dyr = detail::row(dy, r);
        auto const dxr = detail::row(dx, r);
        A const dot =
            detail::row_sum(team, n, [&](std::size_t j) { return static_cast<A>(dyr[j]) * static_cast<A>(yr[j]); });
        detail::row_for(team, n, [&](std::size_t j) {
          dxr[j] = static_cast<T>(static_cast<A>(yr[j]) * (static_cast<A>(dyr[j]) - dot));
        });
      });
}

}  // namespace shardmesh::ops::local
