#pragma once
// A layer norm layer over the last dimension: gain and bias replicated; or
// an RMS norm layer (root mean square layer normalisation: a gain, no bias).
// Activations keep their layout (the normalised dimension is whole in
// every activation layout the blocks use); the gain and bias gradients are
// sums over the rows, reduced over the axes sharding the rows (the sequence,
// with sequence parallelism) on their way into the parameters' layout.

#include "shardmesh/nn/parameter.hpp"
#include "shardmesh/nn/weight_gradients.hpp"
#include "shardmesh/ops/layer_norm.hpp"
#include "shardmesh/tensor/dtensor.hpp"

#include <cstddef>
#include <optional>
#include <string>
#include <utility>

namespace shardmesh::parallel {

template <class T, std::size_t Rank, class MemorySpace>
class layer_norm {
 public:
  using tensor = dynamic_dtensor<T, Rank, MemorySpace>;
  using vector = parameter<T, 1, MemorySpace>;
  using exec_type = execution_space_of<MemorySpace>;

  layer_norm() = default;
  layer_norm(vector gamma, vector beta, accumulation_t<T> eps)
      : gamma_(std::move(gamma)), beta_(std::move(beta)), eps_(eps), centred_(true) {}
  // An RMS norm.
  layer_norm(vector gamma, accumulation_t<T> eps) : gamma_(std::move(gamma)), eps_(eps), centred_(false) {}

  [[nodiscard]] vector& gamma() { return gamma_; }
  [[nodiscard]] vector& beta() { return beta_; }

  // visit(name, parameter): the gain prefix + "_g", and the bias prefix + "_b" of a layer norm.
  template <class Visit>
  void for_each_parameter(std::string const& prefix, Visit&& visit) {
    visit(prefix + "_g", gamma_);
    if (centred_) visit(prefix + "_b", beta_);
  }

  tensor forward(tensor const& x, exec_type const& exec = {}) {
    auto f = centred_ ? ops::layer_norm(x, gamma_.value(), beta_.value(), eps_, exec)
                      : ops::rms_norm(x, gamma_.value(), eps_, exec);
    saved_ = std::move(f.saved);
    return f.y;
  }

  template <class Visit>
  void visit_saved(Visit&& visit) {
    visit(saved_);
  }

  tensor backward(tensor const& dy, exec_type const& exec = {}) {
    return keep(ops::layer_norm_backward(*saved_, gamma_.value(), dy, exec), exec);
  }
  // dx plus residual, in one pass: for a residual branch x + f(this(x)),
  // residual being the gradient of the branch's output.
  tensor backward(tensor const& dy, tensor const& residual, exec_type const& exec = {}) {
    return keep(ops::layer_norm_backward(*saved_, gamma_.value(), dy, residual, exec), exec);
  }

 private:
  // Accumulates the gain and bias gradients (now, or later when the mesh defers weight gradients), returns dx.
  tensor keep(ops::layer_norm_gradients<T, Rank, MemorySpace> g, exec_type const& exec) {
    parallel::weight_gradient(g.dx.mesh(),
                              [this, dgamma = std::move(g.dgamma), dbeta = std::move(g.dbeta), exec]() mutable {
                                gamma_.accumulate(std::move(dgamma), exec);
                                if (centred_) beta_.accumulate(std::move(dbeta), exec);
                              });
    saved_.reset();
    return g.dx;
  }

  vector gamma_, beta_;
  accumulation_t<T> eps_ = 1e-5F;
  bool centred_ = true;
  std::optional<ops::layer_norm_saved<T, Rank, MemorySpace>> saved_;
};

}  // namespace shardmesh::parallel
