// 3-D training (dp x pp x tp) against the serial reference: pipelines of 2
// and 4 stages with every schedule (GPipe, 1F1B, interleaved with 2 chunks
// per stage, ZB-H1), data and tensor parallelism inside the stages where
// the rank count allows, ZeRO stages 0 to 3, several micro-batches (more
// and fewer than the stages), even and uneven layer counts. After three
// AdamW steps with clipping, each rank's parameters, and every step's loss
// and gradient norm, equal the reference within training_reference.hpp's
// tolerance. Bad partitions and schedules are refused alike on every rank.
#include "mpi_test.hpp"
#include "training_reference.hpp"

#include <shardmesh/models/gpt.hpp>
#include <shardmesh/shardmesh.hpp>
#include <shardmesh/strategy/layer_partition.hpp>
#include <shardmesh/train/trainer.hpp>

#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <deque>
#include <map>
#include <optional>
#include <string>
#include <vector>

// Inside a namespace of its own: bundled with other test files into one translation unit.
namespace pipeline_test {

using namespace shardmesh;
using namespace shardmesh::test::training;
using shardmesh::test::by_name;
namespace ref = shardmesh::test::reference;
using parallel::schedule_kind;
using parallel::zero_stage;

namespace {

using model = parallel::gpt<float, host>;
using trainer_type = parallel::trainer<model>;

using setup = pipeline_setup;

constexpr std::size_t layers = 8;

ref::config config_for(std::size_t global) {
  ref::config c = tiny(global);
  c.L = layers;
  return c;
}

parallel::gpt_config gpt_config_of(ref::config const& c) { return {c.V, c.T, c.C, c.H, c.D, c.F, c.L, c.eps, false}; }

// The stage's chunks (std::deque: trainers keep pointers to them).
std::deque<model> make_chunks(device_mesh const& stage, std::size_t pp, std::size_t s, setup const& su,
                              ref::config const& c, values const& start) {
  std::size_t const v = su.chunks;
  auto const parts = su.layer_counts.empty() ? parallel::partition_layers(c.L, pp * v)
                                             : parallel::partition_layers(c.L, su.layer_counts);
  std::deque<model> chunks;
  for (std::size_t k = 0; k < v; ++k)
    chunks.emplace_back(
        stage, gpt_config_of(c), [&](std::string const& name) { return start.at(name); }, parts[k * pp + s]);
  return chunks;
}

std::vector<model*> pointers(std::deque<model>& chunks) {
  std::vector<model*> out;
  for (model& m : chunks) out.push_back(&m);
  return out;
}

// What a run leaves besides its history: how many parameters all the stages
// hold, and the bytes of parameters the ledger counted on this rank after the update.
struct run_facts {
  std::size_t held = 0, parameter_bytes = 0;
};

// The parameters this rank's stage holds after training, and the losses and norms of each step.
history train(setup const& su, values const& start, std::size_t global, run_facts* facts = nullptr) {
  ref::config const c = config_for(global);
  device_mesh const mesh(MPI_COMM_WORLD, mesh_shape{{"dp", su.dp}, {"pp", su.pp}, {"tp", su.tp}});
  device_mesh const stage = mesh.submesh({"dp", "tp"});
  std::size_t const s = mesh.coordinates()[1];
  std::deque<model> chunks = make_chunks(stage, su.pp, s, su, c, start);
  parallel::adamw const method{.lr = 1e-2, .beta1 = 0.9, .beta2 = 0.99, .eps = 1e-4, .weight_decay = 0.1};
  trainer_type train(
      pointers(chunks), mesh,
      {.stage = su.stage, .method = method, .clip_norm = clip, .bucket_bytes = 1024, .schedule = su.schedule});
  auto const accounting = parallel::batch_accounting::uneven(global, su.micro_batches, su.dp);
  history h;
  for (std::size_t step = 0; step < steps; ++step) {
    batch const b = batch_of_step(c, step, false);
    std::vector<trainer_type::micro_batch> micro;
    for (std::size_t a = 0; a < su.micro_batches; ++a) {
      interval const samples = accounting.micro_step(a);
      micro.push_back({rows(stage, chunks.front().layouts().ids, b.tokens, samples, c.T),
                       rows(stage, chunks.front().layouts().ids, b.targets, samples, c.T)});
    }
    auto const r = train.step(micro);
    h.losses.push_back(r.loss);
    h.norms.push_back(r.grad_norm);
  }
  for (model& chunk : chunks)
    chunk.for_each_parameter([&](std::string const& name, auto& p) {
      auto const g = gather(p.stored());
      h.parameters[name].assign(g.data(), g.data() + g.size());
    });
  if (facts) {
    Kokkos::View<double*, Kokkos::HostSpace> n("parameters", 1);
    n(0) = static_cast<double>(h.parameters.size());
    all_reduce(mesh.group(axis_set::of(1)), n, reduce_op::sum, Kokkos::DefaultHostExecutionSpace{});
    facts->held = static_cast<std::size_t>(n(0));
    facts->parameter_bytes = train.memory().phases[3].end_of(memory_category::parameters);
  }
  return h;
}

// The reference's history with only the parameters `got` has: a stage holds some.
history restricted(history const& want, history const& got) {
  history out{{}, want.losses, want.norms};
  for (auto const& [name, v] : got.parameters)
    if (want.parameters.contains(name)) out.parameters[name] = want.parameters.at(name);
  return out;
}

// The (dp, pp, tp) meshes of the world's ranks with pp in {2, 4}.
std::vector<std::array<std::size_t, 3>> meshes() {
  auto const n = static_cast<std::size_t>(test::world_size());
  std::vector<std::array<std::size_t, 3>> out;
  for (std::size_t pp : {2, 4})
    for (std::size_t tp : {1, 2})
      if (n % (pp * tp) == 0) out.push_back({n / (pp * tp), pp, tp});
  return out;
}

}  // namespace

TEST_CASE("3-D training with every schedule equals serial AdamW with clipping", "[parallel][pipeline]") {
  std::map<std::size_t, history> references;  // by global batch
  std::size_t runs = 0;
  for (auto const& [dp, pp, tp] : meshes())
    for (schedule_kind kind :
         {schedule_kind::gpipe, schedule_kind::one_f_one_b, schedule_kind::interleaved, schedule_kind::zero_bubble})
      for (zero_stage stage : {zero_stage::none, zero_stage::parameters}) {
        std::size_t const v = kind == schedule_kind::interleaved ? 2 : 1;
        if (pp * v > layers) continue;
        // m = p + 1 (uneven rounds) and m = p - 1 (fewer micro-batches than stages); interleaving: m = p.
        for (std::size_t m : kind == schedule_kind::interleaved ? std::vector<std::size_t>{pp}
                                                                : std::vector<std::size_t>{pp + 1, pp - 1}) {
          std::size_t const global = 2 * m * dp;
          ref::config const c = config_for(global);
          values const start = by_name(c, ref::init_parameters(c, 5));
          if (!references.contains(global))
            references.emplace(
                global,
                train_reference(
                    c, start,
                    parallel::adamw{.lr = 1e-2, .beta1 = 0.9, .beta2 = 0.99, .eps = 1e-4, .weight_decay = 0.1}));
          setup const s{dp, pp, tp, kind, v, stage, m, {}};
          INFO(describe(s));
          run_facts facts;
          history const h = train(s, start, global, &facts);
          require_close(h, restricted(references.at(global), h), tolerance);
          CHECK(facts.held == references.at(global).parameters.size());  // every parameter on exactly one stage
          ++runs;
        }
      }
  CHECK(runs > 0);
}

TEST_CASE("pipelines with ZeRO 1 and 2, uneven layer counts and uneven batches equal serial training",
          "[parallel][pipeline]") {
  auto const [dp, pp, tp] = meshes().front();
  parallel::adamw const method{.lr = 1e-2, .beta1 = 0.9, .beta2 = 0.99, .eps = 1e-4, .weight_decay = 0.1};
  std::size_t const global = 2 * 3 * dp;
  ref::config const c = config_for(global);
  values const start = by_name(c, ref::init_parameters(c, 7));
  history const want = train_reference(c, start, method);
  std::vector<std::size_t> uneven(pp, 1);
  uneven.back() += layers - pp;  // the last stage, with the head, holds the rest
  for (zero_stage stage : {zero_stage::optimizer_state, zero_stage::gradients})
    for (auto const& counts : {std::vector<std::size_t>{}, uneven}) {
      setup const s{dp, pp, tp, schedule_kind::one_f_one_b, 1, stage, 3, counts};
      INFO(describe(s));
      history const h = train(s, start, global);
      require_close(h, restricted(want, h), tolerance);
    }
  // 7 samples in 3 micro-batches: 3, 2, 2, each split over the replicas by the batch layout.
  std::size_t const odd = 7;
  ref::config const co = config_for(odd);
  values const start_odd = by_name(co, ref::init_parameters(co, 8));
  history const want_odd = train_reference(co, start_odd, method);
  setup const s{dp, pp, tp, schedule_kind::zero_bubble, 1, zero_stage::parameters, 3, {}};
  INFO(describe(s) << ", 7 samples");
  history const h = train(s, start_odd, odd);
  require_close(h, restricted(want_odd, h), tolerance);
}

TEST_CASE("the first and last stages' ledgers hold the embedding and the head besides their blocks",
          "[parallel][pipeline]") {
  for (auto const& [dp, pp, tp] : meshes()) {
    if (tp != 1) continue;  // replicated parameters: a stage holds its parameters' global elements
    std::size_t const global = 2 * pp * dp;
    ref::config const c = config_for(global);
    values const start = by_name(c, ref::init_parameters(c, 5));
    setup const s{dp, pp, tp, schedule_kind::one_f_one_b, 1, zero_stage::none, pp, {}};
    INFO(describe(s));
    run_facts facts;
    history const h = train(s, start, global, &facts);
    // The stage's parameters by the model's declared shapes: its blocks, and the embedding or the head.
    std::size_t const stage = static_cast<std::size_t>(test::world_rank()) / tp % pp;
    parallel::model_part const part = parallel::partition_layers(c.L, pp)[stage];
    std::size_t elements = 0;
    for (parallel::parameter_spec const& p : parallel::gpt_parameters(gpt_config_of(c))) {
      std::string const& name = p.name;
      bool const block = name.starts_with("h") && name != "h";
      std::size_t const layer = block ? std::stoul(name.substr(1, name.find('.') - 1)) : 0;
      bool const held = block ? layer >= part.first && layer < part.last
                              : (name.starts_with("w") && name.size() == 3 ? part.embedding : part.head);
      if (!held) continue;
      CHECK(h.parameters.contains(name));
      elements += p.elements();
    }
    CHECK(facts.parameter_bytes == elements * sizeof(float));
  }
}

TEST_CASE("bad pipelines are refused with the same error on every rank", "[parallel][pipeline]") {
  CHECK_THROWS_WITH(parallel::partition_layers(4, std::vector<std::size_t>{2, 0, 2}),
                    "pipeline: chunk 1 has no layers");
  CHECK_THROWS_WITH(parallel::partition_layers(4, std::vector<std::size_t>{2, 1}),
                    "pipeline: the layer counts place 3 layers, the model has 4 (every layer exactly once)");
  CHECK_THROWS_WITH(parallel::partition_layers(2, 4),
                    "pipeline: 4 chunks cannot each hold a layer of 2 (a stage with no layers)");
  // Balanced by cost: a heavy head leaves the last chunk fewer blocks; every block placed once.
  auto const parts = parallel::partition_layers(7, 3, {{}, 0.0, 2.0});  // the only best: 3, 3, 1 (+2)
  CHECK(parts[0] == parallel::model_part{0, 3, true, false});
  CHECK(parts[1] == parallel::model_part{3, 6, false, false});
  CHECK(parts[2] == parallel::model_part{6, 7, false, true});
  // Blocks of their own costs: the heavy one gets a chunk to itself.
  auto const uneven = parallel::partition_layers(4, 2, {{5, 1, 1, 1}, 0, 0});
  CHECK(uneven[0] == parallel::model_part{0, 1, true, false});
  CHECK_THROWS_WITH(parallel::partition_layers(4, 2, {{1, 1}, 0, 0}), "pipeline: 2 block costs for 4 layers");

  auto const [dp, pp, tp] = meshes().front();
  ref::config const c = config_for(2 * dp);
  values const start = by_name(c, ref::init_parameters(c, 5));
  device_mesh const mesh(MPI_COMM_WORLD, mesh_shape{{"dp", dp}, {"pp", pp}, {"tp", tp}});
  device_mesh const stage = mesh.submesh({"dp", "tp"});
  std::size_t const s = mesh.coordinates()[1];
  auto const source = [&](std::string const& name) { return start.at(name); };
  // A stage with no layers: chunks that skip layer 1 on the second stage.
  {
    std::deque<model> chunks;
    parallel::model_part part{s == 0 ? 0U : 2U, s == 0 ? 1U : 2U + s, s == 0, s + 1 == pp};
    if (s > 0) part.first = part.last;  // no layers on every stage but the first
    chunks.emplace_back(stage, gpt_config_of(c), source, part);
    CHECK_THROWS_WITH(trainer_type(pointers(chunks), mesh, {}), "pipeline: chunk 0 of stage 1 has no layers");
  }
  // The head on a stage that is not the last.
  {
    auto const parts4 = parallel::partition_layers(layers, pp);
    parallel::model_part part = parts4[s];
    part.head = true;
    std::deque<model> chunks;
    chunks.emplace_back(stage, gpt_config_of(c), source, part);
    CHECK_THROWS_WITH(trainer_type(pointers(chunks), mesh, {}),
                      "pipeline: rank 0 (stage 0), chunk 0: the embedding belongs to the first chunk, the head to the "
                      "last");
  }
  // Interleaving needs whole rounds of p micro-batches per chunk.
  if (pp * 2 <= layers) {
    auto const parts8 = parallel::partition_layers(layers, pp * 2);
    std::deque<model> chunks;
    for (std::size_t k = 0; k < 2; ++k) chunks.emplace_back(stage, gpt_config_of(c), source, parts8[k * pp + s]);
    trainer_type train(pointers(chunks), mesh, {.schedule = schedule_kind::interleaved});
    auto const ids = rows(stage, chunks.front().layouts().ids, batch_of_step(c, 0, false).tokens, {0, 2 * dp}, c.T);
    std::vector<trainer_type::micro_batch> const micro(pp + 1, {ids, ids});
    CHECK_THROWS_AS(train.step(micro), invalid_option_error);
  }
}

}  // namespace pipeline_test
