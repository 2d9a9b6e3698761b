#pragma once
// Redistribution plans on one mesh shape, made by the planner under one cost
// model and kept for reuse (a training loop asks for the same few
// transitions every step). Safe to share between threads. Standard C++ only:
// no Kokkos or MPI.

#include "shardmesh/algebra/hash.hpp"
#include "shardmesh/algebra/mesh_shape.hpp"
#include "shardmesh/algebra/planner.hpp"
#include "shardmesh/algebra/shard_geometry.hpp"
#include "shardmesh/detail/lru_cache.hpp"
#include "shardmesh/errors.hpp"

#include <cstddef>
#include <memory>
#include <string>
#include <utility>

namespace shardmesh {

namespace detail {

struct transition {
  bound_layout from;
  bound_layout to;
  bool operator==(transition const&) const = default;
};

struct transition_hash {
  std::size_t operator()(transition const& t) const {
    return static_cast<std::size_t>(fnv1a{}.mix(hash(t.from)).mix(hash(t.to)).value);
  }
};

}  // namespace detail

class plan_cache {
 public:
  // Keeps up to `capacity` plans, dropping the least recently used beyond.
  explicit plan_cache(mesh_shape const& mesh, cost_model model = {}, std::size_t capacity = 4096)
      : mesh_(mesh), model_(model), plans_(capacity) {}

  // The cheapest plan from one layout to another. Precondition:
  // transition_error(..., mesh, from, to) is empty; a transition the
  // planner cannot reach anyway raises invalid_layout_error rather than
  // yielding an empty plan that would pass for "already there".
  [[nodiscard]] std::shared_ptr<redistribution_plan const> get(bound_layout const& from, bound_layout const& to) {
    return plans_.get({from, to}, [&] {
      redistribution_plan plan = plan_redistribution(mesh_, from, to, model_);
      if (plan.size() == 0 && detail::normalized(mesh_, from) != detail::normalized(mesh_, to))
        throw invalid_layout_error("redistribute: no plan takes " + std::string(to_string(mesh_, from).view()) +
                                   " to " + std::string(to_string(mesh_, to).view()) + " on mesh " +
                                   std::string(to_string(mesh_).view()));
      return plan;
    });
  }

  [[nodiscard]] mesh_shape const& mesh() const { return mesh_; }
  [[nodiscard]] cost_model const& model() const { return model_; }
  [[nodiscard]] std::size_t size() const { return plans_.size(); }

 private:
  mesh_shape mesh_;
  cost_model model_;
  detail::lru_cache<detail::transition, redistribution_plan, detail::transition_hash> plans_;
};

}  // namespace shardmesh
