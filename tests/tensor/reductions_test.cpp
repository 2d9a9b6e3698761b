// Partial sum, max and min tensors of float, double, int, bf16 and fp16
// (small integers: exact in each), reduced by the runtime's all-reduces
// and reduce-scatters, against the serial reference:
// every pair from a partial layout on 1-D and 2-D meshes, every 16th on 2x2x2.
#include "redistribution_check.hpp"

#include <catch2/catch_template_test_macros.hpp>
#include <catch2/catch_test_macros.hpp>

#include <complex>

// Inside a namespace of its own: bundled with other test files into one translation unit.
namespace reductions_test {

using namespace shardmesh;

TEMPLATE_TEST_CASE("partial layouts reduce exactly", "[tensor][reduction]", float, double, int, bf16, fp16) {
  std::size_t const ranks = static_cast<std::size_t>(test::world_size());
  std::size_t checked = 0;
  for (mesh_shape const& shape : test::meshes_of(ranks)) {
    device_mesh const mesh(MPI_COMM_WORLD, shape);
    auto const layouts =
        test::all_layouts(shape, 2, {.partial = {reduce_op::sum, reduce_op::max, reduce_op::min}, .cyclic = {}});
    std::size_t const stride = shape.ndim < 3 ? 1 : 16;
    std::size_t index = 0;
    for (auto const& from : layouts) {
      if (!from.is_partial()) continue;
      for (auto const& to : layouts) {
        if (index++ % stride != 0 || !transition_error("", shape, from, to).empty()) continue;
        test::check_redistribution<TestType, 2>(mesh, from, to, test::extents_for<2>(ranks)[1]);
        ++checked;
      }
    }
  }
  CHECK(checked > 0);
}

TEST_CASE("complex tensors become partial sums and products and reduce back", "[tensor][reduction]") {
  using c64 = std::complex<float>;
  device_mesh const mesh(MPI_COMM_WORLD, mesh_shape{{"a", dynamic_extent}});
  Kokkos::View<c64**, Kokkos::LayoutRight, Kokkos::HostSpace> global("global", 3, 4);
  for (std::size_t i = 0; i < global.size(); ++i)
    global.data()[i] = c64(static_cast<float>(i), static_cast<float>(i % 3) - 1.0f);
  layout const whole{replicated, replicated};
  auto const x = distribute<Kokkos::HostSpace>(mesh, whole, global);
  for (reduce_op op : {reduce_op::sum, reduce_op::prod}) {
    auto const partial = redistribute(x, layout{replicated, replicated}.partial(op, "a"));
    auto const back = gather(redistribute(partial, whole));
    for (std::size_t i = 0; i < global.size(); ++i) CHECK(back.data()[i] == global.data()[i]);
  }
}

}  // namespace reductions_test
