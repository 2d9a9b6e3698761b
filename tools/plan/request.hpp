#pragma once
// What the command line asks for, checked: the mesh (every extent given),
// the global shape, the element type and the layouts, each refused with the
// library's message when it is malformed or invalid.

#include <shardmesh/algebra/layout.hpp>
#include <shardmesh/algebra/mesh_shape.hpp>
#include <shardmesh/algebra/shard_geometry.hpp>
#include <shardmesh/algebra/static_string.hpp>

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace plan_tool {

struct options;

struct element_type {
  std::string_view name;  // as shardmesh::element_name<T>() spells it
  std::size_t bytes = 0;
  // shardmesh::layout_error<T>: also checks that a partial op fits the type.
  shardmesh::fixed_text (*layout_error)(std::string_view, shardmesh::mesh_shape const&, shardmesh::layout const&);
};

// f32, f64, c64, c128, i8 ... i64, u8 ... u64, bool.
extern std::vector<element_type> const element_types;

struct request {
  shardmesh::mesh_shape mesh;
  shardmesh::tensor_index global{};  // extents of the tensor
  std::size_t rank = 0;              // its number of dimensions
  element_type type;
  shardmesh::layout from;
  shardmesh::layout to;  // equal to `from` with --all
};

// "f32[8,6]".
[[nodiscard]] std::string tensor_name(request const& r);

// Fills `out` from the options; returns the first problem, or "" when all is well.
[[nodiscard]] std::string make_request(options const& o, request& out);

// The problem with moving the tensor from r.from to `to`, or "".
[[nodiscard]] std::string transition_problem(request const& r, shardmesh::layout const& to);

}  // namespace plan_tool
