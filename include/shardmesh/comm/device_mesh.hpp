#pragma once
// A mesh shape bound to an MPI communicator: rank r of the communicator is
// the device at coordinates_of(shape, r). Sub-communicators per group of
// axes (the ranks that differ only on those axes) are created on first use
// and cached; creating one is collective, and every rank asks for the same
// groups in the same order because redistributions are collective.

#include "shardmesh/algebra/mesh_shape.hpp"
#include "shardmesh/algebra/planner.hpp"
#include "shardmesh/algebra/plan_traffic.hpp"
#include "shardmesh/algebra/validation.hpp"
#include "shardmesh/comm/communicator.hpp"
#include "shardmesh/errors.hpp"

#include <mpi.h>

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace shardmesh {

class device_mesh {
 public:
  // shape may leave one extent dynamic: it is then the communicator's size
  // divided by the others. Throws invalid_mesh_error on every rank if the
  // shape is malformed, does not multiply to the communicator's size, or
  // differs between ranks. Collective over comm.
  device_mesh(MPI_Comm comm, mesh_shape shape) : comm_(dup(comm)) {
    auto const size = static_cast<std::size_t>(comm_.size());
    shape_ = bind_extents(shape, size);
    agree_on_shape();
    coordinates_ = coordinates_of(shape_, static_cast<std::size_t>(comm_.rank()));
  }

  [[nodiscard]] mesh_shape const& shape() const { return shape_; }
  [[nodiscard]] communicator const& comm() const { return comm_; }
  [[nodiscard]] std::size_t rank() const { return static_cast<std::size_t>(comm_.rank()); }
  [[nodiscard]] std::size_t size() const { return shape_.size(); }
  [[nodiscard]] mesh_coordinates const& coordinates() const { return coordinates_; }

  // The ranks that differ from this one only on the axes of mask, ranked by
  // group_position. Collective over the mesh on first use of mask.
  [[nodiscard]] communicator const& group(unsigned mask) const {
    auto it = groups_.find(mask);
    if (it == groups_.end()) {
      mesh_coordinates others = coordinates_;
      for (std::size_t a = 0; a < shape_.ndim; ++a)
        if ((mask >> a & 1U) != 0) others[a] = 0;
      int const color = static_cast<int>(rank_of(shape_, others));
      int const key = static_cast<int>(group_position(shape_, mask, rank()));
      it = groups_.emplace(mask, std::make_unique<communicator>(comm_.split(color, key))).first;
    }
    return *it->second;
  }

  // The plan from one layout to another on this mesh, computed once.
  [[nodiscard]] redistribution_plan const& plan(bound_layout const& from, bound_layout const& to) const {
    for (auto const& [key, cached] : plans_)
      if (key.first == from && key.second == to) return cached;
    plans_.push_back({{from, to}, plan_redistribution(shape_, from, to)});
    return plans_.back().second;
  }

 private:
  static communicator dup(MPI_Comm comm) {
    MPI_Comm copy = MPI_COMM_NULL;
    MPI_Comm_dup(comm, &copy);  // our collectives never mix with the caller's messages
    return communicator::adopt(copy);
  }

  static mesh_shape bind_extents(mesh_shape shape, std::size_t size) {
    message const m = mesh_error("device_mesh", shape);
    if (!m.empty()) throw invalid_mesh_error(std::string(m.view()));
    std::size_t known = 1;
    std::size_t dynamic = npos;
    for (std::size_t a = 0; a < shape.ndim; ++a) {
      if (shape.extent(a) != dynamic_extent)
        known *= shape.extent(a);
      else if (dynamic == npos)
        dynamic = a;
      else
        throw invalid_mesh_error("device_mesh: mesh " + std::string(to_string(shape).view()) +
                                 " leaves more than one extent to the communicator");
    }
    if (dynamic != npos && known != 0 && size % known == 0) shape.axes[dynamic].extent = size / known;
    if (!shape.is_static() || shape.size() != size)
      throw invalid_mesh_error("device_mesh: mesh " + std::string(to_string(shape).view()) + " has " +
                               (shape.is_static() ? std::to_string(shape.size()) : std::string("no whole number of")) +
                               " devices but the communicator has " + std::to_string(size) + " ranks");
    return shape;
  }

  void agree_on_shape() const {
    std::uint64_t const mine = detail::hash(shape_);
    std::vector<std::uint64_t> all(size());
    MPI_Allgather(&mine, 1, MPI_UINT64_T, all.data(), 1, MPI_UINT64_T, comm_.get());
    for (std::size_t r = 0; r < all.size(); ++r)
      if (all[r] != all[0])
        throw invalid_mesh_error("device_mesh: rank " + std::to_string(r) + " gave a different mesh shape than rank 0 (" +
                                 std::string(to_string(shape_).view()) + " on rank " + std::to_string(rank()) + ")");
  }

  communicator comm_;
  mesh_shape shape_;
  mesh_coordinates coordinates_{};
  mutable std::map<unsigned, std::unique_ptr<communicator>> groups_;
  mutable std::deque<std::pair<std::pair<bound_layout, bound_layout>, redistribution_plan>> plans_;  // references stay valid
};

}  // namespace shardmesh

namespace shardmesh {

// A device mesh whose axis names (and perhaps extents) are constants, so
// that layouts used with it are checked against its axes at compile time.
template <mesh_shape Shape>
class static_mesh : public device_mesh {
  static_assert(require_valid<mesh_error("static_mesh", Shape)>());

 public:
  static constexpr mesh_shape static_shape = Shape;
  explicit static_mesh(MPI_Comm comm) : device_mesh(comm, Shape) {}
};

}  // namespace shardmesh
