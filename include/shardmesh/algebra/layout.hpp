#pragma once
// How a tensor lies on a mesh. For each tensor dimension: the ordered list of
// mesh axes that shard it (major to minor) and a distribution, block or
// block-cyclic; a set of mesh axes on which the tensor is partial, with a
// reduction op; every other mesh axis replicates it.
//
//   constexpr layout rows{shard("dp"), replicated};            S(dp),R
//   constexpr layout both{shard("dp", "tp"), replicated};      S(dp,tp),R
//   constexpr layout tiles{cyclic(64, "tp"), replicated};      C64(tp),R
//   constexpr layout sums = layout{replicated, replicated}.partial(reduce_op::sum, "tp");
//                                                              R,R P(sum:tp)
// Layouts are structural values: dtensor<float, rows> works. Pure constexpr;
// no Kokkos or MPI.

#include "shardmesh/algebra/mesh_shape.hpp"
#include "shardmesh/algebra/static_string.hpp"

#include <array>
#include <concepts>
#include <cstddef>
#include <string_view>

namespace shardmesh {

inline constexpr std::size_t max_tensor_rank = 6;

enum class reduce_op : unsigned char { sum, max, min, prod };

[[nodiscard]] constexpr std::string_view to_string(reduce_op op) {
  switch (op) {
    case reduce_op::sum: return "sum";
    case reduce_op::max: return "max";
    case reduce_op::min: return "min";
    case reduce_op::prod: return "prod";
  }
  return "?";
}

enum class distribution : unsigned char { block, cyclic };

// A list of mesh axes by name, as a layout holds them.
struct axis_list {
  std::array<axis_name, max_mesh_axes> names{};
  std::size_t count = 0;
  std::size_t overflow = 0;  // names beyond max_mesh_axes; validation reports them

  constexpr void push_back(axis_name const& name) {
    if (count == max_mesh_axes)
      ++overflow;
    else
      names[count++] = name;
  }
  [[nodiscard]] constexpr bool contains(std::string_view name) const {
    for (std::size_t i = 0; i < count; ++i)
      if (names[i].view() == name) return true;
    return false;
  }
  constexpr bool operator==(axis_list const&) const = default;
};

// The placement of one tensor dimension. With no axes it is replicated.
struct dim_placement {
  axis_list axes;  // major to minor
  distribution dist = distribution::block;
  std::size_t block_size = 0;  // cyclic only: elements per block

  [[nodiscard]] constexpr bool is_sharded() const { return axes.count != 0; }
  constexpr bool operator==(dim_placement const&) const = default;
};

inline constexpr dim_placement replicated{};

// Block distribution over the given axes, the first one major.
template <std::size_t... N>
[[nodiscard]] constexpr dim_placement shard(char const (&... names)[N]) {
  dim_placement p;
  (p.axes.push_back(axis_name(names)), ...);
  return p;
}

// Block-cyclic distribution with block_size elements per block.
template <std::size_t... N>
[[nodiscard]] constexpr dim_placement cyclic(std::size_t block_size, char const (&... names)[N]) {
  dim_placement p = shard(names...);
  p.dist = distribution::cyclic;
  p.block_size = block_size;
  return p;
}

struct layout {
  std::array<dim_placement, max_tensor_rank> dims{};
  std::size_t rank = 0;
  std::size_t overflow = 0;  // dimensions beyond max_tensor_rank; validation reports them
  axis_list partial_axes;
  reduce_op op = reduce_op::sum;  // meaningful when partial_axes is not empty

  constexpr layout() = default;
  template <std::same_as<dim_placement>... D>
  constexpr layout(D const&... placements) {
    (add_dim(placements), ...);
  }
  // Member by member. nvcc's front end writes a layout template argument
  // back out in this form (distribute<layout{shard("x"), replicated}>(...)):
  // this constructor reads it back.
  constexpr layout(std::array<dim_placement, max_tensor_rank> const& placements, std::size_t dims_used,
                   std::size_t dims_over, axis_list const& partial_on, reduce_op reduction)
      : dims(placements), rank(dims_used), overflow(dims_over), partial_axes(partial_on), op(reduction) {}

  // This layout, also partial on the given axes with op.
  template <std::size_t... N>
  [[nodiscard]] constexpr layout partial(reduce_op reduction, char const (&... names)[N]) const {
    layout out = *this;
    out.op = reduction;
    (out.partial_axes.push_back(axis_name(names)), ...);
    return out;
  }

  [[nodiscard]] constexpr dim_placement const& operator[](std::size_t d) const { return dims[d]; }
  [[nodiscard]] constexpr bool is_partial() const { return partial_axes.count != 0; }

  constexpr bool operator==(layout const&) const = default;

 private:
  constexpr void add_dim(dim_placement const& p) {
    if (rank == max_tensor_rank)
      ++overflow;
    else
      dims[rank++] = p;
  }
};

// Compact notation, used in every message and plan dump:
//   R  S(dp)  S(dp,tp)  C64(tp)  and, if partial, a suffix " P(sum:tp)".
[[nodiscard]] constexpr fixed_text to_string(dim_placement const& p) {
  fixed_text out;
  if (!p.is_sharded()) return out << "R";
  if (p.dist == distribution::cyclic)
    out << "C" << p.block_size;
  else
    out << "S";
  out << "(";
  for (std::size_t i = 0; i < p.axes.count; ++i) out << (i == 0 ? "" : ",") << p.axes.names[i];
  return out << ")";
}

[[nodiscard]] constexpr fixed_text to_string(layout const& l) {
  fixed_text out;
  for (std::size_t d = 0; d < l.rank; ++d) out << (d == 0 ? "" : ",") << to_string(l[d]);
  if (l.is_partial()) {
    out << (l.rank == 0 ? "" : " ") << "P(" << to_string(l.op) << ":";
    for (std::size_t i = 0; i < l.partial_axes.count; ++i) out << (i == 0 ? "" : ",") << l.partial_axes.names[i];
    out << ")";
  }
  return out;
}

}  // namespace shardmesh
