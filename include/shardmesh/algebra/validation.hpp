#pragma once
// Validity of meshes, layouts and transitions. Each check returns an empty
// message when all is well, else one sentence naming the operation, the
// dimension and the axis, e.g.
//   redistribute: dimension 1 is sharded twice on axis "tp" (layout S(dp),S(tp,tp), mesh dp=2,tp=2)
// The same functions serve at run time (the runtime throws the message) and
// at compile time (require_valid<Message>() turns a non-empty message into a
// compile error that shows it). Pure constexpr; no Kokkos or MPI.

#include "shardmesh/algebra/layout.hpp"
#include "shardmesh/algebra/mesh_shape.hpp"
#include "shardmesh/algebra/static_string.hpp"
#include "shardmesh/detail/float16.hpp"

#include <complex>
#include <concepts>
#include <cstddef>
#include <string_view>
#include <type_traits>

namespace shardmesh {

// Empty if mesh is well formed: identifiers, distinct names, extents >= 1.
[[nodiscard]] constexpr fixed_text mesh_error(std::string_view operation, mesh_shape const& mesh) {
  fixed_text m;
  if (mesh.overflow != 0) return m << operation << ": a mesh has at most " << max_mesh_axes << " axes";
  for (std::size_t a = 0; a < mesh.ndim; ++a) {
    auto const name = mesh[a].name.view();
    if (!is_identifier(name))
      return m << operation << ": mesh axis " << a << " is called \"" << name
               << "\", which is not an identifier (letters, digits, '_')";
    if (mesh.extent(a) == 0) return m << operation << ": mesh axis \"" << name << "\" has extent 0";
    for (std::size_t b = 0; b < a; ++b)
      if (mesh[b].name.view() == name) return m << operation << ": the mesh has two axes called \"" << name << "\"";
  }
  return m;
}

namespace detail {

constexpr fixed_text& context(fixed_text& m, mesh_shape const& mesh, layout const& l) {
  return m << " (layout " << to_string(l) << ", mesh " << to_string(mesh) << ")";
}

}  // namespace detail

// Empty if l is a valid layout on mesh: its axes exist, each mesh axis is used
// at most once across all dimensions and the partial set, cyclic blocks are
// not empty.
[[nodiscard]] constexpr fixed_text layout_error(std::string_view operation, mesh_shape const& mesh, layout const& l) {
  fixed_text m = mesh_error(operation, mesh);
  if (!m.empty()) return m;
  if (l.overflow != 0) return m << operation << ": a tensor has at most " << max_tensor_rank << " dimensions";
  if (l.partial_axes.overflow != 0)
    return m << operation << ": a layout is partial on at most " << max_mesh_axes << " axes";
  // Where each mesh axis is used so far: npos, a dimension, or rank for partial.
  std::size_t used_by[max_mesh_axes];
  for (auto& u : used_by) u = npos;
  auto const claim = [&](axis_name const& name, std::size_t user) -> bool {
    std::size_t const a = mesh.find(name.view());
    if (a == npos) {
      if (user == l.rank)
        m << operation << ": the layout is partial on axis \"" << name << "\", which the mesh lacks";
      else
        m << operation << ": dimension " << user << " is sharded on axis \"" << name << "\", which the mesh lacks";
    } else if (used_by[a] == user) {
      if (user == l.rank)
        m << operation << ": the layout is partial twice on axis \"" << name << "\"";
      else
        m << operation << ": dimension " << user << " is sharded twice on axis \"" << name << "\"";
    } else if (used_by[a] != npos) {
      m << operation << ": axis \"" << name << "\" is used by dimension " << used_by[a] << " and "
        << (user == l.rank ? fixed_text("the partial set") : fixed_text("dimension") << " " << user);
    } else {
      used_by[a] = user;
      return true;
    }
    detail::context(m, mesh, l);
    return false;
  };
  for (std::size_t d = 0; d < l.rank; ++d) {
    auto const& p = l[d];
    if (p.axes.overflow != 0)
      return m << operation << ": dimension " << d << " is sharded on more than " << max_mesh_axes << " axes";
    if (p.dist == distribution::cyclic && p.block_size == 0) {
      m << operation << ": dimension " << d << " is cyclic with blocks of 0 elements";
      return detail::context(m, mesh, l);
    }
    for (std::size_t i = 0; i < p.axes.count; ++i)
      if (!claim(p.axes.names[i], d)) return m;
  }
  for (std::size_t i = 0; i < l.partial_axes.count; ++i)
    if (!claim(l.partial_axes.names[i], l.rank)) return m;
  return m;
}

// A complex number of float or double: two parts stored real first, as
// std::complex and Kokkos::complex are (recognised by shape, so that this
// pure header names neither Kokkos nor any other library).
template <class T>
concept complex_number =
    requires(T const z) {
      typename T::value_type;
      { z.real() } -> std::convertible_to<typename T::value_type>;
      { z.imag() } -> std::convertible_to<typename T::value_type>;
    } && (std::is_same_v<typename T::value_type, float> || std::is_same_v<typename T::value_type, double>) &&
    sizeof(T) == 2 * sizeof(typename T::value_type);

// A 16-bit floating-point element (bf16, fp16): a two-byte class that
// converts to and from float, as detail/float16.hpp's host types and
// Kokkos's half_t and bhalf_t on device builds do (recognised by shape, so
// that this pure header names no library), or the compiler's __bf16 and
// _Float16. MPI has no such type: collectives move their bits and reduce
// them widened to float (comm/reduced_precision.hpp).
template <class T>
concept float16_element = !std::is_integral_v<T> && sizeof(T) == 2 && requires(T const x, float const f) {
  static_cast<float>(x);
  static_cast<T>(f);
};

// A short name of an element type for messages: f32, f64, i32, c64, bf16, ...
template <class T>
[[nodiscard]] constexpr std::string_view element_name() {
  if constexpr (std::is_same_v<T, float>)
    return "f32";
  else if constexpr (std::is_same_v<T, double>)
    return "f64";
  else if constexpr (std::is_same_v<T, bool>)
    return "bool";
  else if constexpr (std::is_integral_v<T> && std::is_signed_v<T>)
    return sizeof(T) == 1 ? "i8" : sizeof(T) == 2 ? "i16" : sizeof(T) == 4 ? "i32" : "i64";
  else if constexpr (std::is_integral_v<T>)
    return sizeof(T) == 1 ? "u8" : sizeof(T) == 2 ? "u16" : sizeof(T) == 4 ? "u32" : "u64";
  else if constexpr (complex_number<T>)
    return sizeof(T) == 8 ? "c64" : "c128";
  else if constexpr (std::is_same_v<T, detail::host_bf16> || std::is_same_v<T, __bf16>)
    return "bf16";
  else if constexpr (std::is_same_v<T, detail::host_fp16> || std::is_same_v<T, _Float16>)
    return "f16";
  else if constexpr (float16_element<T>)
    return "16-bit float";
  else
    return "T";
}

template <class T>
inline constexpr bool is_complex_v = complex_number<T>;

// sum and prod need arithmetic (bool excluded: its sum overflows), 16-bit
// float or complex elements; max and min need an order, so arithmetic and
// 16-bit float elements only, bool excluded too (MPI defines no max or min
// on MPI_CXX_BOOL).
template <class T>
[[nodiscard]] constexpr bool reduce_op_fits(reduce_op op) {
  bool const arithmetic = std::is_arithmetic_v<T> || float16_element<T>;
  switch (op) {
    case reduce_op::sum:
    case reduce_op::prod: return (arithmetic && !std::is_same_v<T, bool>) || is_complex_v<T>;
    case reduce_op::max:
    case reduce_op::min: return arithmetic && !std::is_same_v<T, bool>;
  }
  return false;
}

// layout_error, plus: the reduction op fits the element type T.
template <class T>
[[nodiscard]] constexpr fixed_text layout_error(std::string_view operation, mesh_shape const& mesh, layout const& l) {
  fixed_text m = layout_error(operation, mesh, l);
  if (m.empty() && l.is_partial() && !reduce_op_fits<T>(l.op)) {
    m << operation << ": reduction " << to_string(l.op) << " on axis \"" << l.partial_axes.names[0]
      << "\" does not fit element type " << element_name<T>();
    detail::context(m, mesh, l);
  }
  return m;
}

// Empty if a tensor can move from layout `from` to layout `to` on mesh: both
// are valid, no axis goes from shard to partial, and partial axes keep
// their op (partial data can be reduced, not re-reduced with another op).
[[nodiscard]] constexpr fixed_text transition_error(std::string_view operation, mesh_shape const& mesh,
                                                    layout const& from, layout const& to) {
  fixed_text m = layout_error(operation, mesh, from);
  if (m.empty()) m = layout_error(operation, mesh, to);
  if (!m.empty()) return m;
  if (from.rank != to.rank)
    return m << operation << ": layout " << to_string(from) << " has " << from.rank << " dimensions, layout "
             << to_string(to) << " has " << to.rank;
  auto const tail = [&]() -> fixed_text& {
    return m << " (" << to_string(from) << " -> " << to_string(to) << ", mesh " << to_string(mesh) << ")";
  };
  for (std::size_t i = 0; i < to.partial_axes.count; ++i) {
    auto const& name = to.partial_axes.names[i];
    for (std::size_t d = 0; d < from.rank; ++d)
      if (from[d].axes.contains(name.view())) {
        m << operation << ": dimension " << d << " is sharded on axis \"" << name
          << "\", which the target makes partial: shard to partial is impossible";
        return tail();
      }
    if (from.partial_axes.contains(name.view()) && from.op != to.op) {
      m << operation << ": axis \"" << name << "\" is partial " << to_string(from.op) << " and cannot become partial "
        << to_string(to.op);
      return tail();
    }
  }
  if (from.is_partial() && to.is_partial() && from.op != to.op) {
    m << operation << ": partial " << to_string(from.op) << " cannot become partial " << to_string(to.op)
      << " on axis \"" << to.partial_axes.names[0] << "\"";
    return tail();
  }
  return m;
}

// A mesh with one axis (of extent 2) for each distinct name the layouts use:
// what checks that do not depend on the real mesh validate against.
template <std::same_as<layout>... Layouts>
[[nodiscard]] constexpr mesh_shape names_mesh(Layouts const&... layouts) {
  mesh_shape mesh;
  auto const add = [&](axis_name const& name) {
    if (mesh.find(name.view()) != npos) return;
    if (mesh.ndim == max_mesh_axes)
      ++mesh.overflow;
    else
      mesh.axes[mesh.ndim++] = {name, 2};
  };
  auto const add_all = [&](layout const& l) {
    for (std::size_t d = 0; d < l.rank; ++d)
      for (std::size_t i = 0; i < l[d].axes.count; ++i) add(l[d].axes.names[i]);
    for (std::size_t i = 0; i < l.partial_axes.count; ++i) add(l.partial_axes.names[i]);
  };
  (add_all(layouts), ...);
  return mesh;
}

// Compile time: instantiating this with a non-empty message is an error
// whose diagnostic shows the message as the template argument.
template <auto Message>
struct shardmesh_error {
  static_assert(Message.empty(),
                "shardmesh: invalid mesh, layout or transition; the message is shardmesh_error's "
                "template argument above");
  static constexpr bool value = Message.empty();
};

template <auto Message>
constexpr bool require_valid() {
  return shardmesh_error<Message>::value;
}

}  // namespace shardmesh

namespace shardmesh {

// Compile-time checks of constant meshes and layouts, e.g.
//   static_assert(check_layout<mesh, layout{shard("dp"), replicated}, float>());
template <mesh_shape Mesh, layout Layout, class T = float>
constexpr bool check_layout() {
  return require_valid<layout_error<T>("layout", Mesh, Layout)>();
}

template <mesh_shape Mesh, layout From, layout To>
constexpr bool check_transition() {
  return require_valid<transition_error("redistribute", Mesh, From, To)>();
}

}  // namespace shardmesh
