// Data-parallel training with ZeRO stages 0-3 against a serial reference:
// the reference GPT (double, plain loops) on the whole global batch, with
// its own AdamW and SGD and global-norm clipping written here, against the
// trainer on every dp x tp mesh of the rank count, every stage, with and
// without accumulation, even and uneven batches (10 samples: some replicas
// take none in some micro-steps).
// The tolerance and why: training_reference.hpp.
#include "mpi_test.hpp"
#include "training_reference.hpp"

#include <shardmesh/models/gpt.hpp>
#include <shardmesh/shardmesh.hpp>
#include <shardmesh/strategy/batch.hpp>
#include <shardmesh/train/trainer.hpp>

#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_exception.hpp>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <string>
#include <variant>
#include <vector>

// Inside a namespace of its own: bundled with other test files into one translation unit.
namespace training_test {

using namespace shardmesh;
using namespace shardmesh::test::training;
using shardmesh::test::by_name;
namespace ref = shardmesh::test::reference;
using parallel::zero_stage;

static_assert(parallel::trainable_model<parallel::gpt<float, Kokkos::HostSpace>>);

namespace {

struct setup {
  std::size_t dp, tp;
  zero_stage stage;
  std::size_t accumulation;
  std::size_t global;
};

std::string describe(setup const& s) {
  return "dp=" + std::to_string(s.dp) + " tp=" + std::to_string(s.tp) + " ZeRO-" +
         std::to_string(static_cast<int>(s.stage)) + " accumulation " + std::to_string(s.accumulation) + ", " +
         std::to_string(s.global) + " samples";
}

history train(setup const& s, values const& start, parallel::optimizer const& method, bool padded = false,
              parallel::learning_rate_schedule const& lr_schedule = {},
              std::function<bool(std::string const&, std::size_t)> const& decays = {}) {
  ref::config const c = tiny(s.global);
  device_mesh const mesh(MPI_COMM_WORLD, mesh_shape{{"dp", s.dp}, {"tp", s.tp}});
  // Both reduce-scatter algorithms, whatever this machine would choose: the ring for ZeRO-2, MPI's for ZeRO-3.
  mesh.state<collective_tuning>().prefer(s.stage == zero_stage::gradients ? reduce_scatter_algorithm::ring
                                                                          : reduce_scatter_algorithm::mpi);
  parallel::gpt<float, host> model(mesh, {c.V, c.T, c.C, c.H, c.D, c.F, c.L, c.eps, false},
                                   [&](std::string const& name) { return start.at(name); });
  parallel::trainer train(model, mesh,
                          {.stage = s.stage,
                           .method = method,
                           .lr_schedule = lr_schedule,
                           .decays = decays,
                           .clip_norm = clip,
                           .bucket_bytes = 1024});
  auto const accounting = parallel::batch_accounting::uneven(s.global, s.accumulation, s.dp);
  history h;
  for (std::size_t step = 0; step < steps; ++step) {
    batch const b = batch_of_step(c, step, padded);
    std::vector<decltype(train)::micro_batch> micro;
    for (std::size_t a = 0; a < s.accumulation; ++a) {
      interval const samples = accounting.micro_step(a);
      micro.push_back({rows(mesh, model.layouts().ids, b.tokens, samples, c.T),
                       rows(mesh, model.layouts().ids, b.targets, samples, c.T)});
    }
    auto const r = train.step(micro);
    h.losses.push_back(r.loss);
    h.norms.push_back(r.grad_norm);
  }
  model.for_each_parameter([&](std::string const& name, auto& p) {
    auto const g = gather(p.stored());
    h.parameters[name].assign(g.data(), g.data() + g.size());
  });
  return h;
}

// The dp x tp meshes of the world's ranks, dp in 1..4 and tp in 1..2.
std::vector<std::pair<std::size_t, std::size_t>> meshes() {
  auto const n = static_cast<std::size_t>(test::world_size());
  std::vector<std::pair<std::size_t, std::size_t>> out;
  for (std::size_t tp : {1, 2})
    if (n % tp == 0 && n / tp <= 4) out.emplace_back(n / tp, tp);
  return out;
}

}  // namespace

TEST_CASE("data-parallel training with every ZeRO stage equals serial AdamW with clipping", "[parallel][training]") {
  parallel::adamw const method{.lr = 1e-2, .beta1 = 0.9, .beta2 = 0.99, .eps = 1e-4, .weight_decay = 0.1};
  std::map<std::size_t, history> references;  // by global batch
  std::vector<history> runs;
  for (auto const& [dp, tp] : meshes())
    for (std::size_t accumulation : {1, 3})
      for (bool even : {true, false}) {
        std::size_t const global = even ? 2 * accumulation * dp : 10;
        ref::config const c = tiny(global);
        values const start = by_name(c, ref::init_parameters(c, 5));
        if (!references.contains(global)) references.emplace(global, train_reference(c, start, method));
        for (zero_stage stage :
             {zero_stage::none, zero_stage::optimizer_state, zero_stage::gradients, zero_stage::parameters}) {
          setup const s{dp, tp, stage, accumulation, global};
          INFO(describe(s));
          history const h = train(s, start, method);
          require_close(h, references.at(global), tolerance);
          if (!even) runs.push_back(h);
        }
      }
  // The same 10-sample run under every configuration: within twice the tolerance of each other.
  for (history const& h : runs) require_close(h, runs.front(), 2 * tolerance);
}

TEST_CASE("padded sequences: the loss averages over the targets that are not padding, however split",
          "[parallel][training]") {
  parallel::adamw const method{.lr = 1e-2, .beta1 = 0.9, .beta2 = 0.99, .eps = 1e-4, .weight_decay = 0.1};
  std::size_t const global = 10;
  ref::config const c = tiny(global);
  values const start = by_name(c, ref::init_parameters(c, 6));
  history const want = train_reference(c, start, method, true);
  for (auto const& [dp, tp] : meshes())
    for (std::size_t accumulation : {1, 3})
      for (zero_stage stage : {zero_stage::none, zero_stage::parameters}) {
        setup const s{dp, tp, stage, accumulation, global};
        INFO(describe(s));
        require_close(train(s, start, method, true), want, tolerance);
      }
}

TEST_CASE("SGD with momentum and weight decay on sharded state equals the serial reference", "[parallel][training]") {
  parallel::sgd const method{.lr = 0.05, .momentum = 0.9, .weight_decay = 0.01};
  auto const [dp, tp] = meshes().front();
  std::size_t const global = 2 * dp;
  ref::config const c = tiny(global);
  values const start = by_name(c, ref::init_parameters(c, 9));
  history const want = train_reference(c, start, method);
  for (zero_stage stage : {zero_stage::none, zero_stage::optimizer_state, zero_stage::parameters}) {
    setup const s{dp, tp, stage, 1, global};
    INFO(describe(s));
    require_close(train(s, start, method), want, tolerance);
  }
}

TEST_CASE("a user's own update rule trains on sharded state equal to the serial reference", "[parallel][training]") {
  // Adagrad (training_reference.hpp), with an eps large enough that its step is smooth in the gradient: its
  // sensitivity lr/eps = 1 keeps float rounding of the gradients (~1e-9) far below the tolerance.
  adagrad const method{.lr = 1e-2, .eps = 1e-2, .weight_decay = 0.1};
  static_assert(parallel::update_rule<adagrad>);
  auto const [dp, tp] = meshes().front();
  std::size_t const global = 2 * dp;
  ref::config const c = tiny(global);
  values const start = by_name(c, ref::init_parameters(c, 4));
  history const want = train_reference(c, start, method, false, {{0.5, 1.0, 0.6}, false});
  for (zero_stage stage : {zero_stage::none, zero_stage::gradients, zero_stage::parameters}) {
    setup const s{dp, tp, stage, 1, global};
    INFO(describe(s));
    require_close(train(s, start, method, false, parallel::warmup_cosine(2, 4, 0.2)), want, tolerance);
  }
  parallel::optimizer const held = method;
  CHECK(held.state_tensors() == 1);
  REQUIRE(held.target<adagrad>() != nullptr);
  CHECK(held.target<adagrad>()->eps == method.eps);
  CHECK(held.target<parallel::adamw>() == nullptr);
  CHECK(held.adjusted(0.5, false).target<adagrad>()->lr == method.lr * 0.5);
  CHECK(held.adjusted(0.5, false).target<adagrad>()->weight_decay == 0);
}

TEST_CASE("bad training input is the same typed error on every rank", "[parallel][training]") {
  CHECK_THROWS_AS(parallel::batch_accounting(30, 4, 2, 4), invalid_batch_error);
  CHECK_THROWS_AS(parallel::batch_accounting(0, 2, 4), invalid_batch_error);
  CHECK_THROWS_AS(parallel::batch_accounting::uneven(2, 3, 4), invalid_batch_error);
  CHECK_THROWS_AS(parallel::to_zero_stage(4), invalid_option_error);
  CHECK_THROWS_AS(parallel::to_zero_stage(-1), invalid_option_error);
  ref::config const c = tiny(2);
  values const start = by_name(c, ref::init_parameters(c, 5));
  device_mesh const mesh(MPI_COMM_WORLD, mesh_shape{{"dp", dynamic_extent}, {"tp", 1}});
  parallel::gpt<float, host> model(mesh, {c.V, c.T, c.C, c.H, c.D, c.F, c.L, c.eps, false},
                                   [&](std::string const& name) { return start.at(name); });
  using options = parallel::training_options;
  auto const fails = [&](options const& o) {
    CHECK_THROWS_AS(parallel::trainer(model, mesh, o), invalid_option_error);
  };
  fails({.bucket_bytes = 0});
  fails({.clip_norm = -1});
  fails({.method = parallel::adamw{.lr = 0}});
  fails({.method = parallel::adamw{.beta2 = 1}});
  fails({.method = parallel::sgd{.momentum = 1.5}});
  fails({.method = adagrad{.lr = -1}});
  parallel::trainer train(model, mesh, {});
  CHECK_THROWS_AS(train.step({}), invalid_batch_error);
  // A step whose targets are all padding has nothing to average over.
  Kokkos::View<int**, Kokkos::LayoutRight, host> padding("targets", 2, c.T);
  Kokkos::deep_copy(padding, -1);
  auto const ids = distribute<host>(mesh, model.layouts().ids, padding);
  std::vector<decltype(train)::micro_batch> const all_padding{{ids, ids}};
  CHECK_THROWS_AS(train.step(all_padding), invalid_batch_error);
}

TEST_CASE("a warm-up and cosine learning rate, and weight decay on matrices only, equal the serial reference",
          "[parallel][training]") {
  // warmup_cosine(2, 4, 0.2): 1/2 and 2/2 while warming up, then 0.2 + 0.8 (1 + cos(pi/2)) / 2 = 0.6.
  auto const schedule = parallel::warmup_cosine(2, 4, 0.2);
  reference_schedule const factors{{0.5, 1.0, 0.6}, false};
  auto const [dp, tp] = meshes().front();
  std::size_t const global = 2 * dp;
  ref::config const c = tiny(global);
  values const start = by_name(c, ref::init_parameters(c, 7));
  for (parallel::optimizer const& method :
       {parallel::optimizer{parallel::adamw{.lr = 1e-2, .beta1 = 0.9, .beta2 = 0.99, .eps = 1e-4, .weight_decay = 0.5}},
        parallel::optimizer{parallel::sgd{.lr = 0.05, .momentum = 0.9, .weight_decay = 0.2}}}) {
    history const want = train_reference(c, start, method, false, factors);
    for (zero_stage stage : {zero_stage::none, zero_stage::parameters}) {
      setup const s{dp, tp, stage, 1, global};
      INFO(describe(s) << (method.target<parallel::sgd>() ? ", SGD" : ", AdamW"));
      require_close(train(s, start, method, false, schedule), want, tolerance);
    }
  }
  // Told to decay every parameter, norms' gains and biases too.
  parallel::optimizer const method =
      parallel::adamw{.lr = 1e-2, .beta1 = 0.9, .beta2 = 0.99, .eps = 1e-4, .weight_decay = 0.5};
  history const want = train_reference(c, start, method, false, {{1, 1, 1}, true});
  auto const every = [](std::string const&, std::size_t) { return true; };
  require_close(train({dp, tp, zero_stage::optimizer_state, 1, global}, start, method, false, {}, every), want,
                tolerance);
}

TEST_CASE("a learning-rate schedule that gives no usable factor is refused on every rank", "[parallel][training]") {
  auto const [dp, tp] = meshes().front();
  ref::config const c = tiny(2 * dp);
  values const start = by_name(c, ref::init_parameters(c, 7));
  auto const negative = [](std::size_t t) { return t == 2 ? -1.0 : 1.0; };
  REQUIRE_THROWS_MATCHES(train({dp, tp, zero_stage::none, 1, 2 * dp}, start, parallel::adamw{}, false, negative),
                         invalid_option_error,
                         Catch::Matchers::Message("training: the learning-rate schedule gives -1.000000 at update 2, "
                                                  "not a finite factor of at least 0"));
}

}  // namespace training_test
