// The staging path (a host mirror between a View and MPI, which device
// memory takes when MPI cannot read it) on host memory, by forcing it with
// staging_policy::always: every collective and redistributions give exactly
// what the direct path gives, move the same traffic, and record exactly the
// bytes copied into mirrors and back. The default stays direct on host memory.
#include "redistribution_check.hpp"

#include <shardmesh/shardmesh.hpp>

#include <catch2/catch_test_macros.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <numeric>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

// Inside a namespace of its own: bundled with other test files into one translation unit.
namespace staging_test {

using namespace shardmesh;

namespace shardmesh {
// For Catch's messages.
inline std::ostream& operator<<(std::ostream& os, staging_count const& c) {
  return os << "{buffers " << c.buffers << ", to host " << c.bytes_to_host << " B, from host " << c.bytes_from_host
            << " B}";
}
}  // namespace shardmesh

namespace {

using view = Kokkos::View<long*, Kokkos::HostSpace>;
constexpr std::size_t word = sizeof(long);

long value(std::size_t rank, std::size_t i) { return static_cast<long>(1000 * rank + i); }

view filled(std::size_t rank, std::size_t n) {
  view v("v", n);
  for (std::size_t i = 0; i < n; ++i) v(i) = value(rank, i);
  return v;
}

std::vector<long> values_of(view v) { return {v.data(), v.data() + v.size()}; }

std::size_t world_rank() { return static_cast<std::size_t>(test::world_rank()); }
std::size_t world_size() { return static_cast<std::size_t>(test::world_size()); }

// What one run on a communicator gave: the values it wrote, the traffic its
// counters recorded, and the staging they recorded.
struct outcome {
  std::vector<long> values;
  comm_counters::table traffic;
  staging_count staged;
};

template <class Run>
outcome run_with(communicator const& comm, staging_policy policy, Run const& run) {
  comm.set_staging(policy);
  comm.counters().reset();
  std::vector<long> values = run(comm);
  return {std::move(values), comm.counters().all(), comm.counters().staged()};
}

// Runs `run` directly and then through host mirrors: the values and the
// traffic must be the same, the direct run must stage nothing. Returns what
// the staged run recorded.
template <class Run>
staging_count staged_like_direct(communicator const& comm, Run const& run) {
  outcome const direct = run_with(comm, staging_policy::automatic, run);
  outcome const staged = run_with(comm, staging_policy::always, run);
  comm.set_staging(staging_policy::automatic);
  REQUIRE(direct.staged == staging_count{});
  REQUIRE(staged.values == direct.values);
  REQUIRE(staged.traffic == direct.traffic);
  return staged.staged;
}

// Staging of `buffers` buffers that copy `to_host` and `from_host` elements of long.
staging_count staging_of(std::uint64_t buffers, std::size_t to_host, std::size_t from_host) {
  return {buffers, to_host * word, from_host * word};
}

}  // namespace

TEST_CASE("the policy decides which buffers go through a host mirror", "[comm][staging]") {
  REQUIRE_FALSE(needs_staging<Kokkos::HostSpace>());
  REQUIRE_FALSE(needs_staging<Kokkos::HostSpace>(staging_policy::automatic));
  REQUIRE(needs_staging<Kokkos::HostSpace>(staging_policy::always));
  REQUIRE_FALSE(needs_staging<Kokkos::HostSpace>(staging_policy::never));
  REQUIRE_FALSE(needs_staging<Kokkos::DefaultExecutionSpace::memory_space>(staging_policy::never));

  view const data = filled(1, 10);
  staged_buffer<long, Kokkos::HostSpace> const direct(data);
  REQUIRE_FALSE(direct.staged());
  REQUIRE(direct.data() == data.data());
  REQUIRE(direct.staged_bytes() == 0);
  REQUIRE(staged_buffer<long, Kokkos::HostSpace>(data, staging_policy::never).data() == data.data());

  staged_buffer<long, Kokkos::HostSpace> const whole(data, staging_policy::always);
  REQUIRE(whole.staged());
  REQUIRE(whole.data() != data.data());
  REQUIRE(whole.staged_bytes() == 10 * word);
  whole.to_mpi(Kokkos::DefaultHostExecutionSpace{});
  for (std::size_t i = 0; i < 10; ++i) REQUIRE(whole.data()[i] == value(1, i));

  // Parts out of order, overlapping and adjacent merge; only they are copied.
  staged_buffer<long, Kokkos::HostSpace> const parts(data, staging_policy::always, {{6, 2}, {1, 2}, {2, 2}, {9, 0}});
  REQUIRE(parts.staged_bytes() == 5 * word);  // [1, 4) and [6, 8)
  for (std::size_t i = 0; i < 10; ++i) parts.data()[i] = -1;
  parts.to_mpi(Kokkos::DefaultHostExecutionSpace{});
  for (std::size_t i = 0; i < 10; ++i) {
    bool const copied = (i >= 1 && i < 4) || (i >= 6 && i < 8);
    REQUIRE(parts.data()[i] == (copied ? value(1, i) : -1));
  }
  for (std::size_t i = 0; i < 10; ++i) parts.data()[i] = -2;
  parts.from_mpi(Kokkos::DefaultHostExecutionSpace{});
  for (std::size_t i = 0; i < 10; ++i) {
    bool const copied = (i >= 1 && i < 4) || (i >= 6 && i < 8);
    REQUIRE(data(i) == (copied ? -2 : value(1, i)));
  }
}

TEST_CASE("device memory goes to MPI directly where the library or the environment says it may", "[comm][staging]") {
  STATIC_CHECK(memory_kind_of<Kokkos::HostSpace>() == memory_kind::host);
  STATIC_CHECK(memory_kind_of<Kokkos::DefaultHostExecutionSpace>() == memory_kind::host);
  // Host memory and devices MPI knows nothing of: never "GPU-aware".
  CHECK_FALSE(mpi_reads_device_memory(memory_kind::host));
  CHECK_FALSE(mpi_reads_device_memory(memory_kind::other_device));
  char const* const before = std::getenv("SHARDMESH_GPU_AWARE_MPI");
  std::string const kept = before != nullptr ? before : "";
  for (memory_kind const device : {memory_kind::cuda, memory_kind::hip}) {
    ::unsetenv("SHARDMESH_GPU_AWARE_MPI");
    CHECK(gpu_aware_mpi(device) == mpi_reads_device_memory(device));  // the library decides
    ::setenv("SHARDMESH_GPU_AWARE_MPI", "1", 1);
    CHECK(gpu_aware_mpi(device));
    ::setenv("SHARDMESH_GPU_AWARE_MPI", "0", 1);
    CHECK_FALSE(gpu_aware_mpi(device));
  }
  if (before != nullptr)
    ::setenv("SHARDMESH_GPU_AWARE_MPI", kept.c_str(), 1);
  else
    ::unsetenv("SHARDMESH_GPU_AWARE_MPI");
}

namespace {

// Every collective on data in Space, its results read back to the host one after another: on device memory,
// the path a GPU build takes (NCCL where built, else GPU-aware MPI or host mirrors).
template <class Space>
std::vector<long> every_collective(communicator const& comm) {
  using space_view = Kokkos::View<long*, Space>;
  auto const there = [](view const& h) {
    space_view d("d", h.extent(0));
    Kokkos::deep_copy(d, h);
    return d;
  };
  std::vector<long> out;
  auto const keep = [&](space_view const& d) {
    view h("h", d.extent(0));
    Kokkos::deep_copy(h, d);
    out.insert(out.end(), h.data(), h.data() + h.size());
  };
  std::size_t const n = world_size(), me = world_rank();
  space_view r("r", 4);
  all_reduce(comm, there(filled(me, 4)), r, reduce_op::sum);
  keep(r);
  space_view in_place = there(filled(me, 3));
  iall_reduce(comm, in_place, reduce_op::max).wait();
  keep(in_place);
  r = space_view("r", 2);
  reduce_scatter(comm, there(filled(me, 2 * n)), r, reduce_op::sum);
  keep(r);
  std::vector<std::size_t> counts(n);
  for (std::size_t q = 0; q < n; ++q) counts[q] = q % 3;  // uneven, some empty
  std::size_t const total = std::accumulate(counts.begin(), counts.end(), std::size_t{0});
  r = space_view("r", counts[me]);
  reduce_scatter_v(comm, there(filled(me, total)), r, counts, reduce_op::sum);
  keep(r);
  r = space_view("r", 3 * n);
  all_gather(comm, there(filled(me, 3)), r);
  keep(r);
  r = space_view("r", total);
  all_gather_v(comm, there(filled(me, counts[me])), r, counts);
  keep(r);
  r = space_view("r", 2 * n);
  all_to_all(comm, there(filled(me, 2 * n)), r);
  keep(r);
  std::vector<std::size_t> sends(n), receives(n);
  for (std::size_t q = 0; q < n; ++q) {
    sends[q] = (me + 2 * q) % 3;     // me to q
    receives[q] = (q + 2 * me) % 3;  // q to me
  }
  r = space_view("r", std::accumulate(receives.begin(), receives.end(), std::size_t{0}));
  all_to_all_v(comm, there(filled(me, std::accumulate(sends.begin(), sends.end(), std::size_t{0}))), sends, r,
               receives);
  keep(r);
  space_view b = there(filled(me, 5));
  broadcast(comm, b, static_cast<int>(n - 1));
  keep(b);
  r = space_view("r", 4);
  iexchange(comm, there(filled(me, 4)), static_cast<int>((me + 1) % n), r, static_cast<int>((me + n - 1) % n)).wait();
  keep(r);
  return out;
}

}  // namespace

TEST_CASE("every collective on the default execution space's memory gives and counts what it does on the host",
          "[comm][staging]") {
  communicator const world = communicator::borrow(MPI_COMM_WORLD);
  std::vector<long> const device = every_collective<Kokkos::DefaultExecutionSpace::memory_space>(world);
  auto const device_counts = world.counters().all();
  world.counters().reset();
  std::vector<long> const host = every_collective<Kokkos::HostSpace>(world);
  CHECK(device == host);
  for (auto const& [name, count] : world.counters().all()) {
    INFO(name);
    CHECK(device_counts.at(name).calls == count.calls);
    CHECK(device_counts.at(name).bytes_sent == count.bytes_sent);
    CHECK(device_counts.at(name).bytes_received == count.bytes_received);
  }
}

TEST_CASE(
    "collectives take the vendor's library (NCCL, RCCL) on its device memory, and MPI for the types it cannot "
    "reduce",
    "[comm][staging]") {
  STATIC_REQUIRE_FALSE(detail::nccl_memory<Kokkos::HostSpace>);
  STATIC_REQUIRE_FALSE(detail::nccl_reduction<Kokkos::HostSpace, float>);
  using device = Kokkos::DefaultExecutionSpace::memory_space;
#if SHARDMESH_DETAIL_NCCL_API
  STATIC_REQUIRE(detail::nccl_memory<device>);
  STATIC_REQUIRE(detail::nccl_reduction<device, float>);
  STATIC_REQUIRE(detail::nccl_reduction<device, bf16>);
  STATIC_REQUIRE(detail::nccl_reduction<device, long>);
  STATIC_REQUIRE_FALSE(detail::nccl_reduction<device, bool>);
  STATIC_REQUIRE_FALSE(detail::nccl_reduction<device, std::int16_t>);
#else
  STATIC_REQUIRE_FALSE(detail::nccl_memory<device>);
#endif
  // Whichever path a type takes on the build's memory, it reduces as on the host.
  communicator const world = communicator::borrow(MPI_COMM_WORLD);
  std::size_t const n = world_size();
  Kokkos::View<std::int16_t*, device> summed("summed", 3);
  auto const shorts = Kokkos::create_mirror_view(summed);
  for (std::size_t i = 0; i < 3; ++i) shorts(i) = static_cast<std::int16_t>(world_rank() + i);
  Kokkos::deep_copy(summed, shorts);
  all_reduce(world, summed, reduce_op::sum);
  Kokkos::deep_copy(shorts, summed);
  for (std::size_t i = 0; i < 3; ++i) CHECK(shorts(i) == static_cast<std::int16_t>(n * (n - 1) / 2 + n * i));
}

TEST_CASE("a communicator's policy is shared with its splits and copied by dup", "[comm][staging]") {
  communicator const world = communicator::borrow(MPI_COMM_WORLD);
  REQUIRE(world.staging() == staging_policy::automatic);
  communicator const half = world.split(static_cast<int>(world_rank() % 2), 0);
  world.set_staging(staging_policy::always);
  REQUIRE(half.staging() == staging_policy::always);
  communicator const copy = world.dup();
  REQUIRE(copy.staging() == staging_policy::always);
  half.set_staging(staging_policy::never);
  REQUIRE(world.staging() == staging_policy::never);
  REQUIRE(copy.staging() == staging_policy::always);  // its own from then on
  REQUIRE(communicator::borrow(MPI_COMM_WORLD).staging() == staging_policy::automatic);
  // The vendor's collectives on device memory (NCCL) likewise: on by default, shared, copied by dup.
  REQUIRE(world.vendor_collectives());
  world.set_vendor_collectives(false);
  REQUIRE_FALSE(half.vendor_collectives());
  REQUIRE(copy.vendor_collectives());
  REQUIRE_FALSE(world.dup().vendor_collectives());
  world.set_vendor_collectives(true);

  // never hands host memory to MPI as automatic does: nothing is staged.
  view got("got", world_size());
  all_gather(world, filled(world_rank(), 1), got);
  REQUIRE(world.counters().staged() == staging_count{});
}

TEST_CASE("all_gather and all_gather_v through host mirrors", "[comm][staging]") {
  communicator const comm = communicator::borrow(MPI_COMM_WORLD);
  std::size_t const me = world_rank();
  std::size_t const n = world_size();
  REQUIRE(staged_like_direct(comm, [&](communicator const& c) {
            view all("all", 3 * n);
            all_gather(c, filled(me, 3), all);
            for (std::size_t r = 0; r < n; ++r)
              for (std::size_t i = 0; i < 3; ++i) REQUIRE(all(3 * r + i) == value(r, i));
            view deferred("deferred", 3 * n);
            iall_gather(c, filled(me, 3), deferred).wait();
            REQUIRE(values_of(deferred) == values_of(all));
            return values_of(all);
          }) == staging_of(4, 2 * 3, 2 * 3 * n));

  std::vector<std::size_t> counts(n);
  for (std::size_t r = 0; r < n; ++r) counts[r] = r % 3;  // some ranks send nothing
  std::size_t const total = std::accumulate(counts.begin(), counts.end(), std::size_t{0});
  REQUIRE(staged_like_direct(comm, [&](communicator const& c) {
            view uneven("uneven", total);
            iall_gather_v(c, filled(me, counts[me]), uneven, counts).wait();
            view blocking("blocking", total);
            all_gather_v(c, filled(me, counts[me]), blocking, counts);
            REQUIRE(values_of(blocking) == values_of(uneven));
            return values_of(uneven);
          }) == staging_of(4, 2 * counts[me], 2 * total));
}

TEST_CASE("reduce_scatter and reduce_scatter_v through host mirrors", "[comm][staging]") {
  communicator const comm = communicator::borrow(MPI_COMM_WORLD);
  std::size_t const me = world_rank();
  std::size_t const n = world_size();
  REQUIRE(staged_like_direct(comm, [&](communicator const& c) {
            view mine("mine", 2);
            reduce_scatter(c, filled(me, 2 * n), mine, reduce_op::sum);
            view deferred("deferred", 2);
            ireduce_scatter(c, filled(me, 2 * n), deferred, reduce_op::sum).wait();
            REQUIRE(values_of(deferred) == values_of(mine));
            return values_of(mine);
          }) == staging_of(4, 2 * 2 * n, 2 * 2));

  std::vector<std::size_t> counts(n);
  for (std::size_t r = 0; r < n; ++r) counts[r] = r + 1;
  std::size_t const total = n * (n + 1) / 2;
  REQUIRE(staged_like_direct(comm, [&](communicator const& c) {
            view out("out", counts[me]);
            ireduce_scatter_v(c, filled(me, total), out, counts, reduce_op::max).wait();
            std::size_t const first = me * (me + 1) / 2;
            for (std::size_t i = 0; i < counts[me]; ++i) REQUIRE(out(i) == value(n - 1, first + i));
            return values_of(out);
          }) == staging_of(2, total, counts[me]));
}

TEST_CASE("all_reduce through host mirrors, in place and not", "[comm][staging]") {
  communicator const comm = communicator::borrow(MPI_COMM_WORLD);
  std::size_t const me = world_rank();
  // Into another buffer: the input copied out, the result copied back.
  REQUIRE(staged_like_direct(comm, [&](communicator const& c) {
            view out("out", 5);
            all_reduce(c, filled(me, 5), out, reduce_op::sum);
            view deferred("deferred", 5);
            iall_reduce(c, filled(me, 5), deferred, reduce_op::sum).wait();
            REQUIRE(values_of(deferred) == values_of(out));
            return values_of(out);
          }) == staging_of(4, 2 * 5, 2 * 5));
  // In place: one buffer, copied out and back.
  REQUIRE(staged_like_direct(comm, [&](communicator const& c) {
            view data = filled(me, 5);
            all_reduce(c, data, reduce_op::min);
            for (std::size_t i = 0; i < 5; ++i) REQUIRE(data(i) == value(0, i));
            view more = filled(me, 4);
            iall_reduce(c, more, reduce_op::sum).wait();
            std::vector<long> out = values_of(data);
            out.insert(out.end(), more.data(), more.data() + more.size());
            return out;
          }) == staging_of(2, 5 + 4, 5 + 4));
}

TEST_CASE("all_to_all and all_to_all_v through host mirrors", "[comm][staging]") {
  communicator const comm = communicator::borrow(MPI_COMM_WORLD);
  std::size_t const me = world_rank();
  std::size_t const n = world_size();
  REQUIRE(staged_like_direct(comm, [&](communicator const& c) {
            view got("got", 2 * n);
            all_to_all(c, filled(me, 2 * n), got);
            for (std::size_t r = 0; r < n; ++r)
              for (std::size_t i = 0; i < 2; ++i) REQUIRE(got(2 * r + i) == value(r, 2 * me + i));
            view deferred("deferred", 2 * n);
            iall_to_all(c, filled(me, 2 * n), deferred).wait();
            REQUIRE(values_of(deferred) == values_of(got));
            return values_of(got);
          }) == staging_of(4, 2 * 2 * n, 2 * 2 * n));

  // As a redistribution's all-to-all in place: no block to itself, blocks
  // apart from each other, and what lies between them in recv (the rank's
  // own piece, copied there before) must survive the copy back. Rank p sends
  // q + 1 elements to rank q != p; each block is followed by one unused element.
  std::vector<std::size_t> send_counts(n), send_displs(n), recv_counts(n), recv_displs(n);
  std::size_t send_size = 0, recv_size = 0;
  for (std::size_t q = 0; q < n; ++q) {
    send_counts[q] = q == me ? 0 : q + 1;
    recv_counts[q] = q == me ? 0 : me + 1;
    send_displs[q] = send_size;
    recv_displs[q] = recv_size;
    send_size += q + 2;
    recv_size += me + 2;
  }
  std::size_t const sent = std::accumulate(send_counts.begin(), send_counts.end(), std::size_t{0});
  std::size_t const received = std::accumulate(recv_counts.begin(), recv_counts.end(), std::size_t{0});
  REQUIRE(staged_like_direct(comm, [&](communicator const& c) {
            view send("send", send_size);
            for (std::size_t q = 0; q < n; ++q)
              for (std::size_t i = 0; i < q + 2; ++i) send(send_displs[q] + i) = value(me, q);
            view recv("recv", recv_size);
            Kokkos::deep_copy(recv, -7L);
            iall_to_all_v(c, send, send_counts, send_displs, recv, recv_counts, recv_displs).wait();
            for (std::size_t p = 0; p < n; ++p)
              for (std::size_t i = 0; i < me + 2; ++i)
                REQUIRE(recv(recv_displs[p] + i) == (p == me || i == me + 1 ? -7L : value(p, me)));
            return values_of(recv);
          }) == staging_of(2, sent, received));
}

TEST_CASE("point-to-point exchange through host mirrors", "[comm][staging]") {
  communicator const comm = communicator::borrow(MPI_COMM_WORLD);
  std::size_t const me = world_rank();
  std::size_t const n = world_size();
  int const next = static_cast<int>((me + 1) % n);
  int const previous = static_cast<int>((me + n - 1) % n);
  staging_count const staged = staged_like_direct(comm, [&](communicator const& c) {
    view got("got", 3);
    exchange(c, filled(me, 3), next, got, previous);
    for (std::size_t i = 0; i < 3; ++i) REQUIRE(got(i) == value(static_cast<std::size_t>(previous), i));
    view deferred("deferred", 3);
    iexchange(c, filled(me, 3), next, deferred, previous).wait();
    REQUIRE(values_of(deferred) == values_of(got));
    return values_of(got);
  });
  // A rank that is its own peer copies locally: MPI sees nothing.
  REQUIRE(staged == (n == 1 ? staging_count{} : staging_of(4, 2 * 3, 2 * 3)));
}

namespace {

using matrix = dynamic_dtensor<double, 2>;
using memory_space = matrix::view_type::memory_space;

// Elements of an all-to-all step's blocks, each element once: a piece sent
// to several ranks is one block of the shard, copied to its mirror once.
// Where MPI datatypes move the pieces (host memory), whole shards.
std::pair<std::size_t, std::size_t> all_to_all_staging(device_mesh const& mesh, plan_step const& s,
                                                       tensor_index const& global) {
  auto const p = detail::prepared<double, memory_space>(mesh, s, global, Kokkos::DefaultExecutionSpace{});
  std::size_t const me = mesh.rank();
  if (!p->send_types.empty())
    return {local_size(mesh.shape(), s.before, global, me), local_size(mesh.shape(), s.after, global, me)};
  auto const covered = [](std::vector<std::size_t> const& counts, std::vector<std::size_t> const& offsets) {
    std::vector<bool> used;
    for (std::size_t q = 0; q < counts.size(); ++q) {
      used.resize(std::max(used.size(), offsets[q] + counts[q]));
      for (std::size_t i = offsets[q]; i < offsets[q] + counts[q]; ++i) used[i] = true;
    }
    return static_cast<std::size_t>(std::count(used.begin(), used.end(), true));
  };
  return {covered(p->send_counts, p->send_offsets), covered(p->recv_counts, p->recv_offsets)};
}

// The staging one run of `plan` records on this rank: two buffers per
// collective, none for a permutation with itself; the input shard copied out
// and the output shard copied back, except for all-to-alls that pack, which
// copy only their blocks.
staging_count expected_staging(device_mesh const& mesh, redistribution_plan const& plan, tensor_index const& global) {
  staging_count out;
  for (std::size_t i = 0; i < plan.size(); ++i) {
    plan_step const& s = plan[i];
    std::size_t const me = mesh.rank();
    if (s.kind == step_kind::slice || s.kind == step_kind::to_partial) continue;
    if (s.kind == step_kind::permute && permutation_source(mesh.shape(), s.axes, me) == me) continue;
    out.buffers += 2;
    auto const [in, back] =
        s.kind == step_kind::all_to_all || s.kind == step_kind::all_to_all_v
            ? all_to_all_staging(mesh, s, global)
            : std::pair(local_size(mesh.shape(), s.before, global, me), local_size(mesh.shape(), s.after, global, me));
    out.bytes_to_host += in * sizeof(double);
    out.bytes_from_host += back * sizeof(double);
  }
  return out;
}

std::vector<double> values_of(matrix const& t) {
  auto const host = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace{}, t.local());
  return {host.data(), host.data() + host.size()};
}

// from -> to on mesh directly and then through host mirrors: the same
// values, the same traffic, and exactly the expected staging; then the
// whole reference check (into a new tensor, into an existing one, and a
// redistributor run blocking and not) with staging forced.
void check_staged(device_mesh const& mesh, layout const& from, layout const& to, tensor_index const& global) {
  INFO(test::describe<2>(mesh, from, to, global));
  Kokkos::View<double**, Kokkos::LayoutRight, Kokkos::HostSpace> whole("whole", global[0], global[1]);
  std::iota(whole.data(), whole.data() + whole.size(), 1.0);
  matrix const x = distribute(mesh, from, whole);
  redistribution_plan const& plan = *mesh.plan(bind(mesh.shape(), from), bind(mesh.shape(), to));

  mesh.comm().set_staging(staging_policy::automatic);
  mesh.counters().reset();
  std::vector<double> const direct = values_of(redistribute(x, to));
  comm_counters::table const traffic = mesh.counters().all();
  REQUIRE(mesh.counters().staged() == staging_count{});

  mesh.comm().set_staging(staging_policy::always);
  mesh.counters().reset();
  REQUIRE(values_of(redistribute(x, to)) == direct);
  REQUIRE(mesh.counters().all() == traffic);
  INFO(to_string(mesh.shape(), plan));
  REQUIRE(mesh.counters().staged() == expected_staging(mesh, plan, global));

  test::check_redistribution<double, 2>(mesh, from, to, global);
  mesh.comm().set_staging(staging_policy::automatic);
}

}  // namespace

TEST_CASE("redistributions through host mirrors match the direct path and the reference", "[tensor][staging]") {
  std::size_t const ranks = world_size();
  std::size_t checked = 0;
  for (mesh_shape const& shape : test::meshes_of(ranks)) {
    device_mesh const mesh(MPI_COMM_WORLD, shape);
    auto const layouts = test::all_layouts(shape, 2, {.partial = {reduce_op::sum}, .cyclic = {2}});
    for (auto const& from : layouts)
      for (auto const& to : layouts) {
        if (!transition_error("", shape, from, to).empty()) continue;
        for (tensor_index const& global : test::extents_for<2>(ranks)) {
          check_staged(mesh, from, to, global);
          ++checked;
        }
      }
  }
  CHECK(checked > 0);
}

TEST_CASE("an asynchronous redistribution and a redistributor through host mirrors", "[tensor][staging]") {
  std::size_t const ranks = world_size();
  device_mesh const mesh(MPI_COMM_WORLD, mesh_shape{{"x", ranks}});
  layout const rows{shard("x"), replicated};
  layout const cols{replicated, shard("x")};
  tensor_index const global{4 * ranks + 1, 3 * ranks};
  Kokkos::View<double**, Kokkos::LayoutRight, Kokkos::HostSpace> whole("whole", global[0], global[1]);
  std::iota(whole.data(), whole.data() + whole.size(), 1.0);
  matrix const x = distribute(mesh, rows, whole);
  redistribution_plan const& plan = *mesh.plan(bind(mesh.shape(), rows), bind(mesh.shape(), cols));
  std::vector<double> const direct = values_of(redistribute(x, cols));
  REQUIRE(mesh.counters().staged() == staging_count{});

  mesh.comm().set_staging(staging_policy::always);
  SECTION("redistribute_async") {
    mesh.counters().reset();
    auto pending = redistribute_async(x, cols);
    pending.test();
    matrix const y = pending.get();
    REQUIRE(values_of(y) == direct);
    REQUIRE(mesh.counters().staged() == expected_staging(mesh, plan, global));
    auto const back = gather(y);
    REQUIRE(std::vector<double>(back.data(), back.data() + back.size()) ==
            std::vector<double>(whole.data(), whole.data() + whole.size()));
  }
  SECTION("a redistributor, run blocking and not") {
    redistributor const persistent(x, cols);
    matrix y(mesh, cols, {global[0], global[1]},
             detail::allocate<matrix::view_type>("y", detail::extents_of(redistribute(x, cols).local())));
    for (bool blocking : {true, false}) {
      Kokkos::deep_copy(y.local(), -1.0);
      mesh.counters().reset();
      if (blocking)
        persistent(x, y);
      else
        persistent.start(x, y).wait();
      REQUIRE(values_of(y) == direct);
      REQUIRE(mesh.counters().staged() == expected_staging(mesh, plan, global));
      REQUIRE(mesh.counters().staged().buffers == (ranks == 1 ? 0 : 2));
    }
  }
  mesh.comm().set_staging(staging_policy::automatic);
}

TEST_CASE("a mesh's policy holds for its groups and submeshes, made before or after", "[tensor][staging]") {
  std::size_t const ranks = world_size();
  if (ranks < 2 || ranks % 2 != 0) return;
  device_mesh const mesh(MPI_COMM_WORLD, mesh_shape{{"a", 2}, {"b", ranks / 2}});
  layout const from = layout{replicated, shard("b")}.partial(reduce_op::sum, "a");
  layout const to{shard("a"), shard("b")};
  tensor_index const global{2 * ranks, 2 * ranks};
  Kokkos::View<double**, Kokkos::LayoutRight, Kokkos::HostSpace> whole("whole", global[0], global[1]);
  std::iota(whole.data(), whole.data() + whole.size(), 1.0);
  matrix const x = distribute(mesh, from, whole);
  std::vector<double> const direct = values_of(redistribute(x, to));  // makes the group on "a"
  REQUIRE(mesh.counters().staged() == staging_count{});

  device_mesh const stage = mesh.submesh({"b"});
  mesh.comm().set_staging(staging_policy::always);
  REQUIRE(stage.comm().staging() == staging_policy::always);
  REQUIRE(mesh.submesh({"a"}).comm().staging() == staging_policy::always);
  mesh.counters().reset();
  REQUIRE(values_of(redistribute(x, to)) == direct);
  REQUIRE(mesh.counters().staged().buffers == 2);  // the reduce-scatter on the group made earlier
  mesh.comm().set_staging(staging_policy::automatic);
  REQUIRE(stage.comm().staging() == staging_policy::automatic);
}

}  // namespace staging_test
