#pragma once
// The shape of a logical device mesh: an ordered list of named axes, e.g.
//   constexpr mesh_shape mesh{{"dp", 2}, {"tp", 4}};
// Extents are static, or dynamic_extent and bound at run time with
// with_extents. Ranks map to coordinates row-major (last axis fastest), as in
// JAX and PyTorch's DeviceMesh. Pure constexpr; no Kokkos or MPI.

#include "shardmesh/algebra/static_string.hpp"

#include <array>
#include <cstddef>
#include <initializer_list>
#include <limits>
#include <span>
#include <string_view>

namespace shardmesh {

inline constexpr std::size_t dynamic_extent = std::numeric_limits<std::size_t>::max();
inline constexpr std::size_t max_mesh_axes = 6;
// Returned by lookups that find nothing.
inline constexpr std::size_t npos = std::numeric_limits<std::size_t>::max();

struct mesh_axis {
  axis_name name;
  std::size_t extent = dynamic_extent;
  constexpr bool operator==(mesh_axis const&) const = default;
};

using mesh_coordinates = std::array<std::size_t, max_mesh_axes>;

struct mesh_shape {
  std::array<mesh_axis, max_mesh_axes> axes{};
  std::size_t ndim = 0;
  std::size_t overflow = 0;  // axes given beyond max_mesh_axes; validation reports them

  constexpr mesh_shape() = default;
  constexpr mesh_shape(std::initializer_list<mesh_axis> list) {
    for (auto const& axis : list) {
      if (ndim == max_mesh_axes)
        ++overflow;
      else
        axes[ndim++] = axis;
    }
  }

  [[nodiscard]] constexpr mesh_axis const& operator[](std::size_t a) const { return axes[a]; }
  [[nodiscard]] constexpr std::size_t extent(std::size_t a) const { return axes[a].extent; }

  // Index of the axis called name, or npos.
  [[nodiscard]] constexpr std::size_t find(std::string_view name) const {
    for (std::size_t a = 0; a < ndim; ++a)
      if (axes[a].name.view() == name) return a;
    return npos;
  }

  [[nodiscard]] constexpr bool is_static() const {
    for (std::size_t a = 0; a < ndim; ++a)
      if (axes[a].extent == dynamic_extent) return false;
    return true;
  }

  // Number of devices. Precondition: is_static().
  [[nodiscard]] constexpr std::size_t size() const {
    std::size_t n = 1;
    for (std::size_t a = 0; a < ndim; ++a) n *= axes[a].extent;
    return n;
  }

  // The same axes with every extent given (run-time binding of dynamic ones).
  // Precondition: extents.size() == ndim.
  [[nodiscard]] constexpr mesh_shape with_extents(std::span<std::size_t const> extents) const {
    mesh_shape bound = *this;
    for (std::size_t a = 0; a < ndim; ++a) bound.axes[a].extent = extents[a];
    return bound;
  }

  constexpr bool operator==(mesh_shape const&) const = default;
};

// Row-major: the last axis varies fastest.
// Precondition: mesh.is_static(), rank < mesh.size().
// Postcondition: rank_of(mesh, coordinates_of(mesh, rank)) == rank.
[[nodiscard]] constexpr mesh_coordinates coordinates_of(mesh_shape const& mesh, std::size_t rank) {
  mesh_coordinates c{};
  for (std::size_t a = mesh.ndim; a-- > 0;) {
    c[a] = rank % mesh.extent(a);
    rank /= mesh.extent(a);
  }
  return c;
}

// Precondition: c[a] < mesh.extent(a) for every axis.
[[nodiscard]] constexpr std::size_t rank_of(mesh_shape const& mesh, mesh_coordinates const& c) {
  std::size_t rank = 0;
  for (std::size_t a = 0; a < mesh.ndim; ++a) rank = rank * mesh.extent(a) + c[a];
  return rank;
}

// "dp=2,tp=4" ("dp=?" for an extent not bound yet).
[[nodiscard]] constexpr fixed_text to_string(mesh_shape const& mesh) {
  fixed_text out;
  for (std::size_t a = 0; a < mesh.ndim; ++a) {
    if (a != 0) out << ",";
    out << mesh[a].name << "=";
    if (mesh.extent(a) == dynamic_extent)
      out << "?";
    else
      out << mesh.extent(a);
  }
  return out;
}

}  // namespace shardmesh
