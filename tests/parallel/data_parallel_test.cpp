// What a data-parallel step communicates and holds: one reduction per
// gradient bucket and none before the last micro-batch, with the bytes the
// algebra predicts; ZeRO-3 gathering each stage's parameters for its
// forward and again for its backward, and freeing them; and the memory
// ledger's peaks equal to each stage's formula, computed here from the
// layouts' shard geometry (uneven shards: hidden 10, vocabulary 50, MLP 18
// and sequence 5 over dp = 3 or 4). Runs on 2 to 4 ranks (dp = the ranks,
// and dp = 2 x tp = 2 on 4). The fused gather alone: every member's block
// whole from each rank's rows, two gathers in flight at once. And what the
// host waits for in a step: one read of the device's results.
#include "kernel_recording.hpp"
#include "mpi_test.hpp"
#include "small_gpt.hpp"

#include <shardmesh/algebra/plan_traffic.hpp>
#include <shardmesh/models/gpt.hpp>
#include <shardmesh/shardmesh.hpp>
#include <shardmesh/train/trainer.hpp>

#include <catch2/catch_test_macros.hpp>

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

// Inside a namespace of its own: bundled with other test files into one translation unit.
namespace data_parallel_test {

using namespace shardmesh;
namespace ref = shardmesh::test::reference;
using parallel::zero_stage;

namespace {

using host = Kokkos::HostSpace;
using model_type = parallel::gpt<float, host>;
using trainer_type = parallel::trainer<model_type>;

struct fixture {
  ref::config c;
  device_mesh mesh;
  model_type model;
  std::vector<trainer_type::micro_batch> batch;

  fixture(std::size_t dp, std::size_t tp, std::size_t accumulation)
      : c(test::small_gpt(2 * dp * accumulation, 5)),
        mesh(MPI_COMM_WORLD, mesh_shape{{"dp", dp}, {"tp", tp}}),
        model(mesh, {c.V, c.T, c.C, c.H, c.D, c.F, c.L, c.eps, false}, values(c)) {
    auto const tokens = ref::make_tokens(c, 3, 1);
    std::size_t const per_step = c.B / accumulation;
    for (std::size_t a = 0; a < accumulation; ++a) {
      Kokkos::View<int**, Kokkos::LayoutRight, host> ids("ids", per_step, c.T);
      std::copy_n(tokens.begin() + static_cast<std::ptrdiff_t>(a * per_step * c.T), per_step * c.T, ids.data());
      auto const t = distribute<host>(mesh, model.layouts().ids, ids);
      batch.push_back({t, t});
    }
  }

  static parallel::parameter_source values(ref::config const& c) {
    return [all = test::by_name(c, ref::init_parameters(c, 4))](std::string const& name) { return all.at(name); };
  }

  // The model stage of a parameter: "wte", "wpe" 0; "h<l>." l + 1; the rest L + 1.
  [[nodiscard]] std::size_t stage_of(std::string const& name) const {
    if (name == "wte" || name == "wpe") return 0;
    if (name[0] == 'h') return std::stoul(name.substr(1)) + 1;
    return c.L + 1;
  }
};

// Elements this rank holds of each parameter under its compute layout and
// under the compute layout with "dp" appended to dimension 0.
struct shard_sizes {
  std::map<std::string, std::size_t> compute, sharded;
};
shard_sizes sizes_of(fixture& f) {
  shard_sizes s;
  mesh_shape const& mesh = f.mesh.shape();
  f.model.for_each_parameter([&](std::string const& name, auto& p) {
    bound_layout const compute = bind(mesh, p.layout_of());
    bound_layout sharded = compute;
    sharded.dims[0].axes[sharded.dims[0].count++] = static_cast<unsigned char>(mesh.find("dp"));
    s.compute[name] = local_size(mesh, compute, p.global_extents(), f.mesh.rank());
    s.sharded[name] = local_size(mesh, sharded, p.global_extents(), f.mesh.rank());
  });
  return s;
}

std::size_t sum(std::map<std::string, std::size_t> const& m) {
  std::size_t total = 0;
  for (auto const& [name, n] : m) total += n;
  return total;
}

// Collectives of one kind, counted in consecutive windows: each ends with
// the "after" event of stage `last` in `phase` and starts where the
// previous window of any counter ended (or at start()).
struct window_counter {
  std::string kind, phase;
  std::size_t last;
  std::vector<collective_count> seen;
  collective_count at_start;

  void start(device_mesh const& mesh) { at_start = mesh.counters()[kind]; }
  void operator()(device_mesh const& mesh, parallel::stage_event const& e) {
    if (e.phase != phase || e.before || e.stage != last) return;
    collective_count const now = mesh.counters()[kind];
    seen.push_back({now.calls - at_start.calls, now.bytes_sent - at_start.bytes_sent,
                    now.bytes_received - at_start.bytes_received});
    at_start = now;
  }
};

}  // namespace

TEST_CASE("gradients reduce once per bucket, on the last micro-batch only, with the algebra's bytes",
          "[parallel][data_parallel]") {
  auto const dp = static_cast<std::size_t>(test::world_size());
  if (dp < 2) return;
  for (auto const& [stage, algorithm] : {std::pair(zero_stage::none, reduce_scatter_algorithm::automatic),
                                         std::pair(zero_stage::gradients, reduce_scatter_algorithm::mpi),
                                         std::pair(zero_stage::gradients, reduce_scatter_algorithm::ring)}) {
    INFO("ZeRO-" << static_cast<int>(stage) << ", reduce-scatter algorithm " << static_cast<int>(algorithm));
    fixture f(dp, 1, 3);
    f.mesh.state<collective_tuning>().prefer(algorithm);
    trainer_type train(f.model, f.mesh, {.stage = stage, .bucket_bytes = 2048});
    std::string const kind = stage == zero_stage::none ? "all_reduce" : "reduce_scatter";
    window_counter count{kind, "backward", 0, {}, {}};
    train.trace([&](auto const& e) {
      if (e.before && e.stage == f.c.L + 2 && e.phase == "backward") count.start(f.mesh);
      count(f.mesh, e);
    });
    (void)train.step(f.batch);
    REQUIRE(count.seen.size() == 3);
    CHECK(count.seen[0].calls == 0);
    CHECK(count.seen[1].calls == 0);
    CHECK(train.bucket_count() > 1);
    CHECK(count.seen[2].calls == train.bucket_count());
    // Bytes received. MPI's reduce-scatter: the algebra's for each
    // parameter's reduction ((n-1) blocks of the result into each rank). The
    // ring: per bucket, every block but the left neighbour's. The all-reduce:
    // the fused buffer's bandwidth-optimal all-reduce.
    shard_sizes const sizes = sizes_of(f);
    std::map<std::string, std::vector<std::size_t>> blocks;  // each parameter's elements per dp rank
    std::uint64_t want = 0;
    f.model.for_each_parameter([&](std::string const& name, auto& p) {
      std::size_t row = 1;
      for (std::size_t d = 1; d < p.value().rank; ++d) row *= p.global_extents()[d];
      for (std::size_t q = 0; q < dp; ++q)
        blocks[name].push_back(block_part(p.global_extents()[0], dp, q).size() * row);
      if (algorithm != reduce_scatter_algorithm::mpi) return;
      bound_layout const accumulate = bind(f.mesh.shape(), p.accumulation_layout());
      bound_layout reduced = bind(f.mesh.shape(), p.layout_of());
      reduced.dims[0].axes[reduced.dims[0].count++] = 0;
      auto const plan = f.mesh.plan(accumulate, reduced);
      REQUIRE(plan->size() == 1);
      want += received(f.mesh.shape(), (*plan)[0], p.global_extents(), f.mesh.rank()) * sizeof(float);
    });
    std::size_t const left = (f.mesh.rank() + dp - 1) % dp;
    for (auto const& members : train.bucket_members()) {
      std::size_t elements = 0, left_block = 0;
      for (std::string const& name : members) {
        elements += sizes.compute.at(name);
        left_block += blocks.at(name)[left];
      }
      if (stage == zero_stage::none)
        want += shardmesh::detail::all_reduce_moved(f.mesh.group(axis_set::of(0)), elements) * sizeof(float);
      else if (algorithm == reduce_scatter_algorithm::ring)
        want += (elements - left_block) * sizeof(float);
    }
    CHECK(count.seen[2].bytes_received == want);
  }
}

TEST_CASE(
    "ZeRO-3 gathers each stage's parameters by one all-gather for its forward and its backward, frees them, "
    "and reduces its gradients by one reduce-scatter",
    "[parallel][data_parallel]") {
  auto const dp = static_cast<std::size_t>(test::world_size());
  if (dp < 2) return;
  fixture f(dp, 1, 2);
  trainer_type train(f.model, f.mesh, {.stage = zero_stage::parameters});
  // Forward windows end after the loss, backward ones after the embedding.
  window_counter forward{"all_gather", "forward", f.c.L + 2, {}, {}};
  window_counter backward{"all_gather", "backward", 0, {}, {}};
  std::size_t still_gathered = 0;
  forward.start(f.mesh);
  train.trace([&](auto const& e) {
    forward(f.mesh, e);
    backward(f.mesh, e);
    if (!e.before && e.phase == "forward" && e.stage == f.c.L + 2) backward.start(f.mesh);
    if (!e.before && e.phase == "backward" && e.stage == 0) forward.start(f.mesh);
    if (!e.before && e.stage == 0 && e.phase == "backward")
      f.model.for_each_parameter([&](std::string const&, auto& p) { still_gathered += p.gathered() ? 1 : 0; });
  });
  collective_count const scatters_before = f.mesh.counters()["reduce_scatter"];
  (void)train.step(f.batch);
  std::size_t const scatters = f.mesh.counters()["reduce_scatter"].calls - scatters_before.calls;
  std::set<std::size_t> stages;
  std::uint64_t bytes = 0;
  f.model.for_each_parameter([&](std::string const& name, auto& p) {
    stages.insert(f.stage_of(name));
    auto const plan = f.mesh.plan(p.stored().bound(), bind(f.mesh.shape(), p.layout_of()));
    for (std::size_t i = 0; i < plan->size(); ++i)
      bytes += received(f.mesh.shape(), (*plan)[i], p.global_extents(), f.mesh.rank()) * sizeof(float);
  });
  REQUIRE(forward.seen.size() == 2);
  REQUIRE(backward.seen.size() == 2);
  for (auto const& seen : {forward.seen[0], forward.seen[1], backward.seen[0], backward.seen[1]}) {
    CHECK(seen.calls == stages.size());
    CHECK(seen.bytes_received == bytes);
  }
  CHECK(still_gathered == 0);
  // Gradients: one reduce-scatter per unit, after the last micro-batch's backward.
  CHECK(train.bucket_count() == stages.size());
  CHECK(scatters == stages.size());
}

TEST_CASE("ZeRO-1 and 2 return updated values by one all-gather per bucket", "[parallel][data_parallel]") {
  auto const dp = static_cast<std::size_t>(test::world_size());
  if (dp < 2) return;
  for (zero_stage stage : {zero_stage::none, zero_stage::optimizer_state, zero_stage::gradients}) {
    INFO("ZeRO-" << static_cast<int>(stage));
    fixture f(dp, 1, 1);
    trainer_type train(f.model, f.mesh, {.stage = stage, .bucket_bytes = 2048});
    collective_count after_backward;
    train.trace([&](auto const& e) {
      if (!e.before && e.stage == 0 && e.phase == "backward") after_backward = f.mesh.counters()["all_gather"];
    });
    (void)train.step(f.batch);
    std::size_t const gathers = f.mesh.counters()["all_gather"].calls - after_backward.calls;
    CHECK(train.bucket_count() > 1);
    CHECK(gathers == (stage == zero_stage::none ? 0 : train.bucket_count()));
  }
}

TEST_CASE(
    "a fused gather completes every member's block from each rank's rows, uneven and empty parts included, "
    "its copies on a side instance after the sources' writer",
    "[parallel][data_parallel]") {
  auto const n = static_cast<std::size_t>(test::world_size());
  device_mesh mesh(MPI_COMM_WORLD, mesh_shape{{"dp", n}});
  communicator const& group = mesh.group(axis_set::of(0));
  auto const me = static_cast<std::size_t>(group.rank());
  using flat = Kokkos::View<float*, host>;
  using gather = parallel::detail::fused_gather<float, host>;
  using exec_type = gather::exec_type;
  auto const instances = test::two_instances<exec_type>();
  exec_type const& writer = instances[0];  // writes the sources, not fenced
  exec_type const& side = instances[1];    // the gathers' copies
  std::uint32_t const writer_id = Kokkos::Tools::Experimental::device_id(writer);
  std::uint32_t const side_id = Kokkos::Tools::Experimental::device_id(side);
  // Rows and elements per row: 5 rows split unevenly, 1 row that only
  // rank 0 holds, 7 rows of one element.
  parallel::detail::dp_parts const parts({{5, 3}, {1, 4}, {7, 1}}, n);
  auto const value = [](std::size_t m, std::size_t i) { return static_cast<float>(100 * m + i); };
  // Two gathers in flight at once (a unit and the next one's prefetch), finished in order.
  std::vector<std::unique_ptr<gather>> gathers;
  std::vector<std::vector<flat>> targets(2);
  collective_count const before = mesh.counters()["all_gather"];
  test::recording const recorded;
  for (std::size_t g = 0; g < 2; ++g) {
    std::vector<flat> sources;
    for (std::size_t m = 0; m < parts.members(); ++m) {
      auto const [begin, end] = parts.part(m, me);
      flat source("source", end - begin);
      Kokkos::parallel_for("test::write_source",
                           Kokkos::RangePolicy<exec_type, Kokkos::IndexType<std::size_t>>(writer, begin, end),
                           [=](std::size_t i) { source(i - begin) = value(m, i) + static_cast<float>(g); });
      sources.push_back(source);
      targets[g].emplace_back("target", parts.elements(m));
      Kokkos::deep_copy(targets[g].back(), -1.0F);
    }
    gathers.push_back(std::make_unique<gather>(mesh, group, parts));
    gathers.back()->start(sources, targets[g], side, writer);
    CHECK(gathers.back()->started());
  }
  for (std::size_t g = 0; g < 2; ++g) {
    gathers[g]->finish(side);
    CHECK_FALSE(gathers[g]->started());
    for (std::size_t m = 0; m < parts.members(); ++m)
      for (std::size_t i = 0; i < parts.elements(m); ++i)
        CHECK(targets[g][m](i) == value(m, i) + static_cast<float>(g));
  }
  CHECK(mesh.counters()["all_gather"].calls - before.calls == 2);
  CHECK(workspace_of<host>(mesh).leased_bytes() == 0);
  // The writer fenced before each pack; every other fence of the gathers on the side instance.
  std::size_t writer_fences = 0;
  for (auto const& e : test::recorded_fences) {
    if (e.name.rfind("shardmesh::fused_gather", 0) != 0) continue;
    bool const sources = e.name == "shardmesh::fused_gather: its sources written";
    INFO("fence " << e.name);
    CHECK(e.device == (sources ? writer_id : side_id));
    writer_fences += sources ? 1 : 0;
  }
  CHECK(writer_fences == 2);
}

// Where the host waits to read what the device computed: a reduction into
// a host value or a copy into a host scalar (Kokkos names those fences so),
// or a read of the library's own (its fence's name ends in "read").
bool reads_a_result(std::string const& fence) {
  return fence.starts_with("Kokkos::parallel_reduce: fence") ||
         fence.starts_with("Kokkos::deep_copy: copy into scalar") ||
         fence.starts_with("Kokkos::deep_copy: scalar copy") || fence.ends_with(" read");
}

TEST_CASE("a training step reads from the device once: its loss, counted targets and gradient norm together",
          "[parallel][data_parallel][synchronisation]") {
  auto const dp = static_cast<std::size_t>(test::world_size());
  if (dp < 2) return;
  for (zero_stage stage : {zero_stage::none, zero_stage::gradients, zero_stage::parameters}) {
    INFO("ZeRO-" << static_cast<int>(stage));
    fixture f(dp, 1, 2);
    trainer_type train(f.model, f.mesh, {.stage = stage, .clip_norm = 0.5});
    (void)train.step(f.batch);  // the first step makes what later steps reuse
    std::map<std::string, std::size_t> reads;
    std::vector<std::string> unnamed;
    {
      test::recording const r;
      (void)train.step(f.batch);
      for (auto const& e : test::recorded_fences) {
        if (reads_a_result(e.name)) ++reads[e.name];
        if (e.name.find("Unnamed") != std::string::npos) unnamed.push_back(e.name);
      }
    }
    CHECK(reads == std::map<std::string, std::size_t>{{"shardmesh::step_scalars: the step's one read", 1}});
    CHECK(unnamed.empty());  // every other wait says why
  }
}

TEST_CASE("ZeRO-1 to 3 with their gathers' copies on a side instance train as on one instance",
          "[parallel][data_parallel]") {
  auto const dp = static_cast<std::size_t>(test::world_size());
  if (dp < 2) return;
  auto const instances = test::two_instances<trainer_type::exec_type>();
  for (zero_stage stage : {zero_stage::optimizer_state, zero_stage::gradients, zero_stage::parameters}) {
    INFO("ZeRO-" << static_cast<int>(stage));
    fixture one(dp, 1, 2), two(dp, 1, 2);
    // One reduce-scatter for both: each mesh times MPI's against the ring and
    // keeps the faster, and on 3 ranks or more the two sum in other orders.
    for (device_mesh* m : {&one.mesh, &two.mesh}) m->state<collective_tuning>().prefer(reduce_scatter_algorithm::mpi);
    trainer_type alone(one.model, one.mesh, {.stage = stage}, instances[0]);
    trainer_type beside(two.model, two.mesh, {.stage = stage}, instances[0]);
    beside.communicate_on(instances[1]);
    for (int step = 0; step < 3; ++step)
      CHECK(alone.step(one.batch, instances[0]).loss == beside.step(two.batch, instances[0]).loss);
  }
}

TEST_CASE("the memory ledger's peaks equal each ZeRO stage's formula, uneven shards included",
          "[parallel][data_parallel]") {
  auto const n = static_cast<std::size_t>(test::world_size());
  if (n < 2) return;
  std::vector<std::pair<std::size_t, std::size_t>> meshes{{n, 1}};
  if (n == 4) meshes.emplace_back(2, 2);
  for (auto const& [dp, tp] : meshes)
    for (std::size_t accumulation : {1, 2})
      for (zero_stage stage :
           {zero_stage::none, zero_stage::optimizer_state, zero_stage::gradients, zero_stage::parameters}) {
        auto const s = static_cast<unsigned>(stage);
        INFO("dp=" << dp << " tp=" << tp << " accumulation " << accumulation << " ZeRO-" << s);
        fixture f(dp, tp, accumulation);
        trainer_type train(f.model, f.mesh, {.stage = stage, .bucket_bytes = 1500});
        (void)train.step(f.batch);
        (void)train.step(f.batch);
        shard_sizes const sizes = sizes_of(f);
        auto const bytes = [](std::size_t elements) { return elements * sizeof(float); };
        std::size_t const compute = sum(sizes.compute), sharded = sum(sizes.sharded);
        std::size_t const stored = s >= 3 ? sharded : compute, reduced = s >= 2 ? sharded : compute,
                          state = s >= 1 ? sharded : compute;
        // Each model stage's compute-layout elements: ZeRO-3 holds two adjacent stages gathered at once.
        std::vector<std::size_t> per_stage(f.c.L + 3, 0);
        for (auto const& [name, elements] : sizes.compute) per_stage[f.stage_of(name)] += elements;
        std::size_t gathered = 0;
        for (std::size_t i = 0; i + 1 < per_stage.size(); ++i)
          gathered = std::max(gathered, per_stage[i] + per_stage[i + 1]);
        // Unreduced gradients during the last backward: each stage's appear, each bucket's go when it starts.
        std::size_t unreduced = compute;
        if (accumulation == 1) {
          std::size_t alive = 0;
          unreduced = 0;
          auto const buckets = train.bucket_members();
          for (std::size_t stage_index = per_stage.size(); stage_index-- > 0;) {
            alive += per_stage[stage_index];
            unreduced = std::max(unreduced, alive);
            for (auto const& members : buckets) {
              std::size_t lowest = per_stage.size();
              for (std::string const& name : members) lowest = std::min(lowest, f.stage_of(name));
              if (lowest != stage_index) continue;
              for (std::string const& name : members) alive -= sizes.compute.at(name);
            }
          }
        }
        parallel::memory_report const& r = train.memory();
        using enum memory_category;
        for (char const* phase : {"forward", "backward"})
          CHECK(r[phase].peak_of(parameters) == bytes(stored + (s >= 3 ? gathered : 0)));
        CHECK(r["backward"].peak_of(gradients) == bytes(unreduced));
        CHECK(r["reduction"].peak_of(gradients) == bytes(reduced));
        CHECK(r["update"].peak_of(parameters) == bytes(stored));
        CHECK(r["update"].peak_of(gradients) == bytes(reduced));
        CHECK(r["update"].end_of(gradients) == 0);
        CHECK(r["update"].peak_of(optimizer_state) == bytes(2 * state));
        CHECK(r["update"].end_of(optimizer_state) == bytes(2 * state));
        CHECK(r["update"].end_of(parameters) == bytes(stored));
      }
}

}  // namespace data_parallel_test
