#include <shardmesh/train/optimizer.hpp>

#include <cstddef>
#include <string>

// An update rule that does not say how many state tensors it keeps: the optimizer names what it lacks.
struct no_state_count {
  double lr = 0.1;
  double weight_decay = 0;
  [[nodiscard]] std::string error() const { return {}; }
  template <class T>
  [[nodiscard]] auto at(std::size_t) const {
    return [](T& p, T g, T*) { p -= g; };
  }
};

shardmesh::parallel::optimizer const method = no_state_count{};
