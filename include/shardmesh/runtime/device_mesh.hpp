#pragma once
// A mesh shape bound to an MPI communicator: rank r of the communicator is
// the device at coordinates_of(shape, r). A device_mesh is a cheap handle:
// copies share one runtime context (mesh_context.hpp: communicator, axis
// groups, submeshes, plans, counters, memory ledger, workspaces), which
// lives as long as any copy or any tensor on the mesh.

#include "shardmesh/algebra/axis_groups.hpp"
#include "shardmesh/algebra/axis_set.hpp"
#include "shardmesh/algebra/hash.hpp"
#include "shardmesh/algebra/mesh_shape.hpp"
#include "shardmesh/algebra/plan_cache.hpp"
#include "shardmesh/algebra/validation.hpp"
#include "shardmesh/comm/communicator.hpp"
#include "shardmesh/errors.hpp"
#include "shardmesh/runtime/memory_ledger.hpp"
#include "shardmesh/runtime/mesh_context.hpp"

#include <mpi.h>

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace shardmesh {

class device_mesh {
 public:
  // An empty handle, to be assigned; nothing else may be done with it.
  device_mesh() = default;

  // shape may leave one extent dynamic: it is then the communicator's size
  // divided by the others. Throws invalid_mesh_error on every rank if the
  // shape is malformed, does not multiply to the communicator's size, or
  // differs between ranks. Collective over comm; the mesh communicates on a
  // duplicate of comm, so its messages never mix with the caller's.
  device_mesh(MPI_Comm comm, mesh_shape const& shape, cost_model model = {}) {
    communicator own = communicator::borrow(comm).dup();
    mesh_shape const bound = bind_extents(shape, static_cast<std::size_t>(own.size()));
    agree(own, detail::hash(bound), "device_mesh: rank ",
          " gave a different mesh shape than rank 0 (" + std::string(to_string(bound).view()) + ")");
    context_ = std::make_shared<detail::mesh_context>(std::move(own), bound, std::make_shared<memory_ledger>(), model);
  }

  // Whether this is an empty handle (default-constructed or moved from).
  [[nodiscard]] bool empty() const { return !context_; }

  [[nodiscard]] mesh_shape const& shape() const { return context_->shape(); }
  [[nodiscard]] communicator const& comm() const { return context_->comm(); }
  [[nodiscard]] std::size_t rank() const { return context_->rank(); }
  [[nodiscard]] std::size_t size() const { return shape().size(); }
  [[nodiscard]] mesh_coordinates const& coordinates() const { return context_->coordinates(); }

  // The ranks that differ from this one only on `axes`, ranked by
  // group_position. Collective over the mesh on first use of `axes`.
  [[nodiscard]] communicator const& group(axis_set axes) const { return context_->group(axes); }

  // The mesh of this rank's slice along `axes`: the ranks that differ from
  // this one only on those axes, with those axes (a pipeline stage is the
  // submesh of every axis but "pp"). It has its own groups, plans and
  // workspaces, and shares this mesh's counters and memory ledger: they
  // describe this rank. Collective over the mesh on first use of `axes`;
  // every rank must ask for the same axes (invalid_mesh_error otherwise).
  [[nodiscard]] device_mesh submesh(axis_set axes) const {
    return device_mesh(context_->submesh(axes, [&] {
      agree(comm(), axes.bits, "submesh: rank ", " asked for other axes than rank 0");
      if (axes.empty() || !(axes - axis_set::all(shape().ndim)).empty())
        throw invalid_mesh_error("submesh: mesh " + std::string(to_string(shape()).view()) +
                                 " has no submesh on the axis set " + std::to_string(axes.bits) +
                                 " (bit a: axis a; at least one axis of the mesh)");
      return std::make_shared<detail::mesh_context>(context_->split(axes), group_shape(shape(), axes),
                                                    context_->ledger(), context_->plans().model());
    }));
  }
  // The same, by axis names: mesh.submesh({"dp", "tp"}).
  [[nodiscard]] device_mesh submesh(std::initializer_list<std::string_view> names) const {
    axis_set axes;
    for (std::string_view name : names) {
      std::size_t const a = shape().find(name);
      if (a == npos)
        throw invalid_mesh_error("submesh: mesh " + std::string(to_string(shape()).view()) + " has no axis \"" +
                                 std::string(name) + "\"");
      axes.insert(a);
    }
    return submesh(axes);
  }

  // The planned redistribution between two layouts on this mesh, made once.
  [[nodiscard]] std::shared_ptr<redistribution_plan const> plan(bound_layout const& from,
                                                                bound_layout const& to) const {
    return context_->plans().get(from, to);
  }
  [[nodiscard]] plan_cache& plans() const { return context_->plans(); }

  // Every collective on this mesh, its groups and submeshes.
  [[nodiscard]] comm_counters& counters() const { return comm().counters(); }

  [[nodiscard]] memory_ledger& ledger() const { return *context_->ledger(); }
  // `bytes` of `category` recorded in the ledger while the entry lives.
  [[nodiscard]] ledger_entry track(memory_category category, std::size_t bytes) const {
    return {context_->ledger(), category, bytes};
  }

  // Runtime state a higher layer attaches to this mesh, one per type, made
  // as State(context) on first use.
  template <class State>
  [[nodiscard]] State& state() const {
    return context_->state<State>();
  }

  // The same mesh: the same communicator (MPI_IDENT) and shape. Two meshes
  // built from one communicator are different meshes.
  friend bool operator==(device_mesh const& a, device_mesh const& b) {
    if (a.context_ == b.context_) return true;
    if (!a.context_ || !b.context_) return false;
    int result = MPI_UNEQUAL;
    MPI_Comm_compare(a.comm().get(), b.comm().get(), &result);
    return result == MPI_IDENT && a.shape() == b.shape();
  }

 private:
  explicit device_mesh(std::shared_ptr<detail::mesh_context> context) : context_(std::move(context)) {}

  static mesh_shape bind_extents(mesh_shape shape, std::size_t size) {
    fixed_text const m = mesh_error("device_mesh", shape);
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

  // Collective over comm: throws invalid_mesh_error on every rank, naming
  // the first rank whose value differs from rank 0's.
  static void agree(communicator const& comm, std::uint64_t mine, std::string const& before, std::string const& after) {
    std::vector<std::uint64_t> all(static_cast<std::size_t>(comm.size()));
    MPI_Allgather(&mine, 1, MPI_UINT64_T, all.data(), 1, MPI_UINT64_T, comm.get());
    for (std::size_t r = 0; r < all.size(); ++r)
      if (all[r] != all[0]) throw invalid_mesh_error(before + std::to_string(r) + after);
  }

  std::shared_ptr<detail::mesh_context> context_;
};

// A device mesh whose axis names (and perhaps extents) are constants, so
// that layouts used with it are checked against its axes at compile time.
template <mesh_shape Shape>
class static_mesh : public device_mesh {
  static_assert(require_valid<mesh_error("static_mesh", Shape)>());

 public:
  static constexpr mesh_shape static_shape = Shape;
  explicit static_mesh(MPI_Comm comm) : device_mesh(comm, Shape) {}
};

// l bound to the mesh's shape: bind(mesh, l) for bind(mesh.shape(), l).
// Throws invalid_layout_error if l is no layout on this mesh.
[[nodiscard]] inline bound_layout bind(device_mesh const& mesh, layout const& l) {
  if (fixed_text const m = layout_error("bind", mesh.shape(), l); !m.empty())
    throw invalid_layout_error(std::string(m.view()));
  return bind(mesh.shape(), l);
}

}  // namespace shardmesh
