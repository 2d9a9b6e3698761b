#include "request.hpp"

#include <shardmesh/algebra/notation.hpp>
#include <shardmesh/algebra/validation.hpp>

#include <complex>
#include <cstdint>

namespace plan_tool {

namespace {

using namespace shardmesh;

template <class T>
element_type element() {
  return {element_name<T>(), sizeof(T), &shardmesh::layout_error<T>};
}

std::string text(fixed_text const& t) { return std::string(t.view()); }

// "8,6": one to six positive extents; a problem quotes the text and the column.
std::string parse_shape(std::string_view text, request& out) {
  std::size_t at = 0;
  auto const problem = [&](std::string_view what) {
    return "--shape " + std::string(text) + ": " + std::string(what) + " at column " + std::to_string(at + 1);
  };
  while (true) {
    if (out.rank == max_tensor_rank) return problem("more than 6 dimensions");
    std::size_t const start = at;
    std::size_t n = 0;
    while (at < text.size() && text[at] >= '0' && text[at] <= '9') {
      n = n * 10 + static_cast<std::size_t>(text[at] - '0');
      if (n > (std::size_t{1} << 48)) return problem("extent too large");
      ++at;
    }
    if (at == start) return problem("expected an extent");
    if (n == 0) {
      at = start;
      return problem("an extent of 0");
    }
    out.global[out.rank++] = n;
    if (at == text.size()) return "";
    if (text[at] != ',') return problem("expected ','");
    ++at;
  }
}

// Binds the extent left out of `mesh`, if any, so that it has `ranks`
// devices (as device_mesh does with its communicator); a problem quotes `text`.
std::string bind_extents(std::string_view text, std::size_t ranks, mesh_shape& mesh) {
  std::string const quoted = "--mesh " + std::string(text);
  std::size_t known = 1;
  std::size_t left_out = npos;
  for (std::size_t a = 0; a < mesh.ndim; ++a) {
    if (mesh.extent(a) != dynamic_extent)
      known *= mesh.extent(a);
    else if (left_out == npos)
      left_out = a;
    else
      return quoted + ": more than one extent left to the number of ranks";
  }
  std::string const runs = std::to_string(ranks) + (ranks == 1 ? " rank" : " ranks");
  if (left_out == npos) {
    if (known == ranks) return "";
    return quoted + " has " + std::to_string(known) + " devices but runs on " + runs;
  }
  if (ranks % known != 0)
    return quoted + ": the extents given multiply to " + std::to_string(known) + ", which does not divide the " + runs;
  mesh.axes[left_out].extent = ranks / known;
  return "";
}

}  // namespace

std::vector<element_type> const element_types = {
    element<float>(),        element<double>(),        element<std::complex<float>>(), element<std::complex<double>>(),
    element<std::int8_t>(),  element<std::int16_t>(),  element<std::int32_t>(),        element<std::int64_t>(),
    element<std::uint8_t>(), element<std::uint16_t>(), element<std::uint32_t>(),       element<std::uint64_t>(),
    element<bool>(),
};

std::string tensor_name(request const& r) {
  std::string out = std::string(r.type.name) + "[";
  for (std::size_t d = 0; d < r.rank; ++d) out += (d == 0 ? "" : ",") + std::to_string(r.global[d]);
  return out + "]";
}

std::string make_request(request_args const& a, request& out, std::string_view program, std::size_t ranks) {
  out.program = std::string(program);
  for (element_type const& t : element_types)
    if (t.name == a.type) out.type = t;
  if (out.type.bytes == 0) return "--type " + a.type + ": unknown element type";

  auto const mesh = parse_mesh(a.mesh);
  if (!mesh.ok()) return "--mesh " + text(mesh.error);
  out.mesh = mesh.value();
  if (ranks == 0)
    for (std::size_t i = 0; i < out.mesh.ndim; ++i)
      if (out.mesh.extent(i) == dynamic_extent)
        return "--mesh " + a.mesh + ": axis \"" + std::string(out.mesh[i].name.view()) +
               "\" has no extent; a plan needs every extent (e.g. " + std::string(out.mesh[i].name.view()) + "=2)";
  if (auto const m = mesh_error(program, out.mesh); !m.empty()) return text(m);
  if (ranks != 0)
    if (auto problem = bind_extents(a.mesh, ranks, out.mesh); !problem.empty()) return problem;

  if (!a.shape.empty())
    if (auto problem = parse_shape(a.shape, out); !problem.empty()) return problem;

  auto const from = parse_layout(a.from);
  if (!from.ok()) return "--from " + text(from.error);
  out.from = from.value();
  out.to = out.from;
  if (!a.all) {
    auto const to = parse_layout(a.to);
    if (!to.ok()) return "--to " + text(to.error);
    out.to = to.value();
  }
  if (a.shape.empty()) {
    out.rank = out.from.rank;
    for (std::size_t d = 0; d < out.rank; ++d) out.global[d] = 1;
  }
  if (out.from.rank != out.rank)
    return "--shape " + a.shape + " has " + std::to_string(out.rank) + " dimensions, layout " +
           text(to_string(out.from)) + " has " + std::to_string(out.from.rank);
  return transition_problem(out, out.to);
}

std::string transition_problem(request const& r, layout const& to) {
  fixed_text m = r.type.layout_error(r.program, r.mesh, r.from);
  if (m.empty()) m = r.type.layout_error(r.program, r.mesh, to);
  if (m.empty()) m = transition_error(r.program, r.mesh, r.from, to);
  return text(m);
}

}  // namespace plan_tool
