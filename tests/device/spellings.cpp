// Spellings that nvcc is particular about, in the form that compiles with
// every compiler (docs/03-runtime.md, "Compiling with nvcc"). Built with the
// suite's compiler (device.spellings), compiled by nvcc and by Clang's HIP in
// tools/cuda-check's and tools/hip-check's runs; nothing here runs.
#include <shardmesh/shardmesh.hpp>

#include <cstddef>

namespace {

using namespace shardmesh;

using host_matrix = Kokkos::View<float**, Kokkos::LayoutRight, Kokkos::HostSpace>;
using vector = Kokkos::View<float*>;

// Layouts, meshes and einsum specifications written inline as template
// arguments. nvcc writes such a value back out member by member for the
// host compiler; the library's types read that form back, so every
// spelling works.
[[maybe_unused]] void inline_template_arguments(host_matrix const& global) {
  static_mesh<mesh_shape{{"x", 2}}> const mesh(MPI_COMM_WORLD);
  auto const x = distribute<layout{shard("x"), replicated}>(mesh, global);
  dtensor<float, layout{replicated, shard("x")}> const y = redistribute<layout{replicated, shard("x")}>(x);
  static_assert(decltype(y)::static_layout == layout{replicated, shard("x")});
  auto const z = ops::einsum<"ik,kj->ij">(x, redistribute<layout{shard("x"), replicated}>(y));
  (void)z;
}

// A KOKKOS_LAMBDA needs an enclosing function whose address can be taken:
// not a constructor (nor a destructor, nor a private or protected member).
// A constructor calls a function that launches the kernel.
void fill(vector const& v, float value) {
  Kokkos::parallel_for("fill", v.extent(0), KOKKOS_LAMBDA(std::size_t i) { v(i) = value; });
}

struct filled {
  vector values;
  explicit filled(std::size_t n) : values("values", n) { fill(values, 1.0F); }
};

// A KOKKOS_LAMBDA cannot capture a variable for the first time inside an
// if constexpr: a plain if on the constant compiles to the same kernel.
template <bool Forward>
void copy(vector const& a, vector const& b) {
  Kokkos::parallel_for(
      "copy", a.extent(0), KOKKOS_LAMBDA(std::size_t i) {
        if (Forward)
          b(i) = a(i);
        else
          a(i) = b(i);
      });
}

// The function around a KOKKOS_LAMBDA cannot be a template instantiated
// with a type local to a function, such as the caller's lambda: evaluate the
// lambda in a template without kernels, launch them from one without it.
void scale(vector const& v, float factor) {
  Kokkos::parallel_for("scale", v.extent(0), KOKKOS_LAMBDA(std::size_t i) { v(i) *= factor; });
}

template <class Factor>
void scale_by(vector const& v, Factor factor) {
  scale(v, factor());
}

[[maybe_unused]] void kernels() {
  filled const f(8);
  vector const g("g", 8);
  copy<true>(f.values, g);
  copy<false>(f.values, g);
  scale_by(g, [] { return 2.0F; });
}

}  // namespace
