// Pipeline parallelism, measured side by side in one run:
//
//   p2p/<size>/<impl>  an activation of <size> bytes from each even rank to
//       the next odd one and back (a stage boundary crossed forward, then
//       its gradient backward):
//         shardmesh  the pipeline's own transfers (stage_transfers.hpp):
//                    receives posted two ahead into buffers from the
//                    mesh's pool, non-blocking sends of a dtensor's block
//         mpi        the same by hand: MPI_Irecv two ahead into buffers
//                    allocated once (the next posted before waiting),
//                    MPI_Isend, MPI_Wait, a tag per message
//
//   pipeline/<schedule>/m<m>  one training step of a GPT on 2 stages (and
//       dp = ranks / 2), m micro-batches, timed action by action: counters
//       (medians over the iterations) step_ms, idle_measured (the idle share
//       of the schedule's actions as they ran), idle_predicted (the same
//       schedule simulated with this step's mean action times per stage),
//       and idle_unit (the schedule's closed form: unit costs).
//
// Time: the slowest rank's per iteration. The pipeline's wall-clock
// figures are meant for 2 ranks, one per core.
#include "deferred_registration.hpp"
#include "max_over_ranks.hpp"
#include "rounds.hpp"
#include "synthetic_gpt.hpp"

#include <shardmesh/shardmesh.hpp>
#include <shardmesh/train/pipeline_timeline.hpp>

#include <benchmark/benchmark.h>
#include <mpi.h>
#include <Kokkos_Core.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace {

using namespace shardmesh;
using namespace shardmesh::bench;
using host = Kokkos::HostSpace;
using model_type = parallel::gpt<float, host>;
using trainer_type = parallel::trainer<model_type>;
using activation = model_type::activation;
using exec_type = trainer_type::exec_type;

// The meshes every case uses, freed before Kokkos and MPI finalize.
std::unique_ptr<device_mesh>& mesh_slot() {
  static std::unique_ptr<device_mesh> mesh;
  return mesh;
}
device_mesh const& world_mesh() {
  auto& mesh = mesh_slot();
  if (!mesh)
    mesh = std::make_unique<device_mesh>(MPI_COMM_WORLD, mesh_shape{{"dp", dynamic_extent}, {"pp", 2}, {"tp", 1}});
  return *mesh;
}

// Round trip i: stage 0 sends activation i to stage 1, stage 1 sends its
// gradient back; each receive posted ahead, as in a pipeline step. The
// first round trips are not timed: they touch the buffers' pages, which
// would otherwise count against whichever implementation runs first.
void p2p_case(benchmark::State& state, std::size_t bytes, bool ours) {
  constexpr std::size_t warmup = 32;
  device_mesh const& mesh = world_mesh();
  device_mesh const stage = mesh.submesh({"dp", "tp"});
  communicator const& pp = mesh.group(axis_set::of(1));
  std::size_t const me = mesh.coordinates()[1];
  int const peer = 1 - static_cast<int>(me);
  std::size_t const trips = warmup + static_cast<std::size_t>(state.max_iterations);
  // The activation [n / 64, 8, 8], whole on every rank of the stage.
  bound_layout const whole = bind(stage.shape(), layout{replicated, replicated, replicated});
  tensor_index const extents{bytes / sizeof(float) / 64, 8, 8};
  auto const make = [&](parallel::pipeline_action const&) {
    return ops::detail::make_like<float, 3, host>(stage, whole, extents);
  };
  activation const out = make({});
  Kokkos::deep_copy(out.local(), 1.0F);
  // The transfers of a two-stage schedule, compute left out: stage_transfers reads only them.
  parallel::pipeline_schedule transfers_only("p2p", 2, trips, 1, 0);
  for (std::size_t i = 0; i < trips && ours; ++i) {
    transfers_only.actions[0].insert(transfers_only.actions[0].end(),
                                     {parallel::actions::send_activation(i), parallel::actions::receive_gradient(i)});
    transfers_only.actions[1].insert(transfers_only.actions[1].end(),
                                     {parallel::actions::receive_activation(i), parallel::actions::send_gradient(i)});
  }
  std::optional<parallel::detail::stage_transfers<activation>> transfers;
  if (ours) transfers.emplace(pp, transfers_only, me, make, exec_type{});
  // By hand: a window of two receives into buffers allocated once, a send, a
  // wait; a tag per message, as a pipeline posting receives ahead needs to
  // tell its micro-batches apart.
  std::size_t const n = out.local().size();
  std::vector<activation> buffers{make({}), make({}), make({})};
  std::vector<MPI_Request> posted(trips, MPI_REQUEST_NULL);
  auto const tag = [](std::size_t i) { return static_cast<int>(i % 32766) + 1; };
  auto const post = [&](std::size_t i) {
    if (!ours && i < trips)
      MPI_Irecv(buffers[i % 3].local().data(), static_cast<int>(n), MPI_FLOAT, peer, tag(i), pp.get(), &posted[i]);
  };
  post(0);
  post(1);
  auto const round_trip = [&](std::size_t i) {
    if (ours) {
      if (me == 0) {
        transfers->send(parallel::actions::send_activation(i), out);
        (void)transfers->receive(parallel::actions::receive_gradient(i));
      } else {
        (void)transfers->receive(parallel::actions::receive_activation(i));
        transfers->send(parallel::actions::send_gradient(i), out);
      }
      return;  // its sends complete in its next waits, as the loop by hand's do in theirs
    }
    MPI_Request sent = MPI_REQUEST_NULL;
    if (me == 0) MPI_Isend(out.local().data(), static_cast<int>(n), MPI_FLOAT, peer, tag(i), pp.get(), &sent);
    post(i + 2);  // while i arrives: three buffers in turn
    MPI_Wait(&posted[i], MPI_STATUS_IGNORE);
    if (me == 1) MPI_Isend(out.local().data(), static_cast<int>(n), MPI_FLOAT, peer, tag(i), pp.get(), &sent);
    MPI_Wait(&sent, MPI_STATUS_IGNORE);
  };
  std::size_t i = 0;
  for (; i < warmup; ++i) round_trip(i);
  time_max_over_ranks(state, [&] { round_trip(i++); });
  if (transfers) transfers->finish();
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * 2 * bytes));
}

// A GPT whose stages take tens of milliseconds per step here: 4 blocks, 2 per stage.
parallel::gpt_config const model_config{
    .vocabulary = 512, .sequence = 64, .hidden = 128, .heads = 4, .head_size = 32, .ffn = 512, .layers = 4};

void pipeline_case(benchmark::State& state, parallel::schedule_kind kind, std::size_t m) {
  device_mesh const& mesh = world_mesh();
  device_mesh const stage = mesh.submesh({"dp", "tp"});
  std::size_t const v = kind == parallel::schedule_kind::interleaved ? 2 : 1, p = 2;
  auto const parts = parallel::partition_layers(model_config.layers, p * v);
  std::deque<model_type> chunks;
  std::vector<model_type*> pointers;
  for (std::size_t c = 0; c < v; ++c) {
    chunks.emplace_back(stage, model_config, synthetic_values(model_config), parts[c * p + mesh.coordinates()[1]]);
    pointers.push_back(&chunks.back());
  }
  trainer_type train(pointers, mesh, {.method = parallel::adamw{}, .schedule = kind, .timeline = true});
  std::size_t const samples = 4 * stage.shape()[0].extent;  // 4 per replica per micro-batch
  Kokkos::View<int**, Kokkos::LayoutRight, host> ids("ids", samples, model_config.sequence);
  for (std::size_t i = 0; i < ids.size(); ++i) ids.data()[i] = static_cast<int>(i * 31 % model_config.vocabulary);
  auto const tokens = distribute<host>(stage, chunks.front().layouts().ids, ids);
  std::vector<trainer_type::micro_batch> const batch(m, {tokens, tokens});
  (void)train.step(batch);  // the first step allocates and makes optimizer state
  std::vector<double> steps, measured, predicted;
  for (auto _ : state) {
    MPI_Barrier(MPI_COMM_WORLD);
    double const start = MPI_Wtime();
    (void)train.step(batch);
    steps.push_back(max_over_ranks(MPI_Wtime() - start));
    state.SetIterationTime(steps.back());
    auto const t = parallel::gather_timeline(train, mesh);
    double shares[2] = {0, 0};
    if (t) shares[0] = t->idle_share(), shares[1] = simulate(t->schedule, t->mean_costs()).idle_share();
    MPI_Bcast(shares, 2, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    measured.push_back(shares[0]);
    predicted.push_back(shares[1]);
  }
  state.counters["step_ms"] = 1e3 * median(steps);
  state.counters["idle_measured"] = median(measured);
  state.counters["idle_predicted"] = median(predicted);
  state.counters["idle_unit"] = simulate(train.schedule()).idle_share();
}

void register_all() {
  if (world_size() % 2 != 0) return;  // two stages
  Kokkos::push_finalize_hook([] { mesh_slot().reset(); });
  for (std::size_t round = 0; round < rounds(); ++round) {
    std::string const suffix = rounds() > 1 ? "/round:" + std::to_string(round) : "";
    for (std::size_t kib : {64, 1024, 4096, 16384})
      for (bool ours : {true, false})
        benchmark::RegisterBenchmark(
            "p2p/" + (kib >= 1024 ? std::to_string(kib / 1024) + "MiB" : std::to_string(kib) + "KiB") + "/" +
                (ours ? "shardmesh" : "mpi") + suffix,
            [kib, ours](benchmark::State& state) { p2p_case(state, kib << 10, ours); })
            ->UseManualTime()
            ->Iterations(kib >= 4096   ? 50
                         : kib >= 1024 ? 200
                                       : 2000)  // small transfers: more of them for a steady mean
            ->Unit(benchmark::kMillisecond);
    for (auto kind : {parallel::schedule_kind::gpipe, parallel::schedule_kind::one_f_one_b,
                      parallel::schedule_kind::interleaved, parallel::schedule_kind::zero_bubble})
      for (std::size_t m : {2, 4, 8})
        benchmark::RegisterBenchmark(
            "pipeline/" + std::string(parallel::to_string(kind)) + "/m" + std::to_string(m) + suffix,
            [kind, m](benchmark::State& state) { pipeline_case(state, kind, m); })
            ->UseManualTime()
            ->Iterations(5)
            ->Unit(benchmark::kMillisecond);
  }
}

int const registered = (deferred_registrations().push_back(register_all), 0);

}  // namespace
