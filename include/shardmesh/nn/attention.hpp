#pragma once
// Causal self-attention with the heads sharded on tp: the query, key and
// value projections column-parallel by heads ("btc,chd->bthd", W R,S(tp),R),
// scores and weighted values local per head, the output projection
// row-parallel ("bthd,hdc->btc", W S(tp),R,R) delivering the activation
// layout. Backward adds the three projections' partial input gradients and
// returns the sum still P(sum:tp): the block reduces it once.

#include "shardmesh/nn/linear.hpp"
#include "shardmesh/ops/detail/op_support.hpp"
#include "shardmesh/ops/einsum.hpp"
#include "shardmesh/ops/elementwise.hpp"
#include "shardmesh/ops/softmax.hpp"
#include "shardmesh/strategy/transformer_layouts.hpp"
#include "shardmesh/tensor/dtensor.hpp"

#include <cmath>
#include <utility>

namespace shardmesh::parallel {

template <class T, class MemorySpace>
class attention {
 public:
  using activation = dynamic_dtensor<T, 3, MemorySpace>;
  using heads = dynamic_dtensor<T, 4, MemorySpace>;
  using projection = linear<"btc,chd->bthd", T, MemorySpace>;
  using output = linear<"bthd,hdc->btc", T, MemorySpace>;
  using exec_type = execution_space_of<MemorySpace>;

  attention() = default;
  attention(projection q, projection k, projection v, output o)
      : q_(std::move(q)), k_(std::move(k)), v_(std::move(v)), o_(std::move(o)) {
    std::size_t const d = q_.w().value().global_extents()[2];
    scale_ = static_cast<T>(1 / std::sqrt(static_cast<double>(d)));
  }

  [[nodiscard]] projection& q() { return q_; }
  [[nodiscard]] projection& k() { return k_; }
  [[nodiscard]] projection& v() { return v_; }
  [[nodiscard]] output& o() { return o_; }

  activation forward(activation const& x, exec_type const& exec = {}) {
    auto const rows = ops::detail::to_layout(x, bind(x.mesh().shape(), q_.input_layout()), exec);  // gathered once
    query_ = q_.forward(rows, exec);
    key_ = k_.forward(rows, exec);
    value_ = v_.forward(rows, exec);
    probabilities_ =
        ops::softmax(ops::einsum<"bthd,bshd->bhts">(scale_, query_, key_, exec), ops::masking::causal, exec);
    return o_.forward(ops::einsum<"bhts,bshd->bthd">(probabilities_, value_, exec), exec);
  }

  template <class Visit>
  void visit_saved(Visit&& visit) {
    for (projection* p : {&q_, &k_, &v_}) p->visit_saved(visit);
    o_.visit_saved(visit);
    visit(query_);
    visit(key_);
    visit(value_);
    visit(probabilities_);
  }

  // The input gradient, P(sum:tp).
  activation backward(activation const& dy, exec_type const& exec = {}) {
    heads const d_out = o_.backward(dy, exec);
    auto const d_prob = ops::einsum<"bthd,bshd->bhts">(d_out, value_, exec);
    heads const d_value = ops::einsum<"bhts,bthd->bshd">(probabilities_, d_out, exec);
    auto const d_scores = ops::softmax_backward(probabilities_, d_prob, exec);  // the scale is the GEMMs' alpha
    heads const d_query = ops::einsum<"bhts,bshd->bthd">(scale_, d_scores, key_, exec);
    heads const d_key = ops::einsum<"bhts,bthd->bshd">(scale_, d_scores, query_, exec);
    query_ = key_ = value_ = {};
    probabilities_ = {};
    activation dx = q_.backward(d_query, exec);
    k_.backward(d_key, dx, exec);  // summed by the GEMMs (beta = 1)
    v_.backward(d_value, dx, exec);
    return dx;
  }

 private:
  projection q_, k_, v_;
  output o_;
  T scale_ = T(1);
  heads query_, key_, value_;
  dynamic_dtensor<T, 4, MemorySpace> probabilities_;
};

}  // namespace shardmesh::parallel
