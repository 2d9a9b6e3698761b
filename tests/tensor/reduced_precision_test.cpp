// Collectives on 16-bit floats (bf16, fp16): moves carry every bit pattern
// unchanged at two bytes per element; reductions sum in float and round
// once, which a sum in the 16-bit type, rank after rank, does not give
// (checked on 3 ranks and more, where it differs); asked to sum per
// message, they move half the bytes and round each message's sums.
#include "float16_bits.hpp"
#include "mpi_test.hpp"

#include <shardmesh/shardmesh.hpp>

#include <catch2/catch_template_test_macros.hpp>
#include <catch2/catch_test_macros.hpp>

#include <cmath>
#include <cstdint>
#include <vector>

// Inside a namespace of its own: bundled with other test files into one translation unit.
namespace reduced_precision_test {

using namespace shardmesh;

namespace {

template <class T>
using view = Kokkos::View<T*, Kokkos::HostSpace>;

using test::bits;
using test::from_bits;

struct world {
  communicator comm = communicator::borrow(MPI_COMM_WORLD);
  std::size_t rank = static_cast<std::size_t>(test::world_rank());
  std::size_t size = static_cast<std::size_t>(test::world_size());
};

// The spacing of T's values just above 1: 2^-7 for bf16, 2^-10 for fp16.
template <class T>
float ulp_of_one() {
  return std::is_same_v<T, bf16> ? 0x1p-7f : 0x1p-10f;
}

// Rank 0 contributes 1, every other rank a value under half of T's spacing
// at 1, so that adding any one of them to 1 in T rounds back to 1. Element i
// varies the small values. All are exact in T, and their float sums exact.
template <class T>
float contribution(std::size_t rank, std::size_t i) {
  if (rank == 0) return 1.0f;
  return (0.5f + 0.125f * static_cast<float>((i + rank) % 4)) * ulp_of_one<T>() / 2;
}

template <class T>
view<T> contributions(std::size_t rank, std::size_t n) {
  view<T> v("contributions", n);
  for (std::size_t i = 0; i < n; ++i) v(i) = static_cast<T>(contribution<T>(rank, i));
  return v;
}

// The float sum over ranks, rounded to T once.
template <class T>
T widened_sum(std::size_t ranks, std::size_t i) {
  float sum = 0;
  for (std::size_t r = 0; r < ranks; ++r) sum += contribution<T>(r, i);
  return static_cast<T>(sum);
}

// The sum in T, rank after rank: what summing 16-bit values would give.
template <class T>
T naive_sum(std::size_t ranks, std::size_t i) {
  T sum = static_cast<T>(0.0f);
  for (std::size_t r = 0; r < ranks; ++r)
    sum = static_cast<T>(static_cast<float>(sum) + static_cast<float>(static_cast<T>(contribution<T>(r, i))));
  return sum;
}

}  // namespace

TEMPLATE_TEST_CASE("collectives move 16-bit floats bit for bit, two bytes per element", "[comm][precision]", bf16,
                   fp16) {
  using T = TestType;
  world w;
  w.comm.counters().reset();
  // Every kind of value: signed zeros, subnormals, infinities, NaN payloads, ordinary values.
  std::vector<std::uint16_t> const patterns = {0x0000, 0x8000, 0x0001, 0x03ff, 0x7c00, 0x7f80,
                                               0x7fc1, 0xffff, 0x3c00, 0x4049, 0x1234, 0xc2a5};
  std::size_t const n = patterns.size();
  view<T> mine("mine", n), all("all", n * w.size);
  for (std::size_t i = 0; i < n; ++i) mine(i) = from_bits<T>(static_cast<std::uint16_t>(patterns[i] ^ w.rank));
  all_gather(w.comm, mine, all);
  for (std::size_t r = 0; r < w.size; ++r)
    for (std::size_t i = 0; i < n; ++i) REQUIRE(bits(all(r * n + i)) == (patterns[i] ^ r));
  REQUIRE(w.comm.counters()["all_gather"].bytes_received == (w.size - 1) * n * 2);
}

TEMPLATE_TEST_CASE("reductions of 16-bit floats sum in float and round once", "[comm][precision]", bf16, fp16) {
  using T = TestType;
  world w;
  std::size_t const per_rank = 5, n = per_rank * w.size;
  if (w.size >= 3) {  // the check has teeth: summing in T loses the small contributions
    std::size_t differ = 0;
    for (std::size_t i = 0; i < n; ++i) differ += bits(naive_sum<T>(w.size, i)) != bits(widened_sum<T>(w.size, i));
    REQUIRE(differ == n);
  }
  w.comm.counters().reset();

  view<T> in_place = contributions<T>(w.rank, n);
  all_reduce(w.comm, in_place, reduce_op::sum);
  view<T> const out("out", n);
  iall_reduce(w.comm, contributions<T>(w.rank, n), out, reduce_op::sum).wait();
  for (std::size_t i = 0; i < n; ++i) {
    CAPTURE(i);
    REQUIRE(bits(in_place(i)) == bits(widened_sum<T>(w.size, i)));
    REQUIRE(bits(out(i)) == bits(widened_sum<T>(w.size, i)));
  }
  auto const& reduced = w.comm.counters()["all_reduce"];
  REQUIRE(reduced.calls == 2);
  REQUIRE(reduced.bytes_received % sizeof(float) == 0);  // float elements on the wire
  REQUIRE(reduced.bytes_received == 2 * detail::all_reduce_moved(w.comm, n) * sizeof(float));

  view<T> const block("block", per_rank);
  reduce_scatter(w.comm, contributions<T>(w.rank, n), block, reduce_op::sum);
  for (std::size_t i = 0; i < per_rank; ++i)
    REQUIRE(bits(block(i)) == bits(widened_sum<T>(w.size, w.rank * per_rank + i)));

  std::vector<std::size_t> counts(w.size);
  for (std::size_t r = 0; r < w.size; ++r) counts[r] = r % 3;  // uneven, some empty
  std::size_t total = 0, first = 0;
  for (std::size_t r = 0; r < w.size; ++r) {
    if (r == w.rank) first = total;
    total += counts[r];
  }
  view<T> const part("part", counts[w.rank]);
  ireduce_scatter_v(w.comm, contributions<T>(w.rank, total), part, counts, reduce_op::sum).wait();
  for (std::size_t i = 0; i < counts[w.rank]; ++i) REQUIRE(bits(part(i)) == bits(widened_sum<T>(w.size, first + i)));
}

TEMPLATE_TEST_CASE("a partial 16-bit tensor reduces in float through the algebra's plan", "[tensor][precision]", bf16,
                   fp16) {
  using T = TestType;
  world w;
  device_mesh const mesh(MPI_COMM_WORLD, mesh_shape{{"a", dynamic_extent}});
  std::size_t const rows = 2 * w.size, cols = 3, n = rows * cols;
  view<T> const mine = contributions<T>(w.rank, n);
  dynamic_dtensor<T, 2, Kokkos::HostSpace> const partial(
      mesh, layout{replicated, replicated}.partial(reduce_op::sum, "a"), {rows, cols},
      Kokkos::View<T**, Kokkos::LayoutRight, Kokkos::HostSpace>(mine.data(), rows, cols));
  for (layout const& to : {layout{replicated, replicated}, layout{shard("a"), replicated}}) {
    mesh.counters().reset();
    auto const y = redistribute(partial, to);
    auto const whole = gather(y);
    for (std::size_t i = 0; i < n; ++i) REQUIRE(bits(whole.data()[i]) == bits(widened_sum<T>(w.size, i)));
  }
}

TEMPLATE_TEST_CASE("16-bit floats summed per message move half the bytes and round each message's sums",
                   "[comm][precision]", bf16, fp16) {
  using T = TestType;
  world w;
  std::size_t const n = 7;
  w.comm.counters().reset();
  view<T> data = contributions<T>(w.rank, n);
  all_reduce(w.comm, data, reduce_op::sum);  // widened, for the bytes
  std::size_t const widened_bytes = w.comm.counters()["all_reduce"].bytes_received;
  w.comm.counters().reset();
  data = contributions<T>(w.rank, n);
  iall_reduce(w.comm, data, reduce_op::sum, completion::deferred, Kokkos::DefaultHostExecutionSpace{},
              sixteen_bit_sum::per_message)
      .wait();
  REQUIRE(2 * w.comm.counters()["all_reduce"].bytes_received == widened_bytes);
  for (std::size_t i = 0; i < n; ++i) {
    CAPTURE(i);
    if (w.size <= 2) {  // one addition, rounded once either way
      REQUIRE(bits(data(i)) == bits(widened_sum<T>(w.size, i)));
    } else {  // each of the n - 1 additions rounds by at most half a spacing (the sums stay in [1, 2))
      double const spacing = ulp_of_one<T>();
      REQUIRE(std::abs(static_cast<double>(data(i)) - static_cast<double>(widened_sum<T>(w.size, i))) <=
              (static_cast<double>(w.size) - 1) * spacing / 2 + spacing / 2);
    }
  }
  view<T> const block("block", 1);
  REQUIRE_THROWS_AS(
      ireduce_scatter(w.comm, contributions<T>(w.rank, w.size), block, reduce_op::max, completion::deferred,
                      Kokkos::DefaultHostExecutionSpace{}, sixteen_bit_sum::per_message),
      invalid_option_error);
}

}  // namespace reduced_precision_test
