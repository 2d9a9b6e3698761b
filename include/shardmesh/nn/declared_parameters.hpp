#pragma once
// A stage's parameters made from their declarations (model_description.hpp:
// name, global extents, layout on the stage mesh) and their values, taken by
// name by the layers that hold them: a model declares each parameter once,
// and the planner reads the same declaration. The values come from a
// parameter_source (the global tensor, built on every rank's host) or a
// parameter_initializer (made shard by shard on the device, nn/initializer.hpp).
//
//   declared_parameters<float, Kokkos::HostSpace> p(mesh, declarations, values);
//   parameter<float, 2, Kokkos::HostSpace> w = p.take<2>("h0.w1");

#include "shardmesh/errors.hpp"
#include "shardmesh/nn/initializer.hpp"
#include "shardmesh/nn/parameter.hpp"
#include "shardmesh/plan/model_description.hpp"
#include "shardmesh/runtime/device_mesh.hpp"

#include <algorithm>
#include <array>
#include <cstddef>
#include <functional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace shardmesh::parallel {

// Global parameter values by name ("wte", "h0.wq", ...), row-major, the same on every rank.
using parameter_source = std::function<std::vector<double>(std::string const& name)>;
// How each declared parameter's elements are made, on the device.
using parameter_initializer = std::function<initializer(parameter_spec const&)>;
using parameter_values = std::variant<parameter_source, parameter_initializer>;

template <class T, class MemorySpace>
class declared_parameters {
 public:
  declared_parameters(device_mesh mesh, std::vector<parameter_spec> declared, parameter_values values)
      : mesh_(std::move(mesh)), declared_(std::move(declared)), values_(std::move(values)) {}

  [[nodiscard]] device_mesh const& mesh() const { return mesh_; }
  [[nodiscard]] bool declares(std::string const& name) const { return find_parameter(declared_, name) != nullptr; }

  // The parameter declared as `name`, of Rank dimensions, distributed from its values (collective over the mesh).
  template <std::size_t Rank>
  [[nodiscard]] parameter<T, Rank, MemorySpace> take(std::string const& name) const {
    parameter_spec const* it = find_parameter(declared_, name);
    if (it == nullptr) throw invalid_option_error("model: no parameter \"" + name + "\" is declared");
    if (it->extents.size() != Rank)
      throw invalid_option_error("model: parameter \"" + name + "\" is declared with " +
                                 std::to_string(it->extents.size()) + " dimensions, taken with " +
                                 std::to_string(Rank));
    std::array<std::size_t, Rank> extents{};
    std::copy(it->extents.begin(), it->extents.end(), extents.begin());
    if (auto const* source = std::get_if<parameter_source>(&values_))
      return {name, mesh_, it->placement, extents, (*source)(name)};
    return {name, mesh_, it->placement, extents, std::get<parameter_initializer>(values_)(*it)};
  }

 private:
  device_mesh mesh_;
  std::vector<parameter_spec> declared_;
  parameter_values values_;
};

}  // namespace shardmesh::parallel
