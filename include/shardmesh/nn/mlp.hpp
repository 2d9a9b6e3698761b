#pragma once
// The MLP of a transformer block: column-parallel ("btc,cf->btf", W
// R,S(tp)), GELU on the sharded features (local), row-parallel ("btf,fc->btc",
// W S(tp),R) delivering the activation layout. Backward returns the input
// gradient P(sum:tp): the block reduces it.

#include "shardmesh/nn/linear.hpp"
#include "shardmesh/ops/elementwise.hpp"
#include "shardmesh/tensor/dtensor.hpp"

#include <string>
#include <utility>

namespace shardmesh::parallel {

template <class T, class MemorySpace>
class mlp {
 public:
  using activation = dynamic_dtensor<T, 3, MemorySpace>;
  using up = linear<"btc,cf->btf", T, MemorySpace>;
  using down = linear<"btf,fc->btc", T, MemorySpace>;
  using exec_type = execution_space_of<MemorySpace>;

  mlp() = default;
  mlp(up fc, down proj) : fc_(std::move(fc)), proj_(std::move(proj)) {}

  // visit(name, parameter): prefix + "w1" (up), "w2" (down).
  template <class Visit>
  void for_each_parameter(std::string const& prefix, Visit&& visit) {
    visit(prefix + "w1", fc_.w());
    visit(prefix + "w2", proj_.w());
  }

  activation forward(activation const& x, exec_type const& exec = {}) {
    hidden_ = fc_.forward(x, exec);
    return proj_.forward(ops::gelu(hidden_, exec), exec);
  }

  template <class Visit>
  void visit_saved(Visit&& visit) {
    fc_.visit_saved(visit);
    proj_.visit_saved(visit);
    visit(hidden_);
  }

  activation backward(activation const& dy, exec_type const& exec = {}) {
    auto const dh = ops::gelu_backward(hidden_, proj_.backward(dy, exec), exec);
    hidden_ = {};
    return fc_.backward(dh, exec);
  }

 private:
  up fc_;
  down proj_;
  activation hidden_;  // before GELU, saved for its derivative
};

}  // namespace shardmesh::parallel
