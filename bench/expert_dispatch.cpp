// Expert parallelism's dispatch (ops/expert_exchange.hpp), measured side by
// side in one run, ep = the ranks (2 ranks, one per core, for wall-clock
// figures), float rows:
//
//   dispatch/n<N>_c<C>/e<E>_top<k>/<impl>  each rank's N tokens of C
//       features to their k experts of E (every token's choices spread over
//       all experts, so each rank sends (ep-1)/ep of its rows):
//         shardmesh  expert_exchange::to_experts, planned once (the counts'
//                    all-gather is timed apart, as dispatch_plan/...)
//         mpi        by hand: the same rows packed by destination with one
//                    kernel into a buffer allocated once, MPI_Alltoallv of
//                    the same counts, an unpack kernel grouping them by
//                    expert
//   dispatch_plan/n<N>_c<C>/e<E>_top<k>  building the exchange from the choices
//       (counting, the counts' all-gather, the send and arrival orders).
//
// Time: the slowest rank's per iteration, medians.
#include "deferred_registration.hpp"
#include "max_over_ranks.hpp"
#include "rounds.hpp"

#include <shardmesh/ops/expert_exchange.hpp>
#include <shardmesh/shardmesh.hpp>

#include <benchmark/benchmark.h>
#include <mpi.h>
#include <Kokkos_Core.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace {

using namespace shardmesh;
using namespace shardmesh::bench;
using host = Kokkos::HostSpace;
using exec_type = Kokkos::DefaultHostExecutionSpace;
using rows = Kokkos::View<float**, Kokkos::LayoutRight, host>;
using choices = Kokkos::View<int**, Kokkos::LayoutRight, host>;

std::unique_ptr<device_mesh>& mesh_slot() {
  static std::unique_ptr<device_mesh> mesh;
  return mesh;
}
device_mesh const& world_mesh() {
  auto& mesh = mesh_slot();
  if (!mesh) mesh = std::make_unique<device_mesh>(MPI_COMM_WORLD, mesh_shape{{"ep", dynamic_extent}});
  return *mesh;
}

struct shape {
  std::size_t N, C, E, k;
  [[nodiscard]] std::string name() const {
    return "n" + std::to_string(N) + "_c" + std::to_string(C) + "/e" + std::to_string(E) + "_top" + std::to_string(k);
  }
};

// Token n's choices: k consecutive experts from a start that walks all of them.
choices route(shape const& s) {
  choices ch("choices", s.N, s.k);
  for (std::size_t n = 0; n < s.N; ++n)
    for (std::size_t j = 0; j < s.k; ++j) ch(n, j) = static_cast<int>((n * 5 + j) % s.E);
  return ch;
}

// The hand-written dispatch's plan: each slot's destination order and each arrival's grouped place.
struct by_hand {
  std::vector<int> send_counts, send_offsets, recv_counts, recv_offsets;
  Kokkos::View<std::size_t*, host> send_slot, recv_place;
  rows sent, received, grouped;

  by_hand(shape const& s, choices const& ch, std::size_t ep, std::size_t me) {
    std::size_t const L = s.E / ep;
    // Rows per (source rank, expert): every rank routes alike here, so each rank knows the others' counts.
    std::vector<std::size_t> per_expert(s.E, 0);
    for (std::size_t n = 0; n < s.N; ++n)
      for (std::size_t j = 0; j < s.k; ++j) ++per_expert[static_cast<std::size_t>(ch(n, j))];
    send_counts.assign(ep, 0);
    recv_counts.assign(ep, 0);
    for (std::size_t e = 0; e < s.E; ++e) send_counts[e / L] += static_cast<int>(per_expert[e] * s.C);
    for (std::size_t r = 0; r < ep; ++r)
      for (std::size_t l = 0; l < L; ++l) recv_counts[r] += static_cast<int>(per_expert[me * L + l] * s.C);
    send_offsets.assign(ep, 0);
    recv_offsets.assign(ep, 0);
    for (std::size_t r = 1; r < ep; ++r) {
      send_offsets[r] = send_offsets[r - 1] + send_counts[r - 1];
      recv_offsets[r] = recv_offsets[r - 1] + recv_counts[r - 1];
    }
    std::size_t const slots = s.N * s.k,
                      arrivals = static_cast<std::size_t>(recv_offsets[ep - 1] + recv_counts[ep - 1]) / s.C;
    send_slot = Kokkos::View<std::size_t*, host>("send slot", slots);
    recv_place = Kokkos::View<std::size_t*, host>("recv place", arrivals);
    std::vector<std::size_t> next(s.E, 0);
    for (std::size_t e = 1; e < s.E; ++e) next[e] = next[e - 1] + per_expert[e - 1];
    for (std::size_t n = 0; n < s.N; ++n)
      for (std::size_t j = 0; j < s.k; ++j) send_slot(next[static_cast<std::size_t>(ch(n, j))]++) = n * s.k + j;
    std::vector<std::size_t> start(L, 0);
    for (std::size_t l = 1; l < L; ++l) start[l] = start[l - 1] + ep * per_expert[me * L + l - 1];
    for (std::size_t r = 0, i = 0; r < ep; ++r)
      for (std::size_t l = 0; l < L; ++l)
        for (std::size_t c = 0; c < per_expert[me * L + l]; ++c) recv_place(i++) = start[l]++;
    sent = rows(Kokkos::view_alloc(Kokkos::WithoutInitializing, "sent"), slots, s.C);
    received = rows(Kokkos::view_alloc(Kokkos::WithoutInitializing, "received"), arrivals, s.C);
    grouped = rows(Kokkos::view_alloc(Kokkos::WithoutInitializing, "grouped"), arrivals, s.C);
  }

  void run(rows const& x, std::size_t k, exec_type const& exec) const {
    auto const slot = send_slot;
    auto const place = recv_place;
    auto const out = sent;
    auto const in = received;
    auto const y = grouped;
    std::size_t const C = x.extent(1);
    Kokkos::parallel_for(
        "pack", Kokkos::RangePolicy<exec_type>(exec, 0, out.extent(0)), KOKKOS_LAMBDA(std::size_t i) {
          for (std::size_t c = 0; c < C; ++c) out(i, c) = x(slot(i) / k, c);
        });
    exec.fence();
    MPI_Alltoallv(out.data(), send_counts.data(), send_offsets.data(), MPI_FLOAT, in.data(), recv_counts.data(),
                  recv_offsets.data(), MPI_FLOAT, MPI_COMM_WORLD);
    Kokkos::parallel_for(
        "unpack", Kokkos::RangePolicy<exec_type>(exec, 0, in.extent(0)), KOKKOS_LAMBDA(std::size_t i) {
          for (std::size_t c = 0; c < C; ++c) y(place(i), c) = in(i, c);
        });
    exec.fence();
  }
};

enum class impl { shardmesh, mpi, plan };

void dispatch_case(benchmark::State& state, shape const& s, impl which) {
  exec_type const exec;
  device_mesh const& mesh = world_mesh();
  choices const ch = route(s);
  rows x(Kokkos::view_alloc(Kokkos::WithoutInitializing, "x"), s.N, s.C);
  Kokkos::deep_copy(x, 1.0F);
  ops::expert_exchange<host> const exchange(mesh, "ep", s.E, ch);
  by_hand const hand(s, ch, mesh.size(), mesh.rank());
  for (std::size_t warm = 0; warm < 2; ++warm) {  // touch every buffer's pages before timing
    if (which == impl::shardmesh) (void)exchange.to_experts(x, exec);
    if (which == impl::mpi) hand.run(x, s.k, exec);
  }
  time_max_over_ranks(state, [&] {
    if (which == impl::shardmesh) (void)exchange.to_experts(x, exec);
    if (which == impl::mpi) hand.run(x, s.k, exec);
    if (which == impl::plan) (void)ops::expert_exchange<host>(mesh, "ep", s.E, ch);
  });
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * s.N * s.k * s.C * sizeof(float)));
}

void register_all() {
  std::size_t const ep = world_size();
  Kokkos::push_finalize_hook([] { mesh_slot().reset(); });
  for (std::size_t round = 0; round < rounds(); ++round) {
    std::string const suffix = rounds() > 1 ? "/round:" + std::to_string(round) : "";
    for (shape const s : {shape{4096, 1024, 8, 2}, shape{16384, 512, 16, 1}, shape{1024, 4096, 8, 2}}) {
      if (s.E % ep != 0) continue;
      for (impl which : {impl::shardmesh, impl::mpi, impl::plan})
        benchmark::RegisterBenchmark(
            (which == impl::plan ? "dispatch_plan/" + s.name()
                                 : "dispatch/" + s.name() + "/" + (which == impl::shardmesh ? "shardmesh" : "mpi")) +
                suffix,
            [s, which](benchmark::State& state) { dispatch_case(state, s, which); })
            ->UseManualTime()
            ->Iterations(20)
            ->Unit(benchmark::kMillisecond);
    }
  }
}

int const registered = (deferred_registrations().push_back(register_all), 0);

}  // namespace
