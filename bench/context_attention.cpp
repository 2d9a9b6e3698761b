// Context parallelism's attention (ops/context_attention.hpp), measured side
// by side in one run, cp = the ranks (2 ranks, one per core, for wall-clock
// figures), float:
//
//   ring/<pass>/<shape>/<part>  the ring form's forward or backward and
//       what it is made of:
//         ring     context_attention (ring), or its backward
//         compute  the same blocks' kernels on each rank with nothing
//                  passed: the work the ring hides its transfers behind
//         p2p      the ring's exchanges alone, by hand: MPI_Sendrecv of
//                  the same sizes round the same ring
//       and the counters exposed_share = transfer / p2p, where transfer is
//       the time the ring spends in its transfer code (posting, waiting:
//       the Kokkos Tools region "shardmesh::context_attention::transfer"),
//       the share of the transfers the computation does not hide, and
//       difference_share = (ring - compute) / p2p, the same read from the
//       totals (noisier: the computation is far longer than the transfers).
//
//   heads_transition/<shape>/<impl>  S(seq:cp) to S(heads:cp) of [B, T, H, D],
//       what the all-to-all form runs before attention:
//         shardmesh  the layout transition (one all-to-all, planned)
//         mpi        by hand: a pack kernel per destination's heads,
//                    MPI_Alltoall, an unpack kernel into the sequence
//
// Time: the slowest rank's per iteration, medians.
#include "deferred_registration.hpp"
#include "max_over_ranks.hpp"
#include "rounds.hpp"

#include <shardmesh/ops/context_attention.hpp>
#include <shardmesh/shardmesh.hpp>

#include <benchmark/benchmark.h>
#include <mpi.h>
#include <Kokkos_Core.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace {

using namespace shardmesh;
using namespace shardmesh::bench;
using host = Kokkos::HostSpace;
using heads = dynamic_dtensor<float, 4, host>;
using exec_type = Kokkos::DefaultHostExecutionSpace;

std::unique_ptr<device_mesh>& mesh_slot() {
  static std::unique_ptr<device_mesh> mesh;
  return mesh;
}
device_mesh const& world_mesh() {
  auto& mesh = mesh_slot();
  if (!mesh) mesh = std::make_unique<device_mesh>(MPI_COMM_WORLD, mesh_shape{{"cp", dynamic_extent}});
  return *mesh;
}

struct shape {
  std::size_t B, T, H, D;
  [[nodiscard]] std::string name() const {
    return "b" + std::to_string(B) + "_t" + std::to_string(T) + "_h" + std::to_string(H) + "_d" + std::to_string(D);
  }
};

// Values in [-0.5, 0.5) from an element's index: a functor, as a device compiler takes no local lambda into generate.
struct pattern {
  std::size_t salt;
  KOKKOS_FUNCTION float operator()(std::size_t i) const {
    return static_cast<float>((i * 7 + salt) % 17) / 17.0F - 0.5F;
  }
};

heads filled(shape const& s, std::size_t salt) {
  layout const l{replicated, shard("cp"), replicated, replicated};
  return generate<float, host>(world_mesh(), l, std::array<std::size_t, 4>{s.B, s.T, s.H, s.D}, pattern{salt});
}

enum class part { ring, compute, p2p };
enum class pass { forward, backward };

// The ring's blocks on this rank with nothing passed: its own keys and values stand for each block that would
// arrive (the same sizes, so the same work).
void compute_only(ops::context_attention_state<float, host> s, pass p, heads const& dout, exec_type const& exec) {
  ops::context_geometry const& g = s.at;
  auto const mine = rank_chunks(g.length, g.cp, g.position, g.order);
  auto const theirs = [&](std::size_t t) {
    return rank_chunks(g.length, g.cp, (g.position + g.cp - t) % g.cp, g.order);
  };
  if (p == pass::forward) {
    ops::detail::attend(
        s,
        [&](auto&& merge) {
          for (std::size_t t = 0; t < g.cp; ++t) merge(mine, s.k.local(), s.v.local(), theirs(t));
        },
        exec);
    exec.fence();
    return;
  }
  auto const& q = s.q.local();
  auto const delta = ops::detail::rows_like<float, host>("delta", q);
  Kokkos::View<float****, Kokkos::LayoutRight, host> dq("dq", q.extent(0), q.extent(1), q.extent(2), q.extent(3));
  Kokkos::View<float****, Kokkos::LayoutRight, host> dk("dk", s.k.local().layout()), dv("dv", s.k.local().layout());
  ops::local::attention_delta(exec, s.out.local(), dout.local(), delta);
  for (std::size_t t = 0; t < g.cp; ++t)
    ops::detail::block_gradients(exec, g, s, dout.local(), delta, dq, mine, s.k.local(), s.v.local(), dk, dv,
                                 theirs(t));
  exec.fence();
}

// The ring's exchanges by hand: a block of `elements` floats to the next rank, from the previous, `times` times.
void exchanges(std::vector<float>& out, std::vector<float>& in, std::size_t times) {
  int size = 1, me = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  for (std::size_t i = 0; i < times; ++i)
    MPI_Sendrecv(out.data(), static_cast<int>(out.size()), MPI_FLOAT, (me + 1) % size, 0, in.data(),
                 static_cast<int>(in.size()), MPI_FLOAT, (me + size - 1) % size, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
}

// Time inside the ring's transfer region, summed, by Kokkos Tools callbacks (the benchmark's only tool).
struct transfer_clock {
  static inline double total = 0, started = 0;
  static inline int depth = 0;  // in the region: nested regions inside it are not the transfer's
  static inline bool inside = false;
  static void push(char const* name) {
    ++depth;
    if (!inside && std::string_view(name) == "shardmesh::context_attention::transfer") {
      inside = true;
      started = MPI_Wtime();
      depth = 1;
    }
  }
  static void pop() {
    if (inside && --depth == 0) {
      total += MPI_Wtime() - started;
      inside = false;
    }
  }
  transfer_clock() {
    Kokkos::Tools::Experimental::set_push_region_callback(push);
    Kokkos::Tools::Experimental::set_pop_region_callback(pop);
  }
  ~transfer_clock() {
    Kokkos::Tools::Experimental::set_push_region_callback(nullptr);
    Kokkos::Tools::Experimental::set_pop_region_callback(nullptr);
  }
};

// Medians of each part's time, shared by a shape's three cases (registered in the order ring, compute, p2p).
std::vector<double>& medians() {
  static std::vector<double> m(4, 0);  // ring, compute, p2p, transfer
  return m;
}

void ring_case(benchmark::State& state, shape const& s, pass p, part what) {
  exec_type const exec;
  heads const q = filled(s, 1), k = filled(s, 2), v = filled(s, 3), dout = filled(s, 4);
  ops::context_options const o{.form = context_form::ring};
  auto const forward = ops::context_attention(q, k, v, o, exec);
  std::size_t const cp = world_mesh().size();
  std::size_t const block = 2 * k.local().size();
  std::vector<float> out(block, 1.0F), in(block), sums_out(block, 1.0F), sums_in(block);
  std::vector<double> times, transfers;
  transfer_clock const clock;
  for (auto _ : state) {
    MPI_Barrier(MPI_COMM_WORLD);
    transfer_clock::total = 0;
    double const start = MPI_Wtime();
    if (what == part::ring && p == pass::forward) (void)ops::context_attention(q, k, v, o, exec);
    if (what == part::ring && p == pass::backward) (void)ops::context_attention_backward(forward.saved, dout, exec);
    if (what == part::compute) compute_only(forward.saved, p, dout, exec);
    if (what == part::p2p) {
      exchanges(out, in, cp - 1);
      if (p == pass::backward) exchanges(sums_out, sums_in, cp);  // the gradients' sums, float here
    }
    times.push_back(max_over_ranks(MPI_Wtime() - start));
    transfers.push_back(max_over_ranks(transfer_clock::total));
    state.SetIterationTime(times.back());
  }
  medians()[static_cast<std::size_t>(what)] = median(times);
  if (what == part::ring) medians()[3] = median(transfers);
  if (what == part::p2p) {  // the last of the three: the share of the transfers left exposed
    std::vector<double> const& m = medians();
    state.counters["exposed_share"] = m[2] > 0 ? m[3] / m[2] : 0;
    state.counters["difference_share"] = m[2] > 0 ? (m[0] - m[1]) / m[2] : 0;
    state.counters["transfer_ms"] = 1e3 * m[3];
    state.counters["ring_ms"] = 1e3 * m[0];
    state.counters["compute_ms"] = 1e3 * m[1];
    state.counters["p2p_ms"] = 1e3 * m[2];
  }
}

// S(seq:cp) to S(heads:cp): by the algebra, or packed, exchanged and unpacked by hand.
void transition_case(benchmark::State& state, shape const& s, bool ours) {
  exec_type const exec;
  heads const x = filled(s, 1);
  std::size_t const cp = world_mesh().size(), Tl = s.T / cp, Hl = s.H / cp, D = s.D, B = s.B;
  bound_layout const heads_split = bind(world_mesh().shape(), layout{replicated, replicated, shard("cp"), replicated});
  std::size_t const n = x.local().size();
  Kokkos::View<float*, host> packed(Kokkos::view_alloc(Kokkos::WithoutInitializing, "packed"), n),
      received(Kokkos::view_alloc(Kokkos::WithoutInitializing, "received"), n);
  Kokkos::View<float****, Kokkos::LayoutRight, host> y(Kokkos::view_alloc(Kokkos::WithoutInitializing, "y"), B, s.T, Hl,
                                                       D);
  auto const& local = x.local();
  auto const by_hand = [&] {
    // Destination j's block: this rank's tokens, heads [j Hl, (j+1) Hl) (a contiguous run of Hl D per token).
    Kokkos::parallel_for(
        "pack", Kokkos::RangePolicy<exec_type>(exec, 0, cp * B * Tl), KOKKOS_LAMBDA(std::size_t row) {
          std::size_t const j = row / (B * Tl), b = row / Tl % B, t = row % Tl;
          float const* from = &local(b, t, j * Hl, 0);
          float* to = &packed(row * Hl * D);
          for (std::size_t e = 0; e < Hl * D; ++e) to[e] = from[e];
        });
    exec.fence();
    MPI_Alltoall(packed.data(), static_cast<int>(n / cp), MPI_FLOAT, received.data(), static_cast<int>(n / cp),
                 MPI_FLOAT, MPI_COMM_WORLD);
    // Source i's block: its tokens [i Tl, (i+1) Tl) of this rank's heads, a run of Hl D per token.
    Kokkos::parallel_for(
        "unpack", Kokkos::RangePolicy<exec_type>(exec, 0, cp * B * Tl), KOKKOS_LAMBDA(std::size_t row) {
          std::size_t const i = row / (B * Tl), b = row / Tl % B, t = row % Tl;
          float const* from = &received(row * Hl * D);
          float* to = &y(b, i * Tl + t, 0, 0);
          for (std::size_t e = 0; e < Hl * D; ++e) to[e] = from[e];
        });
    exec.fence();
  };
  time_max_over_ranks(state, [&] {
    if (ours)
      (void)ops::detail::to_layout(x, heads_split, exec);
    else
      by_hand();
  });
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * n * sizeof(float)));
}

void register_all() {
  std::size_t const cp = world_size();
  Kokkos::push_finalize_hook([] { mesh_slot().reset(); });
  for (std::size_t round = 0; round < rounds(); ++round) {
    std::string const suffix = rounds() > 1 ? "/round:" + std::to_string(round) : "";
    for (shape const s : {shape{1, 512, 8, 64}, shape{8, 128, 8, 64}}) {
      if (s.T % (2 * cp) != 0) continue;
      for (pass p : {pass::forward, pass::backward})
        for (part what : {part::ring, part::compute, part::p2p})
          benchmark::RegisterBenchmark("ring/" + std::string(p == pass::forward ? "forward" : "backward") + "/" +
                                           s.name() + "/" +
                                           (what == part::ring      ? "ring"
                                            : what == part::compute ? "compute"
                                                                    : "p2p") +
                                           suffix,
                                       [s, p, what](benchmark::State& state) { ring_case(state, s, p, what); })
              ->UseManualTime()
              ->Iterations(15)
              ->Unit(benchmark::kMillisecond);
    }
    for (shape const s : {shape{1, 4096, 16, 64}, shape{4, 2048, 32, 64}}) {
      if (s.T % cp != 0 || s.H % cp != 0) continue;
      for (bool ours : {true, false})
        benchmark::RegisterBenchmark("heads_transition/" + s.name() + "/" + (ours ? "shardmesh" : "mpi") + suffix,
                                     [s, ours](benchmark::State& state) { transition_case(state, s, ours); })
            ->UseManualTime()
            ->Iterations(50)
            ->Unit(benchmark::kMillisecond);
    }
  }
}

int const registered = (deferred_registrations().push_back(register_all), 0);

}  // namespace
