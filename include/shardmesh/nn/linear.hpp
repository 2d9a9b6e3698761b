#pragma once
// A linear layer Y = X.W in index notation, e.g. "btc,cf->btf", whose
// parallelism is its weight's layout:
//   replicated       W R,R        no communication
//   column-parallel  W R,S(tp)    Y sharded on features
//   row-parallel     W S(tp),R    Y P(sum:tp), delivered as the caller asks
// Forward moves X to the declared input layout and delivers Y in the
// declared output layout; backward moves dY by the transpose of that
// delivery (nothing after an all-reduce, an all-gather after a
// reduce-scatter), and gives dX = dY.W^T in the layout the rules give (often
// P(sum:tp): callers add such partial gradients before reducing them once)
// and dW = X^T.dY reduced into W's layout. Every collective is planned by
// the algebra from these layouts.

#include "shardmesh/algebra/contraction.hpp"
#include "shardmesh/algebra/planner.hpp"
#include "shardmesh/algebra/propagation.hpp"
#include "shardmesh/nn/parameter.hpp"
#include "shardmesh/nn/weight_gradients.hpp"
#include "shardmesh/ops/einsum.hpp"
#include "shardmesh/ops/layer_support.hpp"
#include "shardmesh/tensor/dtensor.hpp"

#include <cstddef>
#include <span>
#include <string>
#include <utility>

namespace shardmesh::parallel {

namespace detail {

// The products of the backward pass of C = A.B: dA = dC.B^T is "c,b->a", dB = A^T.dC is "a,c->b".
consteval contraction_text grad_a_spec(contraction_text spec) {
  contraction const k = parse_contraction(spec.view());
  contraction_text out;
  return out.append(k.c.view()).append(",").append(k.b.view()).append("->").append(k.a.view());
}
consteval contraction_text grad_b_spec(contraction_text spec) {
  contraction const k = parse_contraction(spec.view());
  contraction_text out;
  return out.append(k.a.view()).append(",").append(k.c.view()).append("->").append(k.b.view());
}

// l without its partial axes: where a partial result's gradient lives.
inline bound_layout whole(bound_layout l) {
  l.partial_axes = {};
  l.op = reduce_op::sum;
  return l;
}

}  // namespace detail

template <contraction_text Spec, class T, class MemorySpace>
class linear {
  static constexpr contraction k = parse_contraction(Spec.view());

 public:
  static constexpr std::size_t x_rank = k.a.size(), w_rank = k.b.size(), y_rank = k.c.size();
  using x_tensor = dynamic_dtensor<T, x_rank, MemorySpace>;
  using y_tensor = dynamic_dtensor<T, y_rank, MemorySpace>;
  using weight = parameter<T, w_rank, MemorySpace>;
  using exec_type = execution_space_of<MemorySpace>;

  linear() = default;
  linear(weight w, layout input, layout output)
      : w_(std::move(w)), input_(std::move(input)), output_(std::move(output)) {}

  [[nodiscard]] weight const& w() const { return w_; }
  [[nodiscard]] weight& w() { return w_; }
  [[nodiscard]] layout const& input_layout() const { return input_; }
  [[nodiscard]] layout const& output_layout() const { return output_; }

  y_tensor forward(x_tensor const& x, exec_type const& exec = {}) {
    mesh_shape const& mesh = x.mesh().shape();
    x_ = ops::to_layout(x, bind(mesh, input_), exec);
    op_layouts const local = product_layout(mesh, k, x_.bound(), w_.value().bound());
    product_ = local.ok ? detail::whole(local.c) : bind(mesh, output_);
    return ops::einsum<Spec>(x_, w_.value(), output_, exec);
  }

  // dX in the layout the rules give; dW accumulated into the weight's gradient.
  // What forward saved for backward, visited (a pipeline stashes it per micro-batch).
  template <class Visit>
  void visit_saved(Visit&& visit) {
    visit(x_);
    visit(product_);
  }

  x_tensor backward(y_tensor const& dy, exec_type const& exec = {}) {
    return ops::einsum<detail::grad_a_spec(Spec)>(weight_gradient(dy, exec), w_.value(), exec);
  }
  // The same, dX added into dx_sum (in its layout): a layer whose input
  // feeds several linear layers sums their input gradients in the GEMMs.
  void backward(y_tensor const& dy, x_tensor& dx_sum, exec_type const& exec = {}) {
    ops::einsum_add<detail::grad_a_spec(Spec)>(dx_sum, weight_gradient(dy, exec), w_.value(), exec);
  }

 private:
  // dY moved to the product's layout; dW accumulated from it (now, or
  // later when the mesh defers weight gradients). A partial dY whose
  // summands lie in that layout stays partial: dW and dX, linear in it, come
  // out partial on the same axes and are reduced where they are delivered
  // (a weight that every rank of those axes holds whole, as grouped-query
  // attention's shared key/value projections).
  y_tensor weight_gradient(y_tensor const& dy, exec_type const& exec) {
    mesh_shape const& mesh = dy.mesh().shape();
    bool const summands_fit =
        dy.bound().op == reduce_op::sum &&
        shardmesh::detail::normalized(mesh, detail::whole(dy.bound())) == shardmesh::detail::normalized(mesh, product_);
    y_tensor g = summands_fit ? dy : ops::to_layout(dy, product_, exec);
    parallel::weight_gradient(g.mesh(), [this, x = std::move(x_), g, exec] {
      w_.accumulate(ops::einsum<detail::grad_b_spec(Spec)>(x, g, w_.accumulation_layout(), exec), exec);
    });
    x_ = {};
    return g;
  }

  weight w_;
  layout input_, output_;
  x_tensor x_;            // the input as used, saved for dW
  bound_layout product_;  // the local product's result layout, partial axes made whole
};

}  // namespace shardmesh::parallel
