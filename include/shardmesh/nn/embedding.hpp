#pragma once
// Token and (learned) position embeddings, or token embeddings alone (a
// model whose attention places tokens, as rotary embeddings do), the token
// table sharded on the vocabulary
// (vocabulary parallelism: wte S(tp),R). A lookup is the product of the
// one-hot ids [b,t,v] with the table [v,c] ("btv,vc->btc"): the one-hot is
// sliced on v like the table, so the rules make the sum of the ranks'
// lookups P(sum:tp), which is delivered in the activation layout (an
// all-reduce, or a reduce-scatter onto the sequence). The table's gradient
// is the product "btv,btc->vc", planned the same way (the one-hot is never
// built: local kernels look rows up and scatter-add them).

#include "shardmesh/algebra/contraction.hpp"
#include "shardmesh/algebra/propagation.hpp"
#include "shardmesh/algebra/shard_geometry.hpp"
#include "shardmesh/nn/parameter.hpp"
#include "shardmesh/nn/weight_gradients.hpp"
#include "shardmesh/ops/elementwise.hpp"
#include "shardmesh/ops/layer_support.hpp"
#include "shardmesh/ops/local/elementwise.hpp"
#include "shardmesh/ops/local/embedding.hpp"
#include "shardmesh/ops/reduction.hpp"
#include "shardmesh/strategy/table_gradient.hpp"
#include "shardmesh/tensor/dtensor.hpp"

#include <array>
#include <cstddef>
#include <string>
#include <utility>

namespace shardmesh::parallel {

template <class T, class MemorySpace>
class embedding {
 public:
  using ids_tensor = dynamic_dtensor<int, 2, MemorySpace>;
  using activation = dynamic_dtensor<T, 3, MemorySpace>;
  using table = parameter<T, 2, MemorySpace>;
  using exec_type = execution_space_of<MemorySpace>;

  embedding() = default;
  // tokens: wte [vocabulary, hidden]; positions: wpe [sequence, hidden]; out: the activation layout.
  embedding(table tokens, table positions, layout out)
      : wte_(std::move(tokens)), wpe_(std::move(positions)), out_(std::move(out)), positions_(true) {}
  // Token embeddings alone.
  embedding(table tokens, layout out) : wte_(std::move(tokens)), out_(std::move(out)) {}

  // visit(name, parameter): "wte", and "wpe" where there are positions.
  template <class Visit>
  void for_each_parameter(Visit&& visit) {
    visit(std::string("wte"), wte_);
    if (positions_) visit(std::string("wpe"), wpe_);
  }

  activation forward(ids_tensor const& ids, exec_type const& exec = {}) {
    device_mesh const& mesh = ids.mesh();
    std::size_t const hidden = wte_.value().global_extents()[1];
    tensor_index const shape{ids.global_extents()[0], ids.global_extents()[1], hidden};
    // The one-hot ids take the table's vocabulary placement; the rules give the lookup's layout.
    bound_layout onehot = one_hot_layout(ids.bound(), wte_.value().bound().dims[0]);
    op_layouts const rule = product_layout(mesh.shape(), lookup, onehot, wte_.value().bound());
    if (!rule.ok) throw invalid_layout_error("embedding: " + std::string(rule.why.view()));
    ids_ = ids;
    auto sum = ops::make_result<T, 3, MemorySpace>(mesh, rule.c, shape);
    ops::local::embedding_forward(exec, ops::local::flat(ids.local()), wte_.value().local(), first_row(wte_.value()),
                                  ops::rows_of(sum.local()));
    activation x = ops::to_layout(sum, bind(mesh.shape(), out_), exec);
    if (positions_) add_positions(x, exec);
    return x;
  }

  // Positions: wpe [t, c] placed like x's [t, c], added over the batch (public: CUDA's extended
  // lambdas may not live in private members).
  void add_positions(activation& x, exec_type const& exec) const {
    bound_layout at;
    at.rank = 2;
    at.dims[0] = x.bound().dims[1];
    at.dims[1] = x.bound().dims[2];
    auto const pos = ops::to_layout(wpe_.value(), at, exec);
    auto const xv = ops::local::as_3d(x.local(), x.local().extent(0), pos.local().size(), 1);
    auto const pv = ops::local::flat(pos.local());
    Kokkos::parallel_for(
        "shardmesh::embedding_positions",
        Kokkos::MDRangePolicy<exec_type, Kokkos::Rank<2>>(exec, {0, 0}, {xv.extent(0), xv.extent(1)}),
        KOKKOS_LAMBDA(std::size_t b, std::size_t i) {
          using A = accumulation_t<T>;
          xv(b, i, 0) = static_cast<T>(static_cast<A>(xv(b, i, 0)) + static_cast<A>(pv(i)));
        });
  }

  template <class Visit>
  void visit_saved(Visit&& visit) {
    visit(ids_);
  }

  // Only weight gradients: all of it runs when the mesh runs weight
  // gradients (at once, or when a zero-bubble pipeline's W does).
  void backward(activation const& dx, exec_type const& exec = {}) {
    device_mesh const& mesh = dx.mesh();
    // dwte = onehot^T . dx, planned like any product (strategy/table_gradient.hpp).
    std::array<std::size_t, 3> const eo{ids_.global_extents()[0], ids_.global_extents()[1],
                                        wte_.value().global_extents()[0]};
    std::array<std::size_t, 3> const ex{dx.global_extents()[0], dx.global_extents()[1], dx.global_extents()[2]};
    std::array<std::size_t, 2> const table_extents{eo[2], ex[2]};
    bound_layout const want = bind(mesh.shape(), wte_.accumulation_layout());
    ops::op_key key("embedding backward");
    key.operand(mesh.shape(), ids_.bound(), eo).operand(dx).operand(mesh.shape(), want, table_extents);
    op_layouts const plan = ops::planned(
        mesh, key, [&] { return plan_table_gradient(mesh.shape(), ids_.bound(), dx.bound(), eo, ex, want); });
    bound_layout const rows = table_gradient_ids(plan);
    tensor_index const shape{wte_.value().global_extents()[0], wte_.value().global_extents()[1]};
    std::size_t const first =
        block_interval(mesh.shape(), plan.a.dims[2], eo[2], mesh.coordinates()).begin;  // this rank's vocabulary
    parallel::weight_gradient(mesh, [this, dx, ids = std::move(ids_), rows, plan, shape, first, exec] {
      if (positions_) wpe_.accumulate(ops::sum(dx, 0, exec), exec);
      auto const local_ids = ops::to_layout(ids, rows, exec);
      auto const g = ops::to_layout(dx, plan.b, exec);
      using G = typename table::grad_type;  // scattered in the gradient's type: no sum in bf16
      auto grad = ops::make_result<G, 2, MemorySpace>(dx.mesh(), plan.c, shape);
      ops::local::fill(exec, ops::local::flat(grad.local()), G(0));
      ops::local::embedding_backward(exec, ops::local::flat(local_ids.local()), ops::rows_of(g.local()), first,
                                     grad.local());
      wte_.accumulate(std::move(grad), exec);
    });
    ids_ = {};
  }

 private:
  static constexpr contraction lookup = parse_contraction("btv,vc->btc");

  static std::size_t first_row(dynamic_dtensor<T, 2, MemorySpace> const& w) {
    return block_interval(w.mesh().shape(), w.bound().dims[0], w.global_extents()[0], w.mesh().coordinates()).begin;
  }

  table wte_, wpe_;
  layout out_;
  bool positions_ = false;
  ids_tensor ids_;  // saved for backward
};

}  // namespace shardmesh::parallel
