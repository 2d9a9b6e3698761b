#pragma once
// A mixture-of-experts MLP with its experts split on a mesh axis ("ep"):
// expert parallelism. Per token: router logits x.W_r ([C, E], every rank
// whole), the top k experts and their renormalised gates
// (ops/local/router.hpp), the token sent to each chosen expert's rank
// (ops/expert_exchange.hpp), each expert's GELU MLP (W_up [C, F], W_down
// [F, C]) on the rows it received, the outputs brought back and summed with
// the gates. The experts' weights [E, C, F] and [E, F, C] are split on the
// experts by the axis (S(ep),R,R): a rank holds E/ep experts whole. Tensor
// parallelism inside the experts is not supported.
//
// The input [b, t, c] keeps its features whole and must have its tokens
// split on the expert axis (the batch or the sequence sharded on it, with
// any other axes: data parallelism beside ep). Gradients: the router's is
// partial over every axis that splits the tokens; an expert's covers every
// token routed to it from the expert axis and is partial over the other
// token axes only (a data-parallel replica's experts see that replica's
// tokens): both are left to the parameter's accumulation, as the trainer
// reduces any gradient.
//
// The auxiliary losses (the load-balancing loss and, optionally, the router
// z-loss) are over every token of the call, on all the ranks that split
// them (their sums all-reduced over the token axes: one message of 2E + 2
// numbers), so they do not depend on how the batch is split; weighted by
// their options they are returned by auxiliary_loss(), the same on every
// rank. The caller adds them to its objective with a weight it gives to
// forward (d objective / d auxiliary_loss()), and backward adds their
// gradient. The router runs on the host: one copy of the logits there and
// one of their gradient back per call (the choices decide every count of
// the exchange).

#include "shardmesh/comm/all_reduce.hpp"
#include "shardmesh/nn/detail/experts_saved.hpp"
#include "shardmesh/nn/parameter.hpp"
#include "shardmesh/ops/detail/op_support.hpp"
#include "shardmesh/ops/expert_exchange.hpp"
#include "shardmesh/ops/layer_support.hpp"
#include "shardmesh/ops/local/gelu.hpp"
#include "shardmesh/ops/local/router.hpp"
#include "shardmesh/ops/local_gemm.hpp"
#include "shardmesh/tensor/dtensor.hpp"

#include <Kokkos_Core.hpp>

#include <algorithm>
#include <cstddef>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace shardmesh::parallel {

namespace detail {

// C [m, n] = alpha A [m, k] B [k, n] + beta C, row-major; A or B read transposed where asked (stored [k, m], [n, k]).
template <class T, class Out, class Exec>
void product(Exec const& exec, std::size_t m, std::size_t n, std::size_t k, T const* a, bool a_transposed, T const* b,
             bool b_transposed, accumulation_t<T> beta, Out* c) {
  ops::gemm_shape const s{0, {}, m, n, k};
  auto const strides = [](bool transposed, std::size_t columns) {
    auto const ld = static_cast<std::ptrdiff_t>(columns);
    return transposed ? ops::gemm_strides{{}, 1, ld} : ops::gemm_strides{{}, ld, 1};
  };
  ops::local_gemm<T, Out>(exec, s, accumulation_t<T>(1), a, strides(a_transposed, a_transposed ? m : k), b,
                          strides(b_transposed, b_transposed ? k : n), beta, c,
                          ops::gemm_strides{{}, static_cast<std::ptrdiff_t>(n), 1});
}

// y[n] = sum_j gate(n, j) slot(n k + j). (A free function: nvcc takes no device lambda in a private member.)
template <class Exec, class Slots, class Gates, class Y>
void combine(Exec const& exec, Slots const& slots, Gates const& gates, Y const& y) {
  using A = typename Gates::non_const_value_type;
  using T = typename Y::non_const_value_type;
  std::size_t const k = gates.extent(1);
  Kokkos::parallel_for(
      "shardmesh::mixture_of_experts::combine",
      Kokkos::MDRangePolicy<Exec, Kokkos::Rank<2>>(exec, {0, 0}, {y.extent(0), y.extent(1)}),
      KOKKOS_LAMBDA(std::size_t n, std::size_t c) {
        A sum = 0;
        for (std::size_t j = 0; j < k; ++j) sum += gates(n, j) * static_cast<A>(slots(n * k + j, c));
        y(n, c) = static_cast<T>(sum);
      });
}

}  // namespace detail

template <class T, class MemorySpace>
class mixture_of_experts {
 public:
  using activation = dynamic_dtensor<T, 3, MemorySpace>;
  using router_weight = parameter<T, 2, MemorySpace>;  // [C, E]
  using expert_weight = parameter<T, 3, MemorySpace>;  // [E, C, F] up, [E, F, C] down
  using exec_type = execution_space_of<MemorySpace>;
  using A = accumulation_t<T>;
  using rows_view = Kokkos::View<T**, Kokkos::LayoutRight, MemorySpace>;

  struct options {
    std::size_t top_k = 2;
    double capacity_factor = 0;  // 0: dropless
    double balance = 0.01;       // the load-balancing loss's weight
    double z_loss = 0;           // the router z-loss's weight (0: off)
    std::string axis = "ep";
  };

  mixture_of_experts() = default;
  mixture_of_experts(router_weight router, expert_weight up, expert_weight down, options o)
      : router_(std::move(router)), up_(std::move(up)), down_(std::move(down)), options_(std::move(o)) {
    mesh_shape const& mesh = router_.mesh().shape();
    std::size_t const a = mesh.find(options_.axis);
    if (a == npos)
      throw invalid_option_error("mixture_of_experts: the mesh has no axis \"" + options_.axis + "\" for the experts");
    auto const split = [&](expert_weight const& w) {
      bound_layout const& l = w.compute_layout();
      return l.dims[0].count == 1 && l.dims[0].axes[0] == a && l.dims[1].count == 0 && l.dims[2].count == 0;
    };
    if (!split(up_) || !split(down_) || router_.compute_layout().dims[0].count + router_.compute_layout().dims[1].count)
      throw invalid_layout_error("mixture_of_experts: the experts' weights must be S(" + options_.axis +
                                 "),R,R and the router's R,R");
    std::size_t const E = up_.global_extents()[0], C = up_.global_extents()[1], F = up_.global_extents()[2];
    if (router_.global_extents()[0] != C || router_.global_extents()[1] != E || down_.global_extents()[0] != E ||
        down_.global_extents()[1] != F || down_.global_extents()[2] != C)
      throw mismatched_tensor_error("mixture_of_experts: router [C, E], up [E, C, F] and down [E, F, C] disagree");
    if (std::size_t const ep = mesh.extent(a); E % ep != 0)
      throw invalid_option_error("mixture_of_experts: " + std::to_string(E) + " experts do not split evenly over " +
                                 options_.axis + " = " + std::to_string(ep));
    if (options_.top_k == 0 || options_.top_k > E)
      throw invalid_option_error("mixture_of_experts: top-" + std::to_string(options_.top_k) + " of " +
                                 std::to_string(E) + " experts");
  }

  // visit(name, parameter): prefix + "router", "experts_up", "experts_down".
  template <class Visit>
  void for_each_parameter(std::string const& prefix, Visit&& visit) {
    visit(prefix + "router", router_);
    visit(prefix + "experts_up", up_);
    visit(prefix + "experts_down", down_);
  }

  // auxiliary_weight: d objective / d auxiliary_loss(), which backward applies.
  activation forward(activation const& x, exec_type const& exec = {}, double auxiliary_weight = 1) {
    s_ = {};
    s_.token_axes = tokens_split(x);
    s_.x = x;
    s_.auxiliary_weight = auxiliary_weight;
    std::size_t const N = rows(x), C = x.global_extents()[2], E = experts(), k = options_.top_k;
    auto const xr = ops::local::as_rows(x.local(), C);
    auto const logits = pooled<rows_view>(N, E);
    detail::product(exec, N, E, C, xr.data(), false, router_.value().local().data(), false, A(0), logits.data());
    auto const host_logits = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace{}, logits);
    s_.routing = ops::local::route_tokens(std::vector<double>(host_logits.data(), host_logits.data() + N * E), N, E, k);
    std::vector<double>& sums = s_.routing.totals;
    Kokkos::View<double*, Kokkos::HostSpace> const totals("shardmesh::mixture_of_experts::totals", sums.size());
    std::copy(sums.begin(), sums.end(), totals.data());
    if (!s_.token_axes.empty())
      all_reduce(x.mesh().group(s_.token_axes), totals, reduce_op::sum, Kokkos::DefaultHostExecutionSpace{});
    std::copy(totals.data(), totals.data() + sums.size(), sums.begin());
    ops::local::balance(s_.routing);
    auxiliary_ = options_.balance * s_.routing.balance_loss + options_.z_loss * s_.routing.z_loss;
    Kokkos::View<int**, Kokkos::LayoutRight, Kokkos::HostSpace> const choices(s_.routing.choice.data(), N, k);
    s_.exchange.emplace(x.mesh(), options_.axis, E, choices, options_.capacity_factor);
    dropped_ = s_.exchange->dropped();
    s_.gates = to_device<A>(s_.routing.gate, N, k);
    s_.rows_in = s_.exchange->to_experts(rows_view(xr.data(), N, C), exec);
    std::size_t const M = s_.exchange->rows(), F = up_.global_extents()[2];
    s_.hidden = pooled<rows_view>(M, F);
    for_each_expert([&](std::size_t l, std::size_t first, std::size_t m) {
      detail::product(exec, m, F, C, row(s_.rows_in, first), false, up_.value().local().data() + l * C * F, false, A(0),
                      row(s_.hidden, first));
    });
    rows_view const act = activated(exec), out = pooled<rows_view>(M, C);
    for_each_expert([&](std::size_t l, std::size_t first, std::size_t m) {
      detail::product(exec, m, C, F, row(act, first), false, down_.value().local().data() + l * F * C, false, A(0),
                      row(out, first));
    });
    s_.slots = s_.exchange->from_experts(out, exec);
    activation y = ops::detail::make_like<T, 3, MemorySpace>(x.mesh(), x.bound(), x.global_extents());
    detail::combine(exec, s_.slots, s_.gates, ops::local::as_rows(y.local(), C));
    return y;
  }

  // The last forward's auxiliary losses, weighted by the options, over all its tokens: the same on every rank.
  [[nodiscard]] double auxiliary_loss() const { return auxiliary_; }
  // The slots the last forward's capacity dropped on this rank.
  [[nodiscard]] std::size_t dropped() const { return dropped_; }

  template <class Visit>
  void visit_saved(Visit&& visit) {
    visit(s_);  // whole: the routing and the exchange belong to its micro-batch
  }

  // dy in the output's layout.
  activation backward(activation const& dy_in, exec_type const& exec = {}) {
    activation const& x = s_.x;
    activation const dy = ops::to_layout(dy_in, x.bound(), exec);
    std::size_t const N = rows(x), C = x.global_extents()[2], E = experts(), k = options_.top_k;
    std::size_t const M = s_.exchange->rows(), F = up_.global_extents()[2];
    auto const dyr = ops::local::as_rows(dy.local(), C);
    // The gates' gradient dy . slot, and each slot's gradient g dy.
    auto const d_gate = pooled<Kokkos::View<A**, Kokkos::LayoutRight, MemorySpace>>(N, k);
    auto const d_slots = pooled<rows_view>(N * k, C);
    auto const slots = s_.slots;
    auto const gates = s_.gates;
    Kokkos::parallel_for(
        "shardmesh::mixture_of_experts::slot_gradients",
        Kokkos::MDRangePolicy<exec_type, Kokkos::Rank<2>>(exec, {0, 0}, {N, k}),
        KOKKOS_LAMBDA(std::size_t n, std::size_t j) {
          A dot = 0;
          for (std::size_t c = 0; c < C; ++c) {
            dot += static_cast<A>(dyr(n, c)) * static_cast<A>(slots(n * k + j, c));
            d_slots(n * k + j, c) = static_cast<T>(gates(n, j) * static_cast<A>(dyr(n, c)));
          }
          d_gate(n, j) = dot;
        });
    rows_view const d_out = s_.exchange->to_experts(d_slots, exec);
    auto d_up = gradient_like(up_), d_down = gradient_like(down_);
    rows_view const act = activated(exec), d_act = pooled<rows_view>(M, F), d_rows = pooled<rows_view>(M, C);
    for_each_expert([&](std::size_t l, std::size_t first, std::size_t m) {
      detail::product(exec, F, C, m, row(act, first), true, row(d_out, first), false, A(0),
                      d_down.local().data() + l * F * C);
      detail::product(exec, m, F, C, row(d_out, first), false, down_.value().local().data() + l * F * C, true, A(0),
                      row(d_act, first));
    });
    ops::local::gelu_backward(exec, ops::local::flat(s_.hidden), ops::local::flat(d_act), ops::local::flat(d_act));
    for_each_expert([&](std::size_t l, std::size_t first, std::size_t m) {
      detail::product(exec, C, F, m, row(s_.rows_in, first), true, row(d_act, first), false, A(0),
                      d_up.local().data() + l * C * F);
      detail::product(exec, m, C, F, row(d_act, first), false, up_.value().local().data() + l * C * F, true, A(0),
                      row(d_rows, first));
    });
    rows_view const d_back = s_.exchange->from_experts(d_rows, exec);
    activation dx = ops::detail::make_like<T, 3, MemorySpace>(x.mesh(), x.bound(), x.global_extents());
    auto const dxr = ops::local::as_rows(dx.local(), C);
    Kokkos::parallel_for(
        "shardmesh::mixture_of_experts::token_gradients",
        Kokkos::MDRangePolicy<exec_type, Kokkos::Rank<2>>(exec, {0, 0}, {N, C}),
        KOKKOS_LAMBDA(std::size_t n, std::size_t c) {
          A sum = 0;
          for (std::size_t j = 0; j < k; ++j) sum += static_cast<A>(d_back(n * k + j, c));
          dxr(n, c) = static_cast<T>(sum);
        });
    // The router: its logits' gradient from the gates and the auxiliary losses, on the host.
    auto const host_d_gate = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace{}, d_gate);
    std::vector<double> const d_logits_host =
        ops::local::route_backward(s_.routing, std::vector<double>(host_d_gate.data(), host_d_gate.data() + N * k),
                                   s_.auxiliary_weight * options_.balance, s_.auxiliary_weight * options_.z_loss);
    rows_view const d_logits = to_device<T>(d_logits_host, N, E);
    auto const xr = ops::local::as_rows(x.local(), C);
    auto d_router = gradient_like(router_);
    detail::product(exec, C, E, N, xr.data(), true, d_logits.data(), false, A(0), d_router.local().data());
    detail::product(exec, N, C, E, d_logits.data(), false, router_.value().local().data(), true, A(1), dxr.data());
    router_.accumulate(std::move(d_router), exec);
    up_.accumulate(std::move(d_up), exec);
    down_.accumulate(std::move(d_down), exec);
    s_ = {};
    return dx;
  }

 private:
  [[nodiscard]] std::size_t experts() const { return up_.global_extents()[0]; }
  static std::size_t rows(activation const& x) { return x.local().extent(0) * x.local().extent(1); }

  // The axes that split x's tokens; the expert axis must be one (unless of extent 1), the features whole.
  axis_set tokens_split(activation const& x) const {
    require_held("mixture_of_experts", x);
    bound_layout const l = x.bound();
    std::size_t const a = x.mesh().shape().find(options_.axis);
    axis_set tokens;
    for (std::size_t d = 0; d < 2; ++d)
      for (std::size_t i = 0; i < l.dims[d].count; ++i) tokens.insert(l.dims[d].axes[i]);
    if (l.dims[2].count != 0 || !l.partial_axes.empty() || (!tokens.contains(a) && x.mesh().shape().extent(a) > 1) ||
        x.global_extents()[2] != up_.global_extents()[1])
      throw invalid_layout_error("mixture_of_experts: the input " + x.notation() + " must split its tokens on " +
                                 options_.axis + " (and any other axes), keep its " +
                                 std::to_string(up_.global_extents()[1]) + " features whole, and not be partial");
    return tokens;
  }

  // A gradient of w in its compute layout, partial over the token axes that do not split w.
  template <class W>
  typename W::tensor gradient_like(W const& w) const {
    bound_layout l = w.compute_layout();
    for (std::size_t a = 0; a < max_mesh_axes; ++a) {
      bool splits_w = false;
      for (std::size_t d = 0; d < l.rank; ++d)
        for (std::size_t i = 0; i < l.dims[d].count; ++i) splits_w = splits_w || l.dims[d].axes[i] == a;
      if (s_.token_axes.contains(a) && !splits_w) l.partial_axes.insert(a);
    }
    return ops::detail::make_like<T, W::tensor::rank, MemorySpace>(w.mesh(), l, w.global_extents());
  }

  // Row `first` of rows [M, n]: where an expert's rows start.
  template <class V>
  static auto row(V const& v, std::size_t first) {
    return v.data() + first * v.extent(1);
  }

  // f(local expert, its first row, its rows) for each expert, also one with no rows: its weights' gradients are
  // then products over nothing, zeros.
  template <class F>
  void for_each_expert(F&& f) const {
    std::size_t first = 0;
    for (std::size_t l = 0; l < s_.exchange->expert_rows().size(); ++l) {
      std::size_t const m = s_.exchange->expert_rows()[l];
      f(l, first, m);
      first += m;
    }
  }

  rows_view activated(exec_type const& exec) const {
    auto const act = pooled<rows_view>(s_.hidden.extent(0), s_.hidden.extent(1));
    ops::local::gelu_forward(exec, ops::local::flat(s_.hidden), ops::local::flat(act));
    return act;
  }

  // Views for the layer's results and saved state from the mesh's pool: the ledger counts them (as activations
  // while a trainer keeps them), and a step reuses the last step's memory.
  template <class V>
  V pooled(std::size_t n, std::size_t m) const {
    return ops::detail::pooled<V>(s_.x.mesh(), {n, m});
  }

  template <class U>
  Kokkos::View<U**, Kokkos::LayoutRight, MemorySpace> to_device(std::vector<double> const& v, std::size_t n,
                                                                std::size_t m) const {
    auto const out = pooled<Kokkos::View<U**, Kokkos::LayoutRight, MemorySpace>>(n, m);
    auto const host = Kokkos::create_mirror_view(out);
    for (std::size_t i = 0; i < v.size(); ++i) host.data()[i] = static_cast<U>(v[i]);
    Kokkos::deep_copy(out, host);
    return out;
  }

  router_weight router_;
  expert_weight up_, down_;
  options options_;
  detail::experts_saved<T, MemorySpace> s_;
  double auxiliary_ = 0;
  std::size_t dropped_ = 0;
};

}  // namespace shardmesh::parallel
