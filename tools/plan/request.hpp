#pragma once
// What the command line asks for, checked: the mesh (every extent given, or
// one bound to the number of MPI ranks), the global shape, the element type
// and the layouts, each refused with the library's message when it is
// malformed or invalid. Shared by shardmesh-plan and shardmesh-bench.

#include <shardmesh/algebra/layout.hpp>
#include <shardmesh/algebra/mesh_shape.hpp>
#include <shardmesh/algebra/shard_geometry.hpp>
#include <shardmesh/algebra/static_string.hpp>

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace plan_tool {

// The arguments a request is made of, as the command line gives them.
struct request_args {
  std::string mesh;   // "dp=2,tp=2"
  std::string shape;  // "8,6": the global extents; empty when the caller sets them (see make_request)
  std::string type = "f32";
  std::string from;
  std::string to;    // empty with `all`
  bool all = false;  // every target layout instead of `to`
};

struct element_type {
  std::string_view name;  // as shardmesh::element_name<T>() spells it
  std::size_t bytes = 0;
  // shardmesh::layout_error<T>: also checks that a partial op fits the type.
  shardmesh::fixed_text (*layout_error)(std::string_view, shardmesh::mesh_shape const&, shardmesh::layout const&);
};

// f32, f64, c64, c128, i8 ... i64, u8 ... u64, bool.
extern std::vector<element_type> const element_types;

struct request {
  std::string program = "shardmesh-plan";  // the command, as the library's messages name it
  shardmesh::mesh_shape mesh;
  shardmesh::tensor_index global{};  // extents of the tensor
  std::size_t rank = 0;              // its number of dimensions
  element_type type;
  shardmesh::layout from;
  shardmesh::layout to;  // equal to `from` with `all`
};

// "f32[8,6]".
[[nodiscard]] std::string tensor_name(request const& r);

// Fills `out` from the arguments; returns the first problem, or "" when all
// is well. `program` names the command in the messages. With ranks = 0 every
// mesh extent must be given; otherwise the mesh must have `ranks` devices,
// and one extent left out ("dp=2,tp") is the number that makes it so.
// Without a shape, the tensor's rank is the source layout's and every extent
// is 1: the caller sets r.global.
[[nodiscard]] std::string make_request(request_args const& a, request& out, std::string_view program = "shardmesh-plan",
                                       std::size_t ranks = 0);

// The problem with moving the tensor from r.from to `to`, or "".
[[nodiscard]] std::string transition_problem(request const& r, shardmesh::layout const& to);

}  // namespace plan_tool
