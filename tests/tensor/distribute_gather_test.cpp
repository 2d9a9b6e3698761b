// distribute (from every rank or one) and gather (to every rank or one)
// round-trip a tensor exactly, for ranks 1 to 4 and every layout family.
#include "mpi_test.hpp"

#include <shardmesh/shardmesh.hpp>

#include <catch2/catch_test_macros.hpp>

#include <numeric>

// Inside a namespace of its own: bundled with other test files into one translation unit.
namespace distribute_gather_test {

using namespace shardmesh;

namespace {

template <class HostView>
void fill(HostView const& v) {
  for (std::size_t i = 0; i < v.size(); ++i) v.data()[i] = static_cast<typename HostView::value_type>(i % 97) + 1;
}

template <class A, class B>
bool same(A const& a, B const& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (a.data()[i] != b.data()[i]) return false;
  return true;
}

template <class HostView>
void round_trip(device_mesh const& mesh, layout const& l, HostView const& global) {
  INFO("layout " << to_string(l).view() << " on mesh " << to_string(mesh.shape()).view());
  int const ranks = test::world_size();
  for (int root : {all_ranks, 0, ranks - 1}) {
    auto const x = distribute(mesh, l, global, root);
    for (int to : {all_ranks, 0, ranks - 1}) {
      auto const back = gather(x, to);
      if (to == all_ranks || to == test::world_rank())
        REQUIRE(same(back, global));
      else
        REQUIRE(back.size() == 0);
    }
  }
}

}  // namespace

TEST_CASE("distribute and gather round-trip tensors of rank 1 to 4", "[tensor][distribute]") {
  auto const ranks = static_cast<std::size_t>(test::world_size());
  device_mesh const mesh(MPI_COMM_WORLD, mesh_shape{{"x", ranks}});
  Kokkos::View<double*, Kokkos::LayoutRight, Kokkos::HostSpace> v("v", 2 * ranks + 1);
  Kokkos::View<float**, Kokkos::LayoutRight, Kokkos::HostSpace> m("m", ranks + 2, 3);
  Kokkos::View<int***, Kokkos::LayoutRight, Kokkos::HostSpace> t("t", 2, ranks + 1, 3);
  Kokkos::View<double****, Kokkos::LayoutRight, Kokkos::HostSpace> q("q", 2, 3, ranks, 2);
  fill(v);
  fill(m);
  fill(t);
  fill(q);
  round_trip(mesh, layout{shard("x")}, v);
  round_trip(mesh, layout{cyclic(2, "x")}, v);
  round_trip(mesh, layout{replicated}.partial(reduce_op::sum, "x"), v);
  round_trip(mesh, layout{replicated, shard("x")}, m);
  round_trip(mesh, layout{replicated, replicated}.partial(reduce_op::max, "x"), m);
  round_trip(mesh, layout{replicated, shard("x"), replicated}, t);
  round_trip(mesh, layout{replicated, replicated, shard("x"), replicated}, q);
}

TEST_CASE("a partial layout gets the values at partial coordinate 0 and the identity elsewhere",
          "[tensor][distribute]") {
  auto const ranks = static_cast<std::size_t>(test::world_size());
  device_mesh const mesh(MPI_COMM_WORLD, mesh_shape{{"x", ranks}});
  Kokkos::View<int*, Kokkos::LayoutRight, Kokkos::HostSpace> v("v", 5);
  fill(v);
  auto const x = distribute(mesh, layout{replicated}.partial(reduce_op::min, "x"), v);
  auto const local = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace{}, x.local());
  for (std::size_t i = 0; i < 5; ++i)
    REQUIRE(local(i) == (test::world_rank() == 0 ? v(i) : Kokkos::reduction_identity<int>::min()));
}

TEST_CASE("typed dtensors distribute with their layout in the type", "[tensor][distribute]") {
  auto const ranks = static_cast<std::size_t>(test::world_size());
  static_mesh<mesh_shape{{"x"}}> const mesh(MPI_COMM_WORLD);
  constexpr layout rows{shard("x"), replicated};
  Kokkos::View<double**, Kokkos::LayoutRight, Kokkos::HostSpace> m("m", ranks + 1, 4);
  fill(m);
  dtensor<double, rows> const x = distribute<rows>(mesh, m);
  STATIC_REQUIRE(decltype(x)::static_layout == rows);
  REQUIRE(x.notation() == "f64[" + std::to_string(ranks + 1) + ",4] S(x),R");
  REQUIRE(same(gather(x), m));
}

}  // namespace distribute_gather_test
