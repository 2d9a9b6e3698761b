#pragma once
// The MLP of a Llama-style block (SwiGLU): the gate and up projections
// column-parallel ("btc,cf->btf", W R,S(tp)) on one gathered input,
// silu(gate) * up on the sharded features (local), the down projection
// row-parallel ("btf,fc->btc", W S(tp),R) delivering the activation layout.
// Backward returns the input gradient P(sum:tp), the two projections'
// summed in their GEMMs: the block reduces it.

#include "shardmesh/nn/linear.hpp"
#include "shardmesh/ops/elementwise.hpp"
#include "shardmesh/ops/layer_support.hpp"
#include "shardmesh/tensor/dtensor.hpp"

#include <string>
#include <utility>

namespace shardmesh::parallel {

template <class T, class MemorySpace>
class swiglu_mlp {
 public:
  using activation = dynamic_dtensor<T, 3, MemorySpace>;
  using up = linear<"btc,cf->btf", T, MemorySpace>;
  using down = linear<"btf,fc->btc", T, MemorySpace>;
  using exec_type = execution_space_of<MemorySpace>;

  swiglu_mlp() = default;
  swiglu_mlp(up gate, up lift, down proj) : gate_(std::move(gate)), up_(std::move(lift)), down_(std::move(proj)) {}

  // visit(name, parameter): prefix + "w1" (gate), "w3" (up), "w2" (down), as Llama names them.
  template <class Visit>
  void for_each_parameter(std::string const& prefix, Visit&& visit) {
    visit(prefix + "w1", gate_.w());
    visit(prefix + "w3", up_.w());
    visit(prefix + "w2", down_.w());
  }

  activation forward(activation const& x, exec_type const& exec = {}) {
    auto const rows = ops::to_layout(x, gate_.input_layout(), exec);  // gathered once
    gate_out_ = gate_.forward(rows, exec);
    up_out_ = up_.forward(rows, exec);
    return down_.forward(ops::swiglu(gate_out_, up_out_, exec), exec);
  }

  template <class Visit>
  void visit_saved(Visit&& visit) {
    gate_.visit_saved(visit);
    up_.visit_saved(visit);
    down_.visit_saved(visit);
    visit(gate_out_);
    visit(up_out_);
  }

  activation backward(activation const& dy, exec_type const& exec = {}) {
    auto const d = ops::swiglu_backward(gate_out_, up_out_, down_.backward(dy, exec), exec);
    gate_out_ = up_out_ = {};
    activation dx = gate_.backward(d.d_gate, exec);
    up_.backward(d.d_up, dx, exec);  // summed by the GEMM (beta = 1)
    return dx;
  }

 private:
  up gate_, up_;
  down down_;
  activation gate_out_, up_out_;  // saved for the gating's derivative
};

}  // namespace shardmesh::parallel
