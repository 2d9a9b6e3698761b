// The layout microbenchmark suite: every case of transition_cases.hpp at
// global sizes from 64 KiB to 64 MiB, measured four ways in the same run:
//   shardmesh     a redistributor (checked and planned once) run into y
//   checked       redistribute(x, y): every call first checks, with one
//                 small collective, that all ranks ask for the same thing
//   hand_written  the same transfer by hand (pack loops, raw MPI, unpack)
//   mpi           the hand-written transfer's collectives alone: MPI's ceiling
//   memcpy        one rank copying the bytes a rank receives: memory's ceiling
// Benchmark names are kind/mesh/from->to/size/implementation[/round:k]; the counters
// carry what the report needs (bytes against prediction and lower bound,
// peak extra memory, the baseline's time per phase). Cases whose mesh does
// not have this run's number of ranks are skipped, so run on 4 and 8 ranks.
#include "deferred_registration.hpp"
#include "max_over_ranks.hpp"
#include "rounds.hpp"
#include "transition_cases.hpp"

#include <shardmesh/algebra/plan_traffic.hpp>
#include <shardmesh/shardmesh.hpp>

#include <benchmark/benchmark.h>
#include <Kokkos_Core.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>

namespace {

using namespace shardmesh;
using namespace shardmesh::bench;
using tensor = dynamic_dtensor<float, 2>;

constexpr std::size_t edges[] = {128, 256, 512, 1024, 2048, 4096};  // 64 KiB to 64 MiB

std::string mesh_label(mesh_shape const& m) {
  std::string out;
  for (std::size_t a = 0; a < m.ndim; ++a) out += (a ? "x" : "") + std::to_string(m.extent(a));
  return out;
}

std::string size_label(std::size_t bytes) {
  return bytes >= (1U << 20) ? std::to_string(bytes >> 20) + "MiB" : std::to_string(bytes >> 10) + "KiB";
}

// Meshes live for the whole run (their plan caches with them); every rank
// runs the benchmarks in the same order, so creating them lazily is collective.
device_mesh const& mesh_for(mesh_shape const& shape) {
  static std::map<std::string, std::unique_ptr<device_mesh>> meshes;
  auto& m = meshes[mesh_label(shape)];
  if (!m) m = std::make_unique<device_mesh>(MPI_COMM_WORLD, shape);
  return *m;
}

// Small integers, different on every rank. A function of its own: nvcc
// accepts no KOKKOS_LAMBDA in a constructor (its address cannot be taken).
void fill_input(matrix const& x) {
  auto const salt = static_cast<std::size_t>(world_rank());
  Kokkos::parallel_for(
      "fill", Kokkos::MDRangePolicy<Kokkos::Rank<2>>({0, 0}, {x.extent(0), x.extent(1)}),
      KOKKOS_LAMBDA(std::size_t i, std::size_t j) { x(i, j) = static_cast<float>((i * 7 + j * 3 + salt) % 64); });
  Kokkos::fence();
}

// One case at one size on this rank: the mesh, the bound layouts and the
// input and output shards, the input filled with small integers so that
// sums are exact in float and every reduction order agrees.
struct instance {
  transition_case const& c;
  std::size_t n;
  device_mesh const& mesh;
  bound_layout from;
  bound_layout to;
  tensor_index global{};
  matrix in;
  matrix out;

  instance(transition_case const& tc, std::size_t edge)
      : c(tc), n(edge), mesh(mesh_for(tc.mesh)), from(bind(tc.mesh, tc.from)), to(bind(tc.mesh, tc.to)) {
    global[0] = global[1] = n;
    in = allocate(from);
    out = allocate(to);
    Kokkos::deep_copy(out, 0.0F);
    fill_input(in);
  }

  [[nodiscard]] matrix allocate(bound_layout const& l) const {
    tensor_index const e = local_extents(c.mesh, l, global, mesh.rank());
    return matrix(Kokkos::view_alloc(Kokkos::WithoutInitializing, "shard"), e[0], e[1]);
  }

  [[nodiscard]] hand_written by_hand() const { return c.by_hand({n, coordinates_of(c.mesh, mesh.rank()), in, out}); }

  [[nodiscard]] redistribution_plan const& plan() const { return *mesh.plan(from, to); }

  // Bytes this rank receives by the plan.
  [[nodiscard]] std::size_t predicted() const {
    std::size_t bytes = 0;
    for (std::size_t i = 0; i < plan().size(); ++i)
      bytes += received(c.mesh, plan()[i], global, mesh.rank()) * sizeof(float);
    return bytes;
  }

  // The least any single collective could have this rank receive: the
  // target elements it lacks or, from a partial layout over n ranks,
  // (n-1)/n of its input (twice that when every rank keeps everything).
  [[nodiscard]] std::size_t lower_bound() const {
    std::size_t const me = mesh.rank();
    std::size_t const in_size = local_size(c.mesh, from, global, me);
    std::size_t const out_size = local_size(c.mesh, to, global, me);
    if (!from.partial_axes.empty()) {
      std::size_t const g = group_size(c.mesh, from.partial_axes);
      return (out_size == in_size ? 2 : 1) * (g - 1) * in_size / g * sizeof(float);
    }
    mesh_coordinates const here = coordinates_of(c.mesh, me);
    tensor_index const e = local_extents(c.mesh, to, global, me);
    std::size_t held = 1;
    for (std::size_t d = 0; d < 2; ++d) {
      std::size_t count = 0;
      for (std::size_t i = 0; i < e[d]; ++i) {
        dim_location const at = locate(c.mesh, from.dims[d], n, to_global(c.mesh, to.dims[d], n, here, i));
        bool mine = true;
        for (std::size_t k = 0; k < from.dims[d].count; ++k)
          mine = mine && at.coordinates[from.dims[d].axes[k]] == here[from.dims[d].axes[k]];
        count += mine ? 1 : 0;
      }
      held *= count;
    }
    return (out_size - held) * sizeof(float);
  }

  // Runs shardmesh on the same input and compares with `out` on every rank.
  [[nodiscard]] bool matches_shardmesh() const {
    tensor const x(mesh, c.from, {n, n}, in);
    tensor y(mesh, c.to, {n, n}, allocate(to));
    redistribute(x, y);
    auto const ours = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace{}, y.local());
    auto const theirs = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace{}, out);
    int wrong = std::equal(ours.data(), ours.data() + ours.size(), theirs.data()) ? 0 : 1;
    MPI_Allreduce(MPI_IN_PLACE, &wrong, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    return wrong == 0;
  }
};

void set_bytes(benchmark::State& state, double bytes_per_iteration) {
  state.SetBytesProcessed(static_cast<std::int64_t>(bytes_per_iteration * static_cast<double>(state.iterations())));
}

void run_shardmesh(benchmark::State& state, instance const& t, bool checked) {
  tensor const x(t.mesh, t.c.from, {t.n, t.n}, t.in);
  tensor y(t.mesh, t.c.to, {t.n, t.n}, t.out);
  redistributor const run(x, t.c.to);
  run(x, y);  // prepares the steps and fills the workspace
  auto& pool = workspace_of<matrix::memory_space>(t.mesh);
  pool.reset_peak();
  t.mesh.counters().reset();
  if (checked)
    time_max_over_ranks(state, [&] { redistribute(x, y); });
  else
    time_max_over_ranks(state, [&] { run(x, y); });
  auto const received =
      static_cast<double>(t.mesh.counters().total().bytes_received) / static_cast<double>(state.iterations());
  auto const predicted = static_cast<double>(t.predicted());
  state.counters["bytes_moved"] = max_over_ranks(received);
  state.counters["bytes_predicted"] = max_over_ranks(predicted);
  state.counters["bytes_exact"] = max_over_ranks(received == predicted ? 0 : 1) == 0 ? 1 : 0;
  state.counters["bytes_lower_bound"] = max_over_ranks(static_cast<double>(t.lower_bound()));
  state.counters["peak_extra_bytes"] = max_over_ranks(static_cast<double>(pool.peak_leased_bytes()));
  state.counters["output_shard_bytes"] = max_over_ranks(static_cast<double>(t.out.size() * sizeof(float)));
  state.counters["steps"] = static_cast<double>(t.plan().size());
  set_bytes(state, state.counters["bytes_moved"]);
}

// Runs the phases of kinds in `which`, adding each phase's time to `spent`.
void run_phases(hand_written const& h, std::vector<phase::kind> const& which, std::map<phase::kind, double>& spent) {
  for (phase const& p : h.phases) {
    if (std::find(which.begin(), which.end(), p.what) == which.end()) continue;
    double const start = MPI_Wtime();
    p.run();
    spent[p.what] += MPI_Wtime() - start;
  }
}

void run_hand_written(benchmark::State& state, instance const& t, bool collectives_only) {
  hand_written const h = t.by_hand();
  std::vector<phase::kind> const which =
      collectives_only ? std::vector{phase::kind::collective}
                       : std::vector{phase::kind::pack, phase::kind::collective, phase::kind::unpack};
  std::map<phase::kind, double> spent;
  run_phases(h, which, spent);  // warm up
  spent.clear();
  time_max_over_ranks(state, [&] { run_phases(h, which, spent); });
  if (!collectives_only && !t.matches_shardmesh()) {
    state.SkipWithError("the hand-written transfer and shardmesh disagree");
    return;
  }
  auto const per_iteration_ms = [&](phase::kind k) {
    return max_over_ranks(spent[k] / static_cast<double>(state.iterations()) * 1e3);
  };
  state.counters["pack_ms"] = per_iteration_ms(phase::kind::pack);
  state.counters["collective_ms"] = per_iteration_ms(phase::kind::collective);
  state.counters["unpack_ms"] = per_iteration_ms(phase::kind::unpack);
  state.counters["peak_extra_bytes"] = max_over_ranks(static_cast<double>(h.extra_bytes));
  set_bytes(state, max_over_ranks(static_cast<double>(t.predicted())));
}

// Rank 0 copies as many bytes as the busiest rank receives (a whole output
// shard for local steps); the others wait.
void run_memcpy(benchmark::State& state, instance const& t) {
  double bytes = max_over_ranks(static_cast<double>(t.predicted()));
  if (bytes == 0) bytes = max_over_ranks(static_cast<double>(t.out.size() * sizeof(float)));
  auto const n = static_cast<std::size_t>(bytes);
  Kokkos::View<std::byte*> from("from", world_rank() == 0 ? n : 0);
  Kokkos::View<std::byte*> to("to", world_rank() == 0 ? n : 0);
  time_max_over_ranks(state, [&] {
    Kokkos::deep_copy(to, from);
    Kokkos::fence();
  });
  set_bytes(state, bytes);
}

// A fixed number of iterations per repetition, fewer for larger sizes: each
// repetition then sets up its case once (Google Benchmark's own estimate of
// the count would set it up several times) and takes about as long at every size.
std::int64_t iterations_for(std::size_t bytes) {
  return std::clamp<std::int64_t>(static_cast<std::int64_t>((std::size_t{256} << 20) / bytes), 4, 200);
}

void register_all() {
  std::size_t const ranks = world_size();
  static std::vector<transition_case> const cases = transition_cases();
  for (transition_case const& c : cases) {
    if (c.mesh.size() != ranks) continue;
    for (std::size_t n : edges)
      for (std::size_t round = 0; round < rounds(); ++round) {
        std::size_t const bytes = n * n * sizeof(float);
        std::string const name = c.kind + "/" + mesh_label(c.mesh) + "/" + std::string(to_string(c.from).view()) +
                                 "->" + std::string(to_string(c.to).view()) + "/" + size_label(bytes) + "/";
        std::string const suffix = rounds() > 1 ? "/round:" + std::to_string(round) : "";
        auto const add = [&](std::string const& impl, auto run) {
          benchmark::RegisterBenchmark(name + impl + suffix,
                                       [&c, n, run](benchmark::State& state) {
                                         instance const t(c, n);
                                         run(state, t);
                                         state.counters["global_bytes"] = static_cast<double>(n * n * sizeof(float));
                                       })
              ->UseManualTime()
              ->Iterations(iterations_for(bytes))
              ->Unit(benchmark::kMillisecond);
        };
        add("shardmesh", [](benchmark::State& s, instance const& t) { run_shardmesh(s, t, false); });
        add("checked", [](benchmark::State& s, instance const& t) { run_shardmesh(s, t, true); });
        add("hand_written", [](benchmark::State& s, instance const& t) { run_hand_written(s, t, false); });
        add("mpi", [](benchmark::State& s, instance const& t) { run_hand_written(s, t, true); });
        add("memcpy", run_memcpy);
      }
  }
}

int const registered = (deferred_registrations().push_back(register_all), 0);

}  // namespace
