#pragma once
// A training run's state in a checkpoint, restorable under any dp, tp, pp,
// ZeRO stage and rank count:
//
//   io::checkpoint_writer out(mesh, dir / "state.h5");
//   io::save_training_state(out, trainer, {.samples = consumed, .seed = seed, .configuration = text});
//   out.commit();
//
//   io::checkpoint_reader in(mesh, dir / "state.h5");
//   io::run_position const at = io::load_training_state(in, trainer);   // trainer made as for a new run
//
// The state is every parameter's value and optimizer state (datasets named
// by parallel::trainer::for_each_state, each saved from the layout its ZeRO
// stage keeps it in and read into the layout the new run keeps it in), the
// optimizer's step count, name and hyperparameters (checked on loading),
// and where the run stands: samples consumed, the seed of its
// counter-based random numbers (strategy/counter_random.hpp: with the
// step, all the random state there is) and its configuration. Numbers are
// stored as numbers; the reader checks every value against the
// checkpoint's checksum over them.

#include "shardmesh/comm/collective_debug.hpp"
#include "shardmesh/io/checkpoint_reader.hpp"
#include "shardmesh/io/checkpoint_writer.hpp"
#include "shardmesh/strategy/counter_random.hpp"
#include "shardmesh/train/trainer.hpp"

#include <mpi.h>
#include <Kokkos_Core.hpp>

#include <array>
#include <bit>
#include <charconv>
#include <cstdint>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

namespace shardmesh::io {

struct run_position {
  std::int64_t step = 0;     // optimizer steps taken
  std::int64_t samples = 0;  // samples consumed
  std::uint64_t seed = 0;
  std::string configuration;  // the application's, as text
};

// Collective over the checkpoint's ranks. position.step is the trainer's.
template <class Model>
void save_training_state(checkpoint_writer& out, parallel::trainer<Model>& trainer, run_position position) {
  trainer.for_each_state([&](std::string const& name, auto const& x) { out.add(name, x); });
  out.flush();
  out.write_value("step", static_cast<std::int64_t>(trainer.steps()));
  out.write_value("samples", position.samples);
  out.write_value("seed", position.seed);
  out.write_text("configuration", position.configuration);
  parallel::optimizer const& method = trainer.options().method;
  out.write_text("optimizer", method.name());
  for (auto const& [name, value] : method.hyperparameters()) out.write_value("optimizer." + name, value);
}

// The checkpoint's optimizer is `method`: its name and every hyperparameter,
// bit for bit. The same verdict on every rank (the values are the same
// everywhere), so it throws without communicating.
inline void check_optimizer(checkpoint_reader const& in, parallel::optimizer const& method) {
  std::string const saved = in.text("optimizer");
  if (saved != method.name())
    throw checkpoint_mismatch_error("checkpoint: the run was saved with the optimizer " + saved + ", this one has " +
                                    method.name());
  auto const exact = [](double x) {
    std::array<char, 32> text{};
    return std::string(text.data(), std::to_chars(text.data(), text.data() + text.size(), x).ptr);
  };
  for (auto const& [name, value] : method.hyperparameters()) {
    double const was = in.value<double>("optimizer." + name);
    if (std::bit_cast<std::uint64_t>(was) != std::bit_cast<std::uint64_t>(value))
      throw checkpoint_mismatch_error("checkpoint: the run was saved with " + saved + " " + name + " = " + exact(was) +
                                      ", this one has " + exact(value));
  }
}

// Collective over the checkpoint's ranks: every state tensor of `trainer`
// (made as for a new run, in any layout, mesh and ZeRO stage) from `in`,
// and the step it continues from.
template <class Model>
run_position load_training_state(checkpoint_reader const& in, parallel::trainer<Model>& trainer) {
  check_optimizer(in, trainer.options().method);
  trainer.for_each_state([&](std::string const& name, auto const& x) { in.read(name, x); });
  run_position at{in.value("step"), in.value("samples"), in.value<std::uint64_t>("seed"), in.text("configuration")};
  trainer.resume_at(static_cast<std::size_t>(at.step));
  return at;
}

// A digest of the whole training state: the same under every layout, mesh
// and ZeRO stage when the state is the same bit for bit. A resumed run
// compares its own with the saving run's. Each tensor's whole-array
// checksum (box_checksum.hpp, the array as one box) weighted by a hash of
// its name, all summed: every rank adds the elements of its blocks that it
// is the first to hold (each element once), and one all-reduce adds the
// ranks' shares, with no tensor gathered. Collective over the trainer's mesh.
template <class Model>
std::uint64_t training_state_digest(parallel::trainer<Model>& trainer, device_mesh const& mesh) {
  std::uint64_t digest = 0;
  trainer.for_each_state([&](std::string const& name, auto const& x) {
    mesh_shape const& shape = x.mesh().shape();
    if (!detail::counts_its_shard(shape, x.bound(), x.mesh().rank())) return;
    auto const host = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace{}, x.local());
    using T = typename std::remove_cvref_t<decltype(x)>::value_type;
    bound_layout whole;  // one box, the whole array
    whole.rank = x.bound().rank;
    std::vector<box_sum> sums(1);
    add_to_box_checksums(std::span<T const>(host.data(), host.size()), shape, x.bound(), x.global_extents(),
                         x.mesh().rank(), interval{0, host.extent(0)}, box_grid{mesh_shape{{"whole", 1}}, whole}, sums);
    std::uint64_t const h = detail::text_hash(name);
    digest += (parallel::mix64(h) | 1) * sums[0].words + (parallel::mix64(h + 1) | 1) * sums[0].weighted;
  });
  shardmesh::detail::debugged_collective(mesh.comm().get(), "training state digest", "u64", [&] {
    MPI_Allreduce(MPI_IN_PLACE, &digest, 1, MPI_UINT64_T, MPI_SUM, mesh.comm().get());
  });
  return digest;
}

}  // namespace shardmesh::io
