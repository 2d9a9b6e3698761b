#pragma once
// A block's feed-forward layer that is either dense (Dense: an MLP) or a
// mixture of experts (nn/mixture_of_experts.hpp), chosen per block by the
// model's declarations: a model with experts in some blocks keeps one
// block type. The experts' auxiliary losses enter the objective with the
// weight forward is given; a dense layer has none.

#include "shardmesh/nn/mixture_of_experts.hpp"
#include "shardmesh/tensor/dtensor.hpp"

#include <string>
#include <utility>
#include <variant>

namespace shardmesh::parallel {

template <class Dense, class T, class MemorySpace>
class dense_or_experts {
 public:
  using activation = dynamic_dtensor<T, 3, MemorySpace>;
  using experts = mixture_of_experts<T, MemorySpace>;
  using exec_type = execution_space_of<MemorySpace>;

  dense_or_experts() = default;
  dense_or_experts(Dense dense) : layer_(std::move(dense)) {}
  dense_or_experts(experts moe) : layer_(std::move(moe)) {}

  template <class Visit>
  void for_each_parameter(std::string const& prefix, Visit&& visit) {
    std::visit([&](auto& l) { l.for_each_parameter(prefix, visit); }, layer_);
  }

  // auxiliary_weight: d objective / d auxiliary_loss() (experts only).
  activation forward(activation const& x, exec_type const& exec, double auxiliary_weight) {
    if (auto* moe = std::get_if<experts>(&layer_)) return moe->forward(x, exec, auxiliary_weight);
    return std::get<Dense>(layer_).forward(x, exec);
  }
  // The input gradient: P(sum:tp) from a dense layer, in the input's layout from experts.
  activation backward(activation const& dy, exec_type const& exec) {
    return std::visit([&](auto& l) { return l.backward(dy, exec); }, layer_);
  }
  template <class Visit>
  void visit_saved(Visit&& visit) {
    std::visit([&](auto& l) { l.visit_saved(visit); }, layer_);
  }
  // The last forward's weighted auxiliary losses (0 for a dense layer).
  [[nodiscard]] double auxiliary_loss() const {
    auto const* moe = std::get_if<experts>(&layer_);
    return moe != nullptr ? moe->auxiliary_loss() : 0.0;
  }

 private:
  std::variant<Dense, experts> layer_;
};

}  // namespace shardmesh::parallel
