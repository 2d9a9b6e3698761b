#pragma once
// One named axis of a device mesh: axis<"dp", 2> has a static extent,
// axis<"dp"> an extent given at run time. Pure constexpr; no Kokkos or MPI.

#include "shardmesh/algebra/fixed_string.hpp"

#include <cstddef>
#include <limits>

namespace shardmesh {

inline constexpr std::size_t dynamic_extent = std::numeric_limits<std::size_t>::max();

template <fixed_string Name, std::size_t Extent = dynamic_extent>
struct axis {
  static_assert(is_identifier(Name.view()), "mesh axis: the name must be a non-empty identifier (letters, digits, '_')");
  static_assert(Extent > 0, "mesh axis: the extent must be at least 1");

  static constexpr std::string_view name = Name.view();
  static constexpr std::size_t static_extent = Extent;
  static constexpr bool is_static = Extent != dynamic_extent;
};

}  // namespace shardmesh
