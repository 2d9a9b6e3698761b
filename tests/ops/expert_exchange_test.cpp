// Expert parallelism's token exchange against a serial reference that
// routes the same way: every rank's tokens and choices are known to every
// rank (made from the rank's index), the reference lists, for each expert,
// the (rank, token, choice) rows it takes in that order (the first
// `capacity` of them with a capacity factor), and the exchange must deliver
// exactly those rows, grouped by expert, and bring the experts' outputs
// back to exactly the kept slots (zero elsewhere). Meshes of 1, 2 and 4
// ranks, ep alone and ep beside dp; k = 1 and 2; dropless and capacity
// factors that drop; every token on one expert (the most imbalanced
// routing). Counters: one all-gather of counts, then one all-to-all per
// move, with exactly the bytes the reference predicts. Values are copied,
// never summed: the comparisons are exact.
#include "expert_meshes.hpp"
#include "mpi_test.hpp"

#include <shardmesh/ops/expert_exchange.hpp>
#include <shardmesh/shardmesh.hpp>

#include <catch2/catch_test_macros.hpp>

#include <cmath>
#include <cstddef>
#include <vector>

// Inside a namespace of its own: bundled with other test files into one translation unit.
namespace expert_exchange_test {

using namespace shardmesh;
using host = Kokkos::HostSpace;
using rows = Kokkos::View<double**, Kokkos::LayoutRight, host>;
using choices = Kokkos::View<int**, Kokkos::LayoutRight, host>;

namespace {

constexpr std::size_t C = 3;  // row width

// Rank r's token n, element c: distinct for every (r, n, c).
double token_value(std::size_t r, std::size_t n, std::size_t c) { return static_cast<double>(r * 1000 + n * 10 + c); }

enum class routing { spread, one_expert };

// Rank r's choices: k distinct experts per token.
choices route(std::size_t r, std::size_t N, std::size_t k, std::size_t E, routing how) {
  choices ch("choices", N, k);
  for (std::size_t n = 0; n < N; ++n)
    for (std::size_t j = 0; j < k; ++j)
      ch(n, j) = static_cast<int>(how == routing::one_expert ? j : (n * 7 + r * 3 + j * 5) % E);
  for (std::size_t n = 0; n < N; ++n)  // make them distinct: a repeat moves to the next free expert
    for (std::size_t j = 1; j < k; ++j)
      for (bool clash = true; clash;) {
        clash = false;
        for (std::size_t i = 0; i < j; ++i) clash = clash || ch(n, i) == ch(n, j);
        if (clash) ch(n, j) = (ch(n, j) + 1) % static_cast<int>(E);
      }
  return ch;
}

struct source {
  std::size_t rank, token, choice;
};

// Expert e's rows in order (rank, token, choice), cut to the capacity.
std::vector<std::vector<source>> reference(std::vector<choices> const& all, std::size_t E, double factor) {
  std::vector<std::vector<source>> taken(E);
  std::size_t total = 0;
  for (auto const& ch : all) total += ch.size();
  auto const capacity =
      factor > 0 ? static_cast<std::size_t>(std::ceil(factor * static_cast<double>(total) / static_cast<double>(E)))
                 : total;
  for (std::size_t r = 0; r < all.size(); ++r)
    for (std::size_t n = 0; n < all[r].extent(0); ++n)
      for (std::size_t j = 0; j < all[r].extent(1); ++j) {
        auto& list = taken[static_cast<std::size_t>(all[r](n, j))];
        if (list.size() < capacity) list.push_back({r, n, j});
      }
  return taken;
}

void check(mesh_shape const& shape, std::size_t E, std::size_t k, double factor, routing how) {
  device_mesh const mesh(MPI_COMM_WORLD, shape);
  std::size_t const a = shape.find("ep"), ep = shape.extent(a), me = mesh.coordinates()[a];
  std::size_t const N = 5, L = E / ep;
  INFO("mesh " << to_string(shape).view() << ", " << E << " experts, top-" << k << ", capacity factor " << factor);
  std::vector<choices> all;
  for (std::size_t r = 0; r < ep; ++r) all.push_back(route(r, N, k, E, how));
  auto const taken = reference(all, E, factor);
  rows x("x", N, C);
  for (std::size_t n = 0; n < N; ++n)
    for (std::size_t c = 0; c < C; ++c) x(n, c) = token_value(me, n, c);

  mesh.counters().reset();
  ops::expert_exchange<host> const exchange(mesh, "ep", E, all[me], factor);
  REQUIRE(mesh.counters()["all_gather"].calls == 1);
  REQUIRE(mesh.counters().total().calls == 1);
  mesh.counters().reset();
  rows const y = exchange.to_experts(x);
  REQUIRE(mesh.counters().total().calls == 1);

  // What arrives: expert by expert, its rows in the reference's order.
  REQUIRE(exchange.expert_rows().size() == L);
  std::size_t row = 0;
  for (std::size_t l = 0; l < L; ++l) {
    auto const& list = taken[me * L + l];
    REQUIRE(exchange.expert_rows()[l] == list.size());
    for (source const& s : list) {
      for (std::size_t c = 0; c < C; ++c) REQUIRE(y(row, c) == token_value(s.rank, s.token, c));
      ++row;
    }
  }
  REQUIRE(row == exchange.rows());
  // The bytes: every row this rank sends to and receives from other ranks.
  std::size_t sent = 0, received = 0;
  for (std::size_t e = 0; e < E; ++e)
    for (source const& s : taken[e]) {
      bool const mine = s.rank == me, theirs = e / L == me;
      if (mine && !theirs) ++sent;
      if (theirs && !mine) ++received;
    }
  REQUIRE(mesh.counters()["all_to_all"].bytes_sent == sent * C * sizeof(double));
  REQUIRE(mesh.counters()["all_to_all"].bytes_received == received * C * sizeof(double));

  // Each expert's output: its rows times (e + 1); back to the slots.
  rows out("out", y.extent(0), C);
  row = 0;
  for (std::size_t l = 0; l < L; ++l)
    for (std::size_t i = 0; i < exchange.expert_rows()[l]; ++i, ++row)
      for (std::size_t c = 0; c < C; ++c) out(row, c) = y(row, c) * static_cast<double>(me * L + l + 1);
  rows const back = exchange.from_experts(out);
  REQUIRE(back.extent(0) == N * k);
  std::size_t kept = 0;
  for (std::size_t n = 0; n < N; ++n)
    for (std::size_t j = 0; j < k; ++j) {
      auto const e = static_cast<std::size_t>(all[me](n, j));
      bool in = false;
      for (source const& s : taken[e]) in = in || (s.rank == me && s.token == n && s.choice == j);
      kept += in ? 1 : 0;
      for (std::size_t c = 0; c < C; ++c)
        REQUIRE(back(n * k + j, c) == (in ? token_value(me, n, c) * static_cast<double>(e + 1) : 0.0));
    }
  REQUIRE(exchange.dropped() == N * k - kept);
  if (factor == 0) REQUIRE(exchange.dropped() == 0);

  // A row per slot goes the same way: slot (n, j) carries its own values.
  rows slots("slots", N * k, C);
  for (std::size_t s = 0; s < N * k; ++s)
    for (std::size_t c = 0; c < C; ++c) slots(s, c) = token_value(me, s / k, c) + 0.5 * static_cast<double>(s % k);
  rows const z = exchange.to_experts(slots);
  row = 0;
  for (std::size_t l = 0; l < L; ++l)
    for (source const& s : taken[me * L + l]) {
      for (std::size_t c = 0; c < C; ++c)
        REQUIRE(z(row, c) == token_value(s.rank, s.token, c) + 0.5 * static_cast<double>(s.choice));
      ++row;
    }
}

}  // namespace

TEST_CASE("the expert exchange delivers each kept slot to its expert and brings it back", "[ops][experts][exchange]") {
  for (mesh_shape const& shape : test::expert_meshes())
    for (std::size_t k : {1U, 2U})
      for (double factor : {0.0, 1.0, 0.5}) check(shape, 8, k, factor, routing::spread);
}

TEST_CASE("every token on one expert: the most imbalanced routing works, dropless or capped",
          "[ops][experts][exchange]") {
  for (mesh_shape const& shape : test::expert_meshes())
    for (double factor : {0.0, 1.25}) check(shape, 4, 1, factor, routing::one_expert);
}

TEST_CASE("the expert exchange refuses bad options before communicating and bad choices on every rank",
          "[ops][experts][exchange]") {
  auto const n = static_cast<std::size_t>(test::world_size());
  device_mesh const mesh(MPI_COMM_WORLD, mesh_shape{{"ep", n}});
  choices const fine = route(static_cast<std::size_t>(test::world_rank()), 4, 2, 4 * n, routing::spread);
  mesh.counters().reset();
  using exchange = ops::expert_exchange<host>;
  REQUIRE_THROWS_AS(exchange(mesh, "xp", 4 * n, fine), invalid_option_error);
  choices const two_of_one("two of one", 4, 2);  // k = 2 > E = 1
  REQUIRE_THROWS_AS(exchange(mesh, "ep", 1, two_of_one), invalid_option_error);
  if (n > 1) REQUIRE_THROWS_AS(exchange(mesh, "ep", 4 * n + 1, fine), invalid_option_error);  // ep does not divide
  REQUIRE_THROWS_AS(exchange(mesh, "ep", 4 * n, fine, -1), invalid_option_error);
  REQUIRE(mesh.counters().total().calls == 0);
  // One rank's choice out of range: every rank refuses, before any row moves.
  choices bad = route(static_cast<std::size_t>(test::world_rank()), 4, 2, 4 * n, routing::spread);
  if (test::world_rank() == static_cast<int>(n - 1)) bad(3, 1) = static_cast<int>(4 * n);
  REQUIRE_THROWS_AS(exchange(mesh, "ep", 4 * n, bad), invalid_option_error);
  // A repeat within a token, likewise.
  choices twice = route(static_cast<std::size_t>(test::world_rank()), 4, 2, 4 * n, routing::spread);
  if (test::world_rank() == 0) twice(0, 1) = twice(0, 0);
  REQUIRE_THROWS_AS(exchange(mesh, "ep", 4 * n, twice), invalid_option_error);
  REQUIRE(mesh.counters()["all_to_all"].calls == 0);
}

}  // namespace expert_exchange_test
