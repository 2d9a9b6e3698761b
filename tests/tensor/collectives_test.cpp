// Each collective wrapper on Kokkos Views, blocking and non-blocking, with
// its counters: rank r contributes values that encode (r, i), so every
// received element can be checked.
#include "mpi_test.hpp"

#include <shardmesh/shardmesh.hpp>

#include <catch2/catch_test_macros.hpp>

#include <cstring>
#include <numeric>
#include <vector>

// Inside a namespace of its own: bundled with other test files into one translation unit.
namespace collectives_test {

using namespace shardmesh;

namespace {

using view = Kokkos::View<long*, Kokkos::HostSpace>;

long value(std::size_t rank, std::size_t i) { return static_cast<long>(1000 * rank + i); }

view filled(std::size_t rank, std::size_t n) {
  view v("v", n);
  for (std::size_t i = 0; i < n; ++i) v(i) = value(rank, i);
  return v;
}

struct world {
  communicator comm = communicator::borrow(MPI_COMM_WORLD);
  std::size_t rank = static_cast<std::size_t>(test::world_rank());
  std::size_t size = static_cast<std::size_t>(test::world_size());
};

}  // namespace

TEST_CASE("all_gather and all_gather_v", "[comm]") {
  world w;
  w.comm.counters().reset();
  view all("all", 3 * w.size);
  all_gather(w.comm, filled(w.rank, 3), all);
  for (std::size_t r = 0; r < w.size; ++r)
    for (std::size_t i = 0; i < 3; ++i) REQUIRE(all(3 * r + i) == value(r, i));
  REQUIRE(w.comm.counters()["all_gather"] ==
          collective_count{1, 3 * (w.size - 1) * sizeof(long), 3 * (w.size - 1) * sizeof(long)});

  std::vector<std::size_t> counts(w.size);
  for (std::size_t r = 0; r < w.size; ++r) counts[r] = r % 3;  // some ranks send nothing
  std::size_t const total = std::accumulate(counts.begin(), counts.end(), std::size_t{0});
  view uneven("uneven", total);
  request pending = iall_gather_v(w.comm, filled(w.rank, counts[w.rank]), uneven, counts);
  pending.wait();
  std::size_t at = 0;
  for (std::size_t r = 0; r < w.size; ++r)
    for (std::size_t i = 0; i < counts[r]; ++i) REQUIRE(uneven(at++) == value(r, i));
  REQUIRE(w.comm.counters()["all_gather"].calls == 2);
}

TEST_CASE("reduce_scatter and reduce_scatter_v", "[comm]") {
  world w;
  w.comm.counters().reset();
  view mine("mine", 2);
  reduce_scatter(w.comm, filled(w.rank, 2 * w.size), mine, reduce_op::sum);
  for (std::size_t i = 0; i < 2; ++i) {
    long expected = 0;
    for (std::size_t r = 0; r < w.size; ++r) expected += value(r, 2 * w.rank + i);
    REQUIRE(mine(i) == expected);
  }
  std::vector<std::size_t> counts(w.size);
  for (std::size_t r = 0; r < w.size; ++r) counts[r] = r + 1;
  std::size_t const total = w.size * (w.size + 1) / 2;
  view out("out", counts[w.rank]);
  ireduce_scatter_v(w.comm, filled(w.rank, total), out, counts, reduce_op::max).wait();
  std::size_t const first = w.rank * (w.rank + 1) / 2;
  for (std::size_t i = 0; i < counts[w.rank]; ++i) REQUIRE(out(i) == value(w.size - 1, first + i));
  REQUIRE(w.comm.counters()["reduce_scatter"].calls == 2);
  REQUIRE(w.comm.counters()["reduce_scatter"].bytes_received == (2 + counts[w.rank]) * (w.size - 1) * sizeof(long));
}

TEST_CASE("the ring reduce-scatter sums each block into its rank, uneven and empty blocks included", "[comm]") {
  world w;
  // Block q has (q * 3) mod 4 elements: some empty, sizes differ.
  std::vector<std::size_t> counts(w.size);
  for (std::size_t q = 0; q < w.size; ++q) counts[q] = q * 3 % 4;
  std::size_t const total = std::accumulate(counts.begin(), counts.end(), std::size_t{0});
  std::size_t const first =
      std::accumulate(counts.begin(), counts.begin() + static_cast<std::ptrdiff_t>(w.rank), std::size_t{0});
  w.comm.counters().reset();
  view out("out", counts[w.rank]);
  ring_reduce_scatter<long, Kokkos::HostSpace> ring(w.comm, filled(w.rank, total), out, counts);
  while (!ring.test()) {
  }
  for (std::size_t i = 0; i < counts[w.rank]; ++i) {
    long expected = 0;
    for (std::size_t r = 0; r < w.size; ++r) expected += value(r, first + i);
    REQUIRE(out(i) == expected);
  }
  // One call: every block but its own sent, every block but its left neighbour's received.
  std::size_t const left = (w.rank + w.size - 1) % w.size;
  collective_count const c = w.comm.counters()["reduce_scatter"];
  CHECK(c.calls == 1);
  CHECK(c.bytes_sent == (total - counts[w.rank]) * sizeof(long));
  CHECK(c.bytes_received == (total - counts[left]) * sizeof(long));
  CHECK(w.comm.counters()["point_to_point"].calls == 0);
}

TEST_CASE("the reduce-scatter algorithm is measured once and chosen alike on every rank", "[comm]") {
  device_mesh const mesh(MPI_COMM_WORLD, mesh_shape{{"x", dynamic_extent}});
  auto& tuning = mesh.state<collective_tuning>();
  communicator const& group = mesh.group(axis_set::of(0));
  std::vector<std::size_t> const counts(mesh.size(), 4096);
  mesh.counters().reset();
  auto const chosen = tuning.reduce_scatter<float, Kokkos::HostSpace>(group, counts, {});
  CHECK(mesh.counters().total().calls == 0);  // measured on a communicator of its own
  int mine = static_cast<int>(chosen), lowest = 0, highest = 0;
  MPI_Allreduce(&mine, &lowest, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(&mine, &highest, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  CHECK(lowest == highest);
  CHECK(chosen != reduce_scatter_algorithm::automatic);
  CHECK(tuning.reduce_scatter<float, Kokkos::HostSpace>(group, counts, {}) == chosen);  // remembered
  tuning.prefer(reduce_scatter_algorithm::ring);
  CHECK(tuning.reduce_scatter<float, Kokkos::HostSpace>(group, counts, {}) == reduce_scatter_algorithm::ring);
}

TEST_CASE("a node window: every rank reads what the others wrote, in segments as large as any asked", "[comm]") {
  world w;
  node_window window(w.comm);
  if (!window.node_local()) SKIP("the ranks span nodes");
  for (std::size_t round = 0; round < 3; ++round) {
    // Sizes differ by rank and grow by round; each round overwrites the
    // last, which acquire() allows only once every rank has read it.
    auto const length = [&](std::size_t rank) { return 100 * (round + 1) * (round + 1) + rank; };
    std::byte* const mine = window.acquire(length(w.rank) * sizeof(long));
    CHECK(window.capacity() >= length(w.size - 1) * sizeof(long));
    for (std::size_t i = 0; i < length(w.rank); ++i) {
      long const v = value(w.rank, i + round);
      std::memcpy(mine + i * sizeof(long), &v, sizeof(long));
    }
    window.publish();
    for (std::size_t q = 0; q < w.size; ++q)
      for (std::size_t i = 0; i < length(q); ++i) {
        long v = 0;
        std::memcpy(&v, window.segment(static_cast<int>(q)) + i * sizeof(long), sizeof(long));
        REQUIRE(v == value(q, i + round));
      }
  }
}

TEST_CASE("the strided all-to-all is measured once, chosen alike on every rank, its window recorded", "[comm]") {
  device_mesh const mesh(MPI_COMM_WORLD, mesh_shape{{"x", dynamic_extent}});
  if (mesh.size() == 1) return;  // nothing moves
  communicator const& group = mesh.group(axis_set::of(0));
  if (mesh.state<shardmesh::detail::node_windows>().of(group, axis_set::of(0)) == nullptr)
    SKIP("the ranks span nodes: MPI_Alltoallw, nothing measured");
  auto& tuning = mesh.state<collective_tuning>();
  std::size_t const n = 4 * mesh.size();
  auto const x = full<double, Kokkos::HostSpace>(mesh, layout{replicated, shard("x"), replicated}, {n, n, n}, 2.0);
  layout const pencils{replicated, replicated, shard("x")};
  mesh.counters().reset();
  auto const y = redistribute(x, pencils);          // measures, then runs as chosen
  CHECK(mesh.counters()["all_to_all"].calls == 1);  // the measurement on a communicator of its own
  bool ran = false;
  auto const chosen = tuning.strided_all_to_all(group, n * n * n * sizeof(double),
                                                [&](strided_all_to_all_algorithm, communicator const&) { ran = true; });
  CHECK_FALSE(ran);  // remembered
  int mine = static_cast<int>(chosen), lowest = 0, highest = 0;
  MPI_Allreduce(&mine, &lowest, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(&mine, &highest, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  CHECK(lowest == highest);
  CHECK(chosen != strided_all_to_all_algorithm::automatic);
  // Forced through the window: the same result, and the window is workspace.
  tuning.prefer(strided_all_to_all_algorithm::node_window);
  std::size_t const before = mesh.ledger().current(memory_category::workspace);
  auto const z = redistribute(x, pencils);
  std::size_t const sent = x.local().size() - x.local().size() / mesh.size();
  std::size_t const window_before = chosen == strided_all_to_all_algorithm::datatypes ? before : 0;
  CHECK(mesh.ledger().current(memory_category::workspace) >= window_before + sent * sizeof(double));
  for (std::size_t i = 0; i < z.local().size(); ++i) REQUIRE(z.local().data()[i] == 2.0);

  // An asynchronous redistribution never takes the window (its exchange
  // blocks, and test() must not): MPI's non-blocking call moves it.
  device_mesh const fresh(MPI_COMM_WORLD, mesh_shape{{"x", dynamic_extent}});
  fresh.state<collective_tuning>().prefer(strided_all_to_all_algorithm::node_window);
  auto& windows = fresh.state<shardmesh::detail::node_windows>();
  auto const on_fresh =
      full<double, Kokkos::HostSpace>(fresh, layout{replicated, shard("x"), replicated}, {n, n, n}, 3.0);
  auto const async = redistribute_async(on_fresh, pencils).get();
  CHECK(windows.bytes() == 0);
  auto const blocking = redistribute(on_fresh, pencils);
  CHECK(windows.bytes() >= sent * sizeof(double));
  for (std::size_t i = 0; i < async.local().size(); ++i) REQUIRE(async.local().data()[i] == 3.0);
  for (std::size_t i = 0; i < blocking.local().size(); ++i) REQUIRE(blocking.local().data()[i] == 3.0);
}

TEST_CASE("all_reduce", "[comm]") {
  world w;
  w.comm.counters().reset();
  view data = filled(w.rank, 5);
  all_reduce(w.comm, data, reduce_op::min);
  for (std::size_t i = 0; i < 5; ++i) REQUIRE(data(i) == value(0, i));
  view more = filled(w.rank, 4);
  iall_reduce(w.comm, more, reduce_op::sum).wait();
  long const ranks_sum = static_cast<long>(1000 * w.size * (w.size - 1) / 2);
  for (std::size_t i = 0; i < 4; ++i) REQUIRE(more(i) == ranks_sum + static_cast<long>(w.size * i));
  REQUIRE(w.comm.counters()["all_reduce"].calls == 2);
}

TEST_CASE("all_to_all and all_to_all_v", "[comm]") {
  world w;
  w.comm.counters().reset();
  view got("got", 2 * w.size);
  all_to_all(w.comm, filled(w.rank, 2 * w.size), got);
  for (std::size_t r = 0; r < w.size; ++r)
    for (std::size_t i = 0; i < 2; ++i) REQUIRE(got(2 * r + i) == value(r, 2 * w.rank + i));
  REQUIRE(w.comm.counters()["all_to_all"].bytes_received == 2 * (w.size - 1) * sizeof(long));

  // Rank p sends q + 1 elements to rank q, all equal to value(p, q).
  std::vector<std::size_t> send_counts(w.size), recv_counts(w.size, w.rank + 1);
  std::size_t total = 0;
  for (std::size_t q = 0; q < w.size; ++q) total += send_counts[q] = q + 1;
  view send("send", total);
  for (std::size_t q = 0, at = 0; q < w.size; ++q)
    for (std::size_t i = 0; i <= q; ++i) send(at++) = value(w.rank, q);
  view recv("recv", w.size * (w.rank + 1));
  iall_to_all_v(w.comm, send, send_counts, recv, recv_counts).wait();
  for (std::size_t p = 0; p < w.size; ++p)
    for (std::size_t i = 0; i <= w.rank; ++i) REQUIRE(recv(p * (w.rank + 1) + i) == value(p, w.rank));
  REQUIRE(w.comm.counters()["all_to_all"].calls == 2);
}

TEST_CASE("point-to-point exchange around a ring", "[comm]") {
  world w;
  w.comm.counters().reset();
  int const next = static_cast<int>((w.rank + 1) % w.size);
  int const previous = static_cast<int>((w.rank + w.size - 1) % w.size);
  view got("got", 3);
  exchange(w.comm, filled(w.rank, 3), next, got, previous);
  for (std::size_t i = 0; i < 3; ++i) REQUIRE(got(i) == value(static_cast<std::size_t>(previous), i));
  std::uint64_t const moved = w.size == 1 ? 0 : 3 * sizeof(long);
  REQUIRE(w.comm.counters()["point_to_point"] == collective_count{1, moved, moved});
}

}  // namespace collectives_test
