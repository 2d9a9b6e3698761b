// The Llama-style model (RMS norms, rotary embeddings, grouped-query
// attention, SwiGLU, an untied head) against its serial double-precision
// reference (reference_llama.hpp: plain loops, gradients by central
// differences):
// - one step on tp = the number of ranks (1 to 4), with 1, 2 and 4
//   key/value heads for 4 query heads, with and without sequence
//   parallelism: loss, logits and every gradient;
// - training over dp x pp x tp meshes with every ZeRO stage and every
//   pipeline schedule, AdamW with clipping and a warm-up and cosine
//   learning rate: every step's loss and gradient norm and every parameter
//   after three steps;
// - context parallelism (a "cp" axis, the sequence stored in the balanced
//   order): one step on cp alone, dp x cp and cp x tp (with and without
//   sequence parallelism) in the ring and all-to-all forms, loss, logits and
//   every gradient; two micro-batches with the first's state stashed; three
//   steps of training over dp x cp, cp x pp, cp x tp and cp = 4 with ZeRO 0
//   to 3 and selective recomputation; the GPT refusing a cp axis;
// - experts (a mixture of 4 in every other block, top-2, with the
//   load-balancing and z-losses): one step on ep alone, dp x ep, ep x tp
//   (with and without sequence parallelism) and tp = 3 beside ep = 1: loss,
//   auxiliary losses, logits and every gradient of the objective; three
//   AdamW steps over dp x ep, ep x pp (1F1B: micro-batches' routing
//   stashed), ep x tp and ep = 4 with ZeRO 0 to 3 and full recomputation;
// - bad sizes refused with an error naming the field, on every rank;
// - the tests' own residual MLP (residual_mlp.hpp: blocks of MLP widths 6,
//   15, 4 and 11, written with the public API alone) trained likewise
//   through the trainer and pipelines against its serial reference.
// The sizes split unevenly: a vocabulary of 19, 4 heads over 3 ranks, an
// MLP of 10 over 3 or 4, key/value heads fewer than tp (held whole) or
// split with tp. Tolerances: gpt_test.cpp's for one step (the same float
// sums through 2 blocks), training_reference.hpp's for training.
#include "model_training.hpp"
#include "mpi_test.hpp"
#include "reference_models.hpp"
#include "residual_mlp.hpp"
#include "sequence_order.hpp"
#include "training_reference.hpp"

#include <shardmesh/models/gpt.hpp>
#include <shardmesh/models/llama.hpp>
#include <shardmesh/shardmesh.hpp>
#include <shardmesh/strategy/batch.hpp>
#include <shardmesh/strategy/layer_partition.hpp>
#include <shardmesh/train/trainer.hpp>

#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_exception.hpp>

#include <mpi.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <deque>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

// Inside a namespace of its own: bundled with other test files into one translation unit.
namespace models_test {

using namespace shardmesh;
using namespace shardmesh::test::training;
namespace lr = shardmesh::test::llama_reference;
using parallel::schedule_kind;
using parallel::zero_stage;

namespace {

using model = parallel::llama<float, host>;

static_assert(parallel::trainable_model<model>);
static_assert(parallel::trainable_model<test::residual::model<float, host>>);

lr::config small(std::size_t kv_heads, std::size_t batch, std::size_t layers = 2) {
  return {.V = 19, .T = 5, .C = 8, .H = 4, .K = kv_heads, .D = 4, .F = 10, .L = layers, .B = batch};
}

parallel::llama_config config_of(lr::config const& c, bool sequence_parallel = false) {
  parallel::llama_config out{c.V, c.T, c.C, c.H, c.K, c.D, c.F, c.L, c.eps, c.base, sequence_parallel};
  out.experts = {.count = c.E, .every = c.every, .top_k = c.k, .balance = c.balance, .z_loss = c.z};
  return out;
}

// 4 experts in block h1 of 2, top-2, both auxiliary losses weighted to matter.
lr::config with_experts(std::size_t batch) {
  lr::config c = small(2, batch);
  c.E = 4;
  c.balance = 0.1;
  c.z = 0.01;
  return c;
}

dynamic_dtensor<int, 2, host> ids(device_mesh const& mesh, layout const& l, lr::config const& c,
                                  std::vector<int> const& values) {
  return rows(mesh, l, values, {0, c.B}, c.T);
}

// v computed on world rank 0 and sent to every rank (the reference is serial and slow).
values on_every_rank(values v) {
  for (auto& [name, x] : v) {
    auto n = static_cast<unsigned long>(x.size());
    MPI_Bcast(&n, 1, MPI_UNSIGNED_LONG, 0, MPI_COMM_WORLD);
    x.resize(n);
    MPI_Bcast(x.data(), static_cast<int>(n), MPI_DOUBLE, 0, MPI_COMM_WORLD);
  }
  return v;
}

std::vector<double> on_every_rank(std::vector<double> v) { return on_every_rank(values{{"", std::move(v)}}).at(""); }

history on_every_rank(history h) {
  h.parameters = on_every_rank(std::move(h.parameters));
  h.losses = on_every_rank(std::move(h.losses));
  h.norms = on_every_rank(std::move(h.norms));
  return h;
}

}  // namespace

TEST_CASE("the tensor-parallel Llama equals the serial reference: loss, logits, every gradient", "[parallel][llama]") {
  device_mesh const mesh(MPI_COMM_WORLD, mesh_shape{{"tp", dynamic_extent}});
  for (std::size_t kv : {1, 2, 4}) {
    lr::config const c = small(kv, 2);
    values const start = lr::init(c, 3);
    auto const tokens = lr::tokens(c, 3, 1);
    auto const targets = lr::tokens(c, 3, 2);
    bool const root = test::world_rank() == 0;
    lr::forward_result const want = lr::forward(c, start, tokens, targets);
    values const want_grads = on_every_rank(root ? lr::gradients(c, start, tokens, targets) : start);
    for (bool sp : {false, true}) {
      INFO("tp = " << mesh.size() << ", " << kv << " key/value heads" << (sp ? ", sequence parallel" : ""));
      model m(mesh, config_of(c, sp), [&](std::string const& name) { return start.at(name); });
      layout const l = m.layouts().ids;
      auto const f = m.forward(ids(mesh, l, c, tokens), ids(mesh, l, c, targets));
      m.backward();
      CHECK(std::abs(f.loss - want.loss) <= 1e-4 * want.loss);
      require_close_to_scale("logits", gathered(f.logits), want.logits, 1e-4);
      // Every parameter, declared in the reference's order and shape, with its gradient.
      auto const shapes = lr::shapes(c);
      std::size_t i = 0;
      m.for_each_parameter([&](std::string const& name, auto& p) {
        REQUIRE(i < shapes.size());
        CHECK(shapes[i].first == name);
        for (std::size_t d = 0; d < shapes[i].second.size(); ++d) CHECK(shapes[i].second[d] == p.global_extents()[d]);
        require_close_to_scale(name, gathered(p.grad()), want_grads.at(name), 1e-4);
        ++i;
      });
      CHECK(i == shapes.size());
    }
  }
}

TEST_CASE("a context-parallel Llama equals the serial reference in both forms: loss, logits, every gradient",
          "[parallel][llama][context]") {
  // 8 tokens: 2 cp chunks per rank in the balanced order on up to 4 ranks of cp; the ids stored in that order.
  auto const n = static_cast<std::size_t>(test::world_size());
  if (8 % (2 * n) != 0) return;  // 3 and 8 ranks: 8 tokens do not cut into 2 cp chunks
  std::vector<mesh_shape> shapes{mesh_shape{{"cp", n}, {"tp", 1}}};
  if (n == 4) {
    shapes.push_back(mesh_shape{{"dp", 2}, {"cp", 2}, {"tp", 1}});
    shapes.push_back(mesh_shape{{"cp", 2}, {"tp", 2}});
  }
  lr::config c = small(2, 2);
  c.T = 8;
  values const start = lr::init(c, 3);
  auto const tokens = lr::tokens(c, 3, 1);
  auto const targets = lr::tokens(c, 3, 2);
  lr::forward_result const want = lr::forward(c, start, tokens, targets);
  values const want_grads = on_every_rank(test::world_rank() == 0 ? lr::gradients(c, start, tokens, targets) : start);
  for (mesh_shape const& shape : shapes)
    for (context_form form : {context_form::ring, context_form::all_to_all})
      for (bool sp : {false, true}) {
        if (sp && shape.extent(shape.find("tp")) == 1) continue;
        INFO(to_string(shape).view() << ", " << to_string(form) << (sp ? ", sequence parallel" : ""));
        device_mesh const mesh(MPI_COMM_WORLD, shape);
        std::size_t const cp = shape.extent(shape.find("cp"));
        auto const stored = [&](std::vector<int> const& v) {
          return test::reordered(v, c.B, c.T, cp, sequence_order::balanced, true);
        };
        parallel::llama_config config = config_of(c, sp);
        config.context = form;
        model m(mesh, config, [&](std::string const& name) { return start.at(name); });
        layout const l = m.layouts().ids;
        auto const f = m.forward(ids(mesh, l, c, stored(tokens)), ids(mesh, l, c, stored(targets)));
        m.backward();
        CHECK(std::abs(f.loss - want.loss) <= 1e-4 * want.loss);
        require_close_to_scale("logits",
                               test::reordered(gathered(f.logits), c.B, c.T, cp, sequence_order::balanced, false),
                               want.logits, 1e-4);
        m.for_each_parameter([&](std::string const& name, auto& p) {
          require_close_to_scale(name, gathered(p.grad()), want_grads.at(name), 1e-4);
        });
      }
}

TEST_CASE("a context-parallel Llama's gradients over two micro-batches, the first's state stashed, are the batch's",
          "[parallel][llama][context]") {
  auto const n = static_cast<std::size_t>(test::world_size());
  if (8 % (2 * n) != 0) return;  // as above
  lr::config c = small(2, 4);
  c.T = 8;
  values const start = lr::init(c, 3);
  auto const tokens = lr::tokens(c, 3, 1);
  auto const targets = lr::tokens(c, 3, 2);
  values const want = on_every_rank(test::world_rank() == 0 ? lr::gradients(c, start, tokens, targets) : start);
  device_mesh const mesh(MPI_COMM_WORLD, mesh_shape{{"cp", n}, {"tp", 1}});
  for (context_form form : {context_form::ring, context_form::all_to_all})
    for (bool stash : {false, true}) {
      INFO(to_string(form) << (stash ? ", the first micro-batch's state stashed" : ""));
      parallel::llama_config config = config_of(c);
      config.context = form;
      model m(mesh, config, [&](std::string const& name) { return start.at(name); });
      layout const l = m.layouts().ids;
      auto const part = [&](std::vector<int> const& v, std::size_t first) {
        return rows(mesh, l, test::reordered(v, c.B, c.T, n, sequence_order::balanced, true), {first, first + 2}, c.T);
      };
      double const count = static_cast<double>(c.B * c.T);
      (void)m.forward(part(tokens, 0), part(targets, 0), count);
      if (stash) {
        auto saved = m.take_saved();
        (void)m.forward(part(tokens, 2), part(targets, 2), count);
        m.backward();
        m.restore_saved(std::move(saved));
        m.backward();
      } else {
        m.backward();
        (void)m.forward(part(tokens, 2), part(targets, 2), count);
        m.backward();
      }
      m.for_each_parameter([&](std::string const& name, auto& p) {
        require_close_to_scale(name, gathered(p.grad()), want.at(name), 1e-4);
      });
    }
}

TEST_CASE("a Llama with experts equals the serial reference on ep, dp x ep and ep x tp: losses, logits, gradients",
          "[parallel][llama][experts]") {
  auto const n = static_cast<std::size_t>(test::world_size());
  std::vector<mesh_shape> shapes;
  if (4 % n == 0) shapes.push_back(mesh_shape{{"ep", n}, {"tp", 1}});
  if (n == 3) shapes.push_back(mesh_shape{{"ep", 1}, {"tp", 3}});
  if (n == 4) {
    shapes.push_back(mesh_shape{{"dp", 2}, {"ep", 2}, {"tp", 1}});
    shapes.push_back(mesh_shape{{"ep", 2}, {"tp", 2}});
  }
  if (shapes.empty()) return;
  lr::config const c = with_experts(4);
  values const start = lr::init(c, 3);
  auto const tokens = lr::tokens(c, 3, 1);
  auto const targets = lr::tokens(c, 3, 2);
  lr::forward_result const want = lr::forward(c, start, tokens, targets);
  REQUIRE(want.auxiliary > 0.05);  // weighted to matter beside the loss
  values const want_grads = on_every_rank(test::world_rank() == 0 ? lr::gradients(c, start, tokens, targets) : start);
  for (mesh_shape const& shape : shapes)
    for (bool sp : {false, true}) {
      if (sp && shape.extent(shape.find("tp")) == 1) continue;
      INFO(to_string(shape).view() << (sp ? ", sequence parallel" : ""));
      device_mesh const mesh(MPI_COMM_WORLD, shape);
      model m(mesh, config_of(c, sp), [&](std::string const& name) { return start.at(name); });
      layout const l = m.layouts().ids;
      auto const f = m.forward(ids(mesh, l, c, tokens), ids(mesh, l, c, targets));
      CHECK(std::abs(f.loss - want.loss) <= 1e-4 * want.loss);
      CHECK(std::abs(m.auxiliary_loss() - want.auxiliary) <= 1e-4 * want.auxiliary);
      m.backward();
      require_close_to_scale("logits", gathered(f.logits), want.logits, 1e-4);
      auto const declared = lr::shapes(c);
      std::size_t i = 0;
      m.for_each_parameter([&](std::string const& name, auto& p) {
        REQUIRE(i < declared.size());
        CHECK(declared[i++].first == name);
        require_close_to_scale(name, gathered(p.grad()), want_grads.at(name), 1e-4);
      });
      CHECK(i == declared.size());
    }
}

TEST_CASE("the GPT refuses a cp axis: its learned positions are read by index", "[parallel][llama][context]") {
  device_mesh const mesh(MPI_COMM_WORLD, mesh_shape{{"cp", dynamic_extent}, {"tp", 1}});
  parallel::gpt_config const g{
      .vocabulary = 7, .sequence = 8, .hidden = 4, .heads = 2, .head_size = 2, .ffn = 6, .layers = 1};
  parallel::parameter_initializer const constant = [](parallel::parameter_spec const&) {
    return parallel::initializer::constant(0.5);
  };
  using gpt = parallel::gpt<float, host>;
  REQUIRE_THROWS_AS(gpt(mesh, g, constant), invalid_option_error);
}

namespace {

using setup = pipeline_setup;

constexpr std::size_t layers = 4;
// warmup_cosine(2, 4, 0.2): 1/2 and 2/2 while warming up, then 0.2 + 0.8 (1 + cos(pi/2)) / 2 = 0.6.
reference_schedule const factors{{0.5, 1.0, 0.6}, false};
parallel::adamw const method{.lr = 1e-2, .beta1 = 0.9, .beta2 = 0.99, .eps = 1e-4, .weight_decay = 0.1};
run_options const options{.steps = steps, .method = method, .lr_schedule = parallel::warmup_cosine(2, 4, 0.2)};

// Serial AdamW on loss_and_gradients(p, step), on world rank 0, sent to every rank.
history reference(values const& start, std::set<std::string> const& decayed, step_gradients const& loss_and_gradients) {
  history h;
  if (test::world_rank() == 0)
    h = train_serial(start, method, factors, decayed, loss_and_gradients);
  else
    h.parameters = start;
  return on_every_rank(std::move(h));
}

// The names of the parameters of two or more dimensions: those weight decay applies to.
std::set<std::string> matrices(std::vector<std::pair<std::string, std::vector<std::size_t>>> const& shapes) {
  std::set<std::string> out;
  for (auto const& [name, shape] : shapes)
    if (shape.size() >= 2) out.insert(name);
  return out;
}

// The reference's history with only the parameters `got` has: a stage holds some.
history restricted(history const& want, history const& got) {
  history out{{}, want.losses, want.norms};
  for (auto const& [name, v] : got.parameters) out.parameters[name] = want.parameters.at(name);
  return out;
}

// The serial reference's training of c: its start, its batches and its history under serial AdamW.
struct serial_run {
  values start;
  std::function<batch(std::size_t)> batch_of;
  history want;
};
serial_run serial_training(lr::config const& c) {
  serial_run r{lr::init(c, 5),
               [c](std::size_t step) { return batch{lr::tokens(c, 11, 100 + step), lr::tokens(c, 11, 200 + step)}; },
               {}};
  r.want = reference(r.start, matrices(lr::shapes(c)), [&](values const& p, std::size_t step) {
    batch const b = r.batch_of(step);
    return std::pair{lr::forward(c, p, b.tokens, b.targets).loss, lr::gradients(c, p, b.tokens, b.targets)};
  });
  return r;
}

}  // namespace

TEST_CASE("Llama training over dp x pp x tp with every ZeRO stage and schedule equals serial AdamW",
          "[parallel][llama]") {
  // One global batch of 4 samples everywhere (uneven over 4 replicas and 2 micro-batches); 1 and 2 key/value
  // heads in turn (tp = 2: held whole, and split).
  std::vector<setup> const setups = setups_of_world();
  std::map<std::size_t, serial_run> references;  // by key/value heads
  for (std::size_t i = 0; i < setups.size(); ++i) {
    std::size_t const kv = 1 + i % 2;
    lr::config const c = small(kv, 4, layers);
    if (!references.contains(kv)) references.emplace(kv, serial_training(c));
    serial_run const& serial = references.at(kv);
    INFO(describe(setups[i]) << ", " << kv << " key/value heads");
    history const h = train<model>(setups[i], config_of(c), serial.start, c.B, serial.batch_of, options);
    require_close(h, restricted(serial.want, h), tolerance);
  }
}

TEST_CASE("a context-parallel Llama trains over dp x cp x pp x tp, both forms, every ZeRO stage, as serial AdamW",
          "[parallel][llama][context]") {
  // 8 tokens (4 balanced chunks on cp = 2, 8 on cp = 4); the ring and the all-to-all form in turn; selective
  // recomputation once (the core's state made again in backward).
  auto const n = static_cast<std::size_t>(test::world_size());
  std::vector<setup> setups;
  if (n == 2) {
    setups = {{1, 1, 1, schedule_kind::gpipe, 1, zero_stage::none, 2, {}, 2},
              {1, 1, 1, schedule_kind::gpipe, 1, zero_stage::parameters, 1, {}, 2}};
  } else if (n == 4) {
    setups = {{2, 1, 1, schedule_kind::gpipe, 1, zero_stage::optimizer_state, 2, {}, 2},
              {1, 2, 1, schedule_kind::one_f_one_b, 1, zero_stage::gradients, 2, {}, 2},
              {1, 1, 2, schedule_kind::gpipe, 1, zero_stage::parameters, 1, {}, 2},
              {1, 1, 1, schedule_kind::gpipe, 1, zero_stage::none, 2, {}, 4}};
  }
  if (setups.empty()) return;
  lr::config c = small(2, 4);  // 2 layers: one per stage on pp = 2 (the reference's differences take the time)
  c.T = 8;
  serial_run const serial = serial_training(c);
  for (std::size_t i = 0; i < setups.size(); ++i) {
    parallel::llama_config config = config_of(c);
    config.context = i % 2 == 0 ? context_form::ring : context_form::all_to_all;
    if (i == 1) config.recompute = parallel::recompute_mode::selective;
    INFO(describe(setups[i]) << ", " << to_string(config.context));
    history const h = train<model>(setups[i], config, serial.start, c.B, serial.batch_of, options);
    require_close(h, restricted(serial.want, h), tolerance);
  }
}

TEST_CASE("a Llama with experts trains over dp x ep x pp x tp, every ZeRO stage, as serial AdamW",
          "[parallel][llama][experts]") {
  // Two micro-batches, whose auxiliary losses the reference takes apart; full recomputation once (the routing
  // made again in backward).
  auto const n = static_cast<std::size_t>(test::world_size());
  std::vector<setup> setups;
  auto const with_ep = [](setup s, std::size_t ep) {
    s.ep = ep;
    return s;
  };
  if (n == 1) setups = {with_ep({1, 1, 1, schedule_kind::gpipe, 1, zero_stage::none, 2, {}}, 1)};
  if (n == 2)
    setups = {with_ep({1, 1, 1, schedule_kind::gpipe, 1, zero_stage::optimizer_state, 2, {}}, 2),
              with_ep({1, 2, 1, schedule_kind::one_f_one_b, 1, zero_stage::gradients, 2, {}}, 1)};
  if (n == 4)
    setups = {with_ep({2, 1, 1, schedule_kind::gpipe, 1, zero_stage::parameters, 2, {}}, 2),
              with_ep({1, 2, 1, schedule_kind::one_f_one_b, 1, zero_stage::optimizer_state, 2, {}}, 2),
              with_ep({1, 1, 2, schedule_kind::gpipe, 1, zero_stage::gradients, 2, {}}, 2),
              with_ep({1, 1, 1, schedule_kind::gpipe, 1, zero_stage::none, 2, {}}, 4)};
  if (setups.empty()) return;
  lr::config c = with_experts(4);
  c.micro = 2;
  serial_run const serial = serial_training(c);
  for (std::size_t i = 0; i < setups.size(); ++i) {
    parallel::llama_config config = config_of(c);
    if (i == 3) config.recompute = parallel::recompute_mode::full;
    INFO(describe(setups[i]));
    history const h = train<model>(setups[i], config, serial.start, c.B, serial.batch_of, options);
    require_close(h, restricted(serial.want, h), tolerance);
  }
}

TEST_CASE("a model written only in the tests trains through the trainer and pipelines as its serial reference",
          "[parallel][models]") {
  namespace rr = test::residual_reference;
  rr::config const c{.V = 19, .T = 5, .C = 8, .B = 4, .widths = {6, 15, 4, 11}};
  test::residual::config const config{c.V, c.T, c.C, c.widths.size(), c.widths, c.eps, false};
  values const start = lr::init(rr::shapes(c), 9);
  auto const batch_of = [&](std::size_t step) {
    return batch{lr::tokens(c.B * c.T, c.V, 13, 100 + step), lr::tokens(c.B * c.T, c.V, 13, 200 + step)};
  };
  history const want = reference(start, matrices(rr::shapes(c)), [&](values const& p, std::size_t step) {
    batch const b = batch_of(step);
    auto const loss = [&](values const& at) { return rr::forward(c, at, b.tokens, b.targets).loss; };
    return std::pair{loss(p), lr::gradients(p, loss)};
  });
  for (setup const& s : setups_of_world()) {
    INFO(describe(s));
    history const h = train<test::residual::model<float, host>>(s, config, start, c.B, batch_of, options);
    require_close(h, restricted(want, h), tolerance);
  }
}

TEST_CASE("a Llama made shard by shard from initializers holds exactly what one made from their global values holds",
          "[parallel][llama]") {
  lr::config const c = small(2, 2);
  auto const init = [](parallel::parameter_spec const& p) {
    if (p.name.ends_with("_g")) return parallel::initializer::constant(1);
    return parallel::initializer::uniform(0.3, 7, p.name.size() * 1000 + p.extents.size());
  };
  auto const global = [&](std::string const& name) {  // the same values, built whole on the host
    for (auto const& [n, extents] : lr::shapes(c))
      if (n == name) {
        parallel::initializer const i = init({name, extents, {}});
        std::size_t size = 1;
        for (std::size_t e : extents) size *= e;
        std::vector<double> v(size);
        for (std::size_t k = 0; k < size; ++k) v[k] = i(k);
        return v;
      }
    return std::vector<double>{};
  };
  auto const n = static_cast<std::size_t>(test::world_size());
  std::vector<mesh_shape> shapes{mesh_shape{{"tp", n}}};
  if (n % 2 == 0) shapes.push_back(mesh_shape{{"dp", 2}, {"tp", n / 2}});
  for (mesh_shape const& shape : shapes) {
    device_mesh const mesh(MPI_COMM_WORLD, shape);
    model made(mesh, config_of(c), init);
    model given(mesh, config_of(c), global);
    std::map<std::string, std::vector<double>> from_given;
    given.for_each_parameter([&](std::string const& name, auto& p) { from_given[name] = gathered(p.value()); });
    std::size_t compared = 0;
    made.for_each_parameter([&](std::string const& name, auto& p) {
      INFO(name << " on " << to_string(shape).view());
      CHECK(gathered(p.value()) == from_given.at(name));
      ++compared;
    });
    CHECK(compared == from_given.size());
  }
}

TEST_CASE("a Llama of bad sizes is refused with the field named, on every rank, before any work", "[parallel][llama]") {
  device_mesh const mesh(MPI_COMM_WORLD, mesh_shape{{"tp", dynamic_extent}});
  lr::config const c = small(2, 2);
  values const start = lr::init(c, 3);
  auto const fails = [&](parallel::llama_config const& bad, std::string const& why) {
    REQUIRE_THROWS_MATCHES(model(mesh, bad, [&](std::string const& name) { return start.at(name); }),
                           invalid_option_error, Catch::Matchers::Message("model: " + why));
  };
  parallel::llama_config bad = config_of(c);
  bad.kv_heads = 3;
  fails(bad, "kv_heads = 3 does not divide heads = 4");
  bad = config_of(c);
  bad.vocabulary = 0;
  fails(bad, "vocabulary is 0");
  bad = config_of(c);
  bad.head_size = 3;
  fails(bad, "head_size = 3 is odd: rotary embeddings rotate pairs");
  bad = config_of(c);
  bad.kv_heads = 0;
  fails(bad, "kv_heads is 0");
  bad = config_of(c);
  bad.rope_base = 1;
  fails(bad, "rope_base = 1.000000 is not above 1");
  bad = config_of(c);
  bad.experts = {.count = 4, .top_k = 5};
  fails(bad, "experts.top_k = 5: each token goes to 1 or 2 of the 4 experts");
}

TEST_CASE("a Llama with experts is refused on a mesh without ep, or an ep that does not divide them, on every rank",
          "[parallel][llama][experts]") {
  lr::config c = with_experts(2);
  values const start = lr::init(c, 3);
  auto const source = [&](std::string const& name) { return start.at(name); };
  device_mesh const no_ep(MPI_COMM_WORLD, mesh_shape{{"tp", dynamic_extent}});
  REQUIRE_THROWS_AS(model(no_ep, config_of(c), source), invalid_mesh_error);
  if (test::world_size() != 3) return;
  device_mesh const three(MPI_COMM_WORLD, mesh_shape{{"ep", 3}, {"tp", 1}});
  REQUIRE_THROWS_AS(model(three, config_of(c), source), invalid_option_error);
}

}  // namespace models_test
