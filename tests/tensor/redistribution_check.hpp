#pragma once
// One redistribution on the real runtime, checked against the serial
// reference: the source shards come from the reference simulator's cut of a
// global array, the result must equal the target's cut (reduced over its
// partial axes), and the counters must show exactly the plan's collectives
// and the bytes plan_traffic predicts for this rank. The same redistribution
// into an existing tensor, and by a redistributor (planned once, run twice),
// must write the same values into that tensor's View.

#include "../algebra/layout_enumeration.hpp"
#include "mpi_test.hpp"

#include <shardmesh/algebra/plan_traffic.hpp>
#include <shardmesh/algebra/reference_simulator.hpp>
#include <shardmesh/shardmesh.hpp>

#include <catch2/catch_test_macros.hpp>

#include <map>
#include <numeric>
#include <string>
#include <vector>

namespace shardmesh::test {

// Meshes of `ranks` devices: 1-D, every 2-D factorisation with both extents
// at least 2, and 2x2x2 when there are 8 ranks.
inline std::vector<mesh_shape> meshes_of(std::size_t ranks) {
  std::vector<mesh_shape> out{mesh_shape{{"a", ranks}}};
  for (std::size_t a = 2; a * 2 <= ranks; ++a)
    if (ranks % a == 0) out.push_back(mesh_shape{{"a", a}, {"b", ranks / a}});
  if (ranks == 8) out.push_back(mesh_shape{{"a", 2}, {"b", 2}, {"c", 2}});
  return out;
}

// Counter names of the collectives a step issues.
inline char const* collective_of(step_kind kind) {
  switch (kind) {
    case step_kind::all_gather: return "all_gather";
    case step_kind::all_to_all:
    case step_kind::all_to_all_v: return "all_to_all";
    case step_kind::all_reduce: return "all_reduce";
    case step_kind::reduce_scatter: return "reduce_scatter";
    case step_kind::permute: return "point_to_point";
    case step_kind::slice:
    case step_kind::to_partial: return nullptr;
  }
  return nullptr;
}

template <std::size_t Rank>
std::string describe(device_mesh const& mesh, layout const& from, layout const& to, tensor_index const& global) {
  std::string out = "mesh " + std::string(to_string(mesh.shape()).view()) + ", [";
  for (std::size_t d = 0; d < Rank; ++d) out += (d ? "," : "") + std::to_string(global[d]);
  return out + "] " + std::string(to_string(from).view()) + " -> " + std::string(to_string(to).view());
}

// Runs from -> to on global extents and checks everything.
template <class T, std::size_t Rank>
void check_redistribution(device_mesh const& mesh, layout const& from, layout const& to, tensor_index const& global) {
  using tensor = dynamic_dtensor<T, Rank>;
  mesh_shape const& shape = mesh.shape();
  std::size_t const me = mesh.rank();
  INFO(describe<Rank>(mesh, from, to, global));
  std::size_t elements = 1;
  for (std::size_t d = 0; d < Rank; ++d) elements *= global[d];
  std::vector<double> values(elements);
  std::iota(values.begin(), values.end(), 1.0);
  bound_layout const source = bind(shape, from);
  bound_layout const target = bind(shape, to);
  reference::simulated_tensor const before = reference::cut(shape, source, global, values);

  typename tensor::view_type local =
      shardmesh::detail::allocate<typename tensor::view_type>("local", local_extents(shape, source, global, me));
  auto host = Kokkos::create_mirror_view(local);
  for (std::size_t i = 0; i < before.shards[me].size(); ++i) host.data()[i] = static_cast<T>(before.shards[me][i]);
  Kokkos::deep_copy(local, host);
  std::array<std::size_t, Rank> extents{};
  for (std::size_t d = 0; d < Rank; ++d) extents[d] = global[d];
  tensor const x(mesh, from, extents, local);

  comm_counters& counters = mesh.counters();
  counters.reset();
  tensor const y = redistribute(x, to);
  redistribution_plan const& plan = *mesh.plan(source, target);
  INFO(to_string(shape, plan));

  // Exactly the plan's collectives, and exactly the predicted bytes.
  std::map<std::string, std::uint64_t> calls;
  std::uint64_t predicted = 0;
  for (std::size_t i = 0; i < plan.size(); ++i) {
    if (char const* c = collective_of(plan[i].kind)) ++calls[c];
    predicted += received(shape, plan[i], global, me) * wire_bytes<T>(plan[i].kind);
  }
  for (auto const& [name, count] : counters.all()) CHECK(calls[name] == count.calls);
  REQUIRE(counters.total().calls == std::accumulate(calls.begin(), calls.end(), std::uint64_t{0},
                                                    [](std::uint64_t s, auto const& c) { return s + c.second; }));
  REQUIRE(counters.total().bytes_received == predicted);

  // The result, reduced over the target's partial axes, is the target's cut.
  REQUIRE(y.local().size() == local_size(shape, target, global, me));
  auto result = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace{}, y.local());
  std::vector<T> mine(result.data(), result.data() + result.size());
  if (!target.partial_axes.empty()) {
    Kokkos::View<T*, Kokkos::HostSpace> reduced(mine.data(), mine.size());
    all_reduce(mesh.group(target.partial_axes), reduced, target.op, Kokkos::DefaultHostExecutionSpace{});
  }
  reference::simulated_tensor expected =
      reference::cut(shape, shardmesh::detail::without_partial(target), global, values);
  for (std::size_t i = 0; i < mine.size(); ++i) REQUIRE(mine[i] == static_cast<T>(expected.shards[me][i]));

  typename tensor::view_type const out =
      shardmesh::detail::allocate<typename tensor::view_type>("out", shardmesh::detail::extents_of(y.local()));
  Kokkos::deep_copy(out, T(-7));
  tensor z(mesh, to, extents, out);
  redistribute(x, z);
  REQUIRE(z.local().data() == out.data());
  auto const written = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace{}, out);
  for (std::size_t i = 0; i < written.size(); ++i) REQUIRE(written.data()[i] == result.data()[i]);

  // And run twice by a redistributor, blocking and not.
  redistributor const again(x, to);
  for (bool blocking : {true, false}) {
    Kokkos::deep_copy(out, T(-7));
    if (blocking)
      again(x, z);
    else
      again.start(x, z).wait();
    auto const rerun = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace{}, out);
    for (std::size_t i = 0; i < rerun.size(); ++i) REQUIRE(rerun.data()[i] == result.data()[i]);
  }
}

// Extents of each kind: dividing evenly, unevenly, and smaller than the
// mesh. Past the second dimension they stay small (2, 3, 1), so that rank-3
// and rank-4 checks stay fast: those dimensions are uneven or small.
template <std::size_t Rank>
std::vector<tensor_index> extents_for(std::size_t ranks) {
  tensor_index even{}, uneven{}, small{};
  for (std::size_t d = 0; d < Rank; ++d) {
    even[d] = d < 2 ? 2 * ranks : 2;
    uneven[d] = d < 2 ? ranks + 1 + d : 3;
    small[d] = d < 2 ? (ranks > 1 ? ranks - 1 : 1) : 1;
  }
  return {even, uneven, small};
}

}  // namespace shardmesh::test
