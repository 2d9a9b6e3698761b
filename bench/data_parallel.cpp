// Data parallelism's collectives and step, measured side by side in one run:
//
//   reduce_scatter/<size>/<impl>  a gradient buffer of <size> float32 per
//       rank, reduce-scattered in equal blocks over every rank:
//         shardmesh           the trainer's reduce-scatter: MPI's or the ring,
//                             as the mesh measured (collective_tuning.hpp)
//         ring                the ring on point-to-point messages, always
//         mpi_reduce_scatter  MPI_Reduce_scatter_block
//         mpi_allreduce       MPI_Allreduce of the same buffer: the baseline
//       The bandwidth bound of a reduce-scatter is half an all-reduce's.
//
//   dp_step/<model>/zero<s>  one training step of a GPT, data-parallel over
//       every rank (tp = 1), ZeRO stage s, measured two ways per iteration:
//       with the buckets' reductions started during backward (the time
//       reported) and with all of them after backward. Counters, medians
//       over the iterations: step_ms and sequential_ms (the two steps),
//       communication_ms (the sequential step's wait for its reductions,
//       which overlap nothing), compute_ms (sequential_ms minus it), and
//       exposed_share: (step_ms - compute_ms) / communication_ms, the share
//       of the communication that overlapping left exposed.
//
// Time: the slowest rank's per iteration. Run on 2 ranks (one per core) and
// on 4 (oversubscribed).
#include "deferred_registration.hpp"
#include "max_over_ranks.hpp"
#include "rounds.hpp"
#include "synthetic_gpt.hpp"
#include "timed_training.hpp"

#include <shardmesh/shardmesh.hpp>

#include <benchmark/benchmark.h>
#include <mpi.h>
#include <Kokkos_Core.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace {

using namespace shardmesh;
using namespace shardmesh::bench;
using host = Kokkos::HostSpace;
using buffer = Kokkos::View<float*, host>;

// The mesh every case uses (its tuning measures once), freed before Kokkos
// and MPI finalize.
std::unique_ptr<device_mesh>& mesh_slot() {
  static std::unique_ptr<device_mesh> mesh;
  return mesh;
}
device_mesh const& world_mesh() {
  auto& mesh = mesh_slot();
  if (!mesh) mesh = std::make_unique<device_mesh>(MPI_COMM_WORLD, mesh_shape{{"dp", dynamic_extent}, {"tp", 1}});
  return *mesh;
}

void reduce_scatter_case(benchmark::State& state, std::size_t bytes, std::string const& impl) {
  device_mesh const& mesh = world_mesh();
  std::size_t const n = world_size();
  std::size_t const block = bytes / sizeof(float) / n;
  buffer data("data", block * n), recv("recv", block), scratch("scratch", block);
  communicator const& group = mesh.group(axis_set::of(0));
  std::vector<std::size_t> const counts(n, block);
  auto& tuning = mesh.state<collective_tuning>();
  bool const ring = impl == "ring" || (impl == "shardmesh" && tuning.reduce_scatter<float, host>(group, counts, {}) ==
                                                                  reduce_scatter_algorithm::ring);
  time_max_over_ranks(state, [&] {
    if (impl == "mpi_allreduce")
      MPI_Allreduce(MPI_IN_PLACE, data.data(), static_cast<int>(data.size()), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    else if (impl == "mpi_reduce_scatter")
      MPI_Reduce_scatter_block(data.data(), recv.data(), static_cast<int>(block), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    else if (ring)
      ring_reduce_scatter<float, host>(group, data, recv, counts, 0, scratch).wait();
    else
      ireduce_scatter_v(group, data, recv, counts, reduce_op::sum).wait();
  });
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * bytes));
  state.counters["ring"] = ring ? 1 : 0;
}

// A GPT whose gradients (16 MiB) take a reduction comparable to a share of
// its step on this machine: one sequence of 64 tokens per rank.
parallel::gpt_config const model_config{
    .vocabulary = 2048, .sequence = 64, .hidden = 256, .heads = 4, .head_size = 64, .ffn = 1024, .layers = 4};

void step_case(benchmark::State& state, parallel::zero_stage stage) {
  using model_type = parallel::gpt<float, host>;
  using trainer_type = parallel::trainer<model_type>;
  device_mesh const& mesh = world_mesh();
  std::size_t const n = world_size();
  model_type overlapped_model(mesh, model_config, synthetic_values(model_config)),
      sequential_model(mesh, model_config, synthetic_values(model_config));
  parallel::training_options options{
      .stage = stage, .method = parallel::adamw{}, .clip_norm = 1.0, .bucket_bytes = std::size_t{4} << 20};
  trainer_type overlapped(overlapped_model, mesh, options);
  options.overlap = false;
  trainer_type sequential(sequential_model, mesh, options);
  Kokkos::View<int**, Kokkos::LayoutRight, host> ids("ids", n, model_config.sequence);
  for (std::size_t i = 0; i < ids.size(); ++i) ids.data()[i] = static_cast<int>(i * 31 % model_config.vocabulary);
  auto const tokens = distribute<host>(mesh, overlapped_model.layouts().ids, ids);
  std::vector<trainer_type::micro_batch> const batch{{tokens, tokens}};
  (void)timed_step(overlapped, batch);  // first steps measure, allocate and make optimizer state
  (void)timed_step(sequential, batch);
  overlap_measurement measured;
  for (auto _ : state) {
    double const step = timed_step(overlapped, batch).seconds;
    measured.add(step, timed_step(sequential, batch));
    state.SetIterationTime(step);
  }
  measured.report(state);
  state.counters["buckets"] = static_cast<double>(overlapped.bucket_count());
}

void register_all() {
  Kokkos::push_finalize_hook([] { mesh_slot().reset(); });
  for (std::size_t round = 0; round < rounds(); ++round) {
    std::string const suffix = rounds() > 1 ? "/round:" + std::to_string(round) : "";
    for (std::size_t mib : {1, 4, 16, 64})
      for (char const* impl : {"shardmesh", "ring", "mpi_reduce_scatter", "mpi_allreduce"})
        benchmark::RegisterBenchmark(
            "reduce_scatter/" + std::to_string(mib) + "MiB/" + impl + suffix,
            [mib, impl = std::string(impl)](benchmark::State& state) { reduce_scatter_case(state, mib << 20, impl); })
            ->UseManualTime()
            ->Iterations(mib >= 16 ? 10 : 30)
            ->Unit(benchmark::kMillisecond);
    for (auto const stage : {parallel::zero_stage::none, parallel::zero_stage::gradients})
      benchmark::RegisterBenchmark("dp_step/gpt_c256_l4_t64/zero" + std::to_string(static_cast<int>(stage)) + suffix,
                                   [stage](benchmark::State& state) { step_case(state, stage); })
          ->UseManualTime()
          ->Iterations(7)
          ->Unit(benchmark::kMillisecond);
  }
}

int const registered = (deferred_registrations().push_back(register_all), 0);

}  // namespace
