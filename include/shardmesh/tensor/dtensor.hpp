#pragma once
// Distributed tensors: each rank holds its local shard as a Kokkos::View
// (row-major), with the global extents, the layout and the mesh.
//
//   dtensor<T, Layout, MemorySpace>   the layout is a constant: checked and
//                                     planned once, spelled in the type
//   dynamic_dtensor<T, Rank, MemorySpace>  the layout is chosen at run time
//
// Both are cheap handles (the View is reference-counted, the mesh a shared
// handle that the tensor keeps alive) and every operation on them is
// collective over the mesh. A moved-from or default-constructed tensor holds
// nothing: every operation given one throws empty_tensor_error naming the
// operation (its notation still names what it held, for that message).

#include "shardmesh/algebra/hash.hpp"
#include "shardmesh/algebra/layout.hpp"
#include "shardmesh/algebra/shard_geometry.hpp"
#include "shardmesh/algebra/validation.hpp"
#include "shardmesh/comm/staging.hpp"
#include "shardmesh/errors.hpp"
#include "shardmesh/runtime/device_mesh.hpp"
#include "shardmesh/tensor/detail/agreement.hpp"

#include <Kokkos_Core.hpp>

#include <array>
#include <cstddef>
#include <string>
#include <string_view>
#include <utility>

namespace shardmesh {

namespace detail {

template <class T, std::size_t Rank>
struct view_data {
  using type = typename view_data<T, Rank - 1>::type*;
};
template <class T>
struct view_data<T, 0> {
  using type = T;
};

// Extents of a View as a tensor_index.
template <class View>
tensor_index extents_of(View const& v) {
  tensor_index e{};
  for (std::size_t d = 0; d < View::rank(); ++d) e[d] = v.extent(d);
  return e;
}

// A View of the given extents (its first View::rank() entries).
template <class View>
View allocate(std::string const& label, tensor_index const& e) {
  return [&]<std::size_t... D>(std::index_sequence<D...>) {
    return View(Kokkos::view_alloc(Kokkos::WithoutInitializing, label), e[D]...);
  }(std::make_index_sequence<View::rank()>{});
}

}  // namespace detail

template <class T, std::size_t Rank, class MemorySpace = Kokkos::DefaultExecutionSpace::memory_space>
class dynamic_dtensor {
  static_assert(Rank >= 1 && Rank <= max_tensor_rank, "dtensor: rank must be 1 to 6");

 public:
  using value_type = T;
  using memory_space = MemorySpace;
  using execution_space = execution_space_of<MemorySpace>;
  using view_type = Kokkos::View<typename detail::view_data<T, Rank>::type, Kokkos::LayoutRight, MemorySpace>;
  using extents_type = std::array<std::size_t, Rank>;
  static constexpr std::size_t rank = Rank;

  dynamic_dtensor() = default;
  dynamic_dtensor(dynamic_dtensor const&) = default;
  dynamic_dtensor& operator=(dynamic_dtensor const&) = default;
  // The source keeps its notation and is marked as moved from.
  dynamic_dtensor(dynamic_dtensor&& other) noexcept
      : mesh_(std::exchange(other.mesh_, {})),
        layout_(other.layout_),
        global_(other.global_),
        local_(std::exchange(other.local_, {})),
        moved_from_(std::exchange(other.moved_from_, true)) {}
  dynamic_dtensor& operator=(dynamic_dtensor&& other) noexcept {
    if (this != &other) {
      mesh_ = std::exchange(other.mesh_, {});
      layout_ = other.layout_;
      global_ = other.global_;
      local_ = std::exchange(other.local_, {});
      moved_from_ = std::exchange(other.moved_from_, true);
    }
    return *this;
  }
  ~dynamic_dtensor() = default;

  // Wraps this rank's shard (check_agreed("dtensor")).
  dynamic_dtensor(device_mesh const& mesh, layout const& l, extents_type const& global, view_type local)
      : mesh_(mesh), layout_(l), local_(std::move(local)) {
    for (std::size_t d = 0; d < Rank; ++d) global_[d] = global[d];
    check_agreed("dtensor");
  }

  // Collective: checks on every rank that all ranks agree on the layout and
  // the global extents, that the layout is valid on the mesh, and that every
  // local shard has the extents the layout gives its rank; throws the same
  // exception on every rank otherwise, its message led by `operation`.
  void check_agreed(std::string_view operation) const {
    if (moved_from_) require_held(operation);
    if (mesh_.empty())
      throw invalid_mesh_error(std::string(operation) + ": the mesh is an empty handle (default-constructed)");
    std::string const problem = layout_problem(operation, layout_);
    detail::tensor_record mine{};
    mine.what = detail::fnv1a{}.mix(detail::hash(layout_)).mix(sizeof(T)).mix(Rank).value;
    for (std::size_t d = 0; d < Rank; ++d) {
      mine.global[d] = global_[d];
      mine.local[d] = local_.extent(d);
    }
    mine.expected = mine.local;  // an invalid layout gives no extents to compare with
    if (problem.empty()) {
      tensor_index const expected = local_extents(mesh_.shape(), bound(), global_, mesh_.rank());
      for (std::size_t d = 0; d < Rank; ++d) mine.expected[d] = expected[d];
    }
    detail::agree(mesh_, std::string(operation), notation(), Rank, mine);
    if (!problem.empty()) throw invalid_layout_error(problem);
  }

  // A tensor shardmesh built itself, known to be consistent: no checks, not collective.
  [[nodiscard]] static dynamic_dtensor adopt(device_mesh const& mesh, shardmesh::layout const& l,
                                             tensor_index const& global, view_type local) {
    dynamic_dtensor x;
    x.mesh_ = mesh;
    x.layout_ = l;
    x.global_ = global;
    x.local_ = std::move(local);
    return x;
  }

  // Whether the tensor holds a shard on a mesh (not moved from, not default-constructed).
  [[nodiscard]] bool holds() const { return !mesh_.empty(); }

  // Throws empty_tensor_error, naming `operation`, unless the tensor holds a shard.
  void require_held(std::string_view operation) const {
    if (holds()) return;
    throw empty_tensor_error(std::string(operation) + ": " +
                             (moved_from_ ? "the tensor " + notation() + " was moved from"
                                          : std::string("the tensor is empty (default-constructed, never assigned)")));
  }

  [[nodiscard]] device_mesh const& mesh() const {
    require_held("dtensor::mesh");
    return mesh_;
  }
  [[nodiscard]] shardmesh::layout const& layout() const { return layout_; }
  [[nodiscard]] bound_layout bound() const {
    require_held("dtensor::bound");
    return shardmesh::bind(mesh_.shape(), layout_);
  }
  [[nodiscard]] tensor_index const& global_extents() const { return global_; }
  [[nodiscard]] view_type const& local() const { return local_; }

  // "f32[8,6] S(dp),R"
  [[nodiscard]] std::string notation() const {
    return detail::tensor_name(element_name<T>(), Rank, global_) + " " + std::string(to_string(layout_).view());
  }

  // Why l is no layout for this tensor on its mesh, or empty. The same on
  // every rank that has the same mesh, tensor and l.
  [[nodiscard]] std::string layout_problem(std::string_view operation, shardmesh::layout const& l) const {
    require_held(operation);
    fixed_text m = layout_error<T>(operation, mesh_.shape(), l);
    if (m.empty() && l.rank != Rank)
      m << operation << ": layout " << to_string(l) << " has " << l.rank << " dimensions, the tensor " << Rank;
    if (m.empty()) return {};
    return detail::tensor_name(element_name<T>(), Rank, global_) + ": " + std::string(m.view());
  }

 private:
  device_mesh mesh_;
  shardmesh::layout layout_;
  tensor_index global_{};
  view_type local_;
  bool moved_from_ = false;
};

// A dtensor whose layout is a constant. Its checks that do not need the
// mesh (axes used twice, shard to partial, ops that do not fit T) fail at
// compile time; the axes are checked against the mesh when it is wrapped.
template <class T, layout Layout, class MemorySpace = Kokkos::DefaultExecutionSpace::memory_space>
class dtensor : public dynamic_dtensor<T, Layout.rank, MemorySpace> {
  using base = dynamic_dtensor<T, Layout.rank, MemorySpace>;
  static_assert(require_valid<layout_error<T>("dtensor", names_mesh(Layout), Layout)>());

 public:
  static constexpr shardmesh::layout static_layout = Layout;
  using typename base::extents_type;
  using typename base::view_type;

  dtensor() = default;
  dtensor(device_mesh const& mesh, extents_type const& global, view_type local)
      : base(mesh, Layout, global, std::move(local)) {}
  // Precondition: x's layout is Layout.
  explicit dtensor(base x) : base(std::move(x)) {}
};

// Throws empty_tensor_error naming `operation` for the first of `tensors`
// that holds nothing (moved from, or never assigned). Every operation calls
// it first; a user's own layer should too.
template <class... Tensors>
void require_held(std::string_view operation, Tensors const&... tensors) {
  (tensors.require_held(operation), ...);
}

}  // namespace shardmesh
