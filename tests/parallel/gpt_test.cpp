// The tensor-parallel GPT against the serial double-precision reference:
// loss, logits and every parameter gradient, with and without sequence
// parallelism, on tp = the number of ranks (1 to 4; the vocabulary of 50,
// 3 heads and an MLP of 18 split unevenly). Each layer's collectives are
// counted against the ones its layouts imply.
//
// Tolerance (float32 against double): every value is a short chain of sums
// of at most ~50 products of O(1) numbers, each rounded to float (relative
// error 6e-8), through 2 blocks forward and backward; the worst-case
// accumulation is ~1e-4 of the largest value of the tensor compared, far
// above the ~1e-6 seen in practice, and far below any real error (a
// missing reduction or a wrong shard changes values by O(their size)).
// Runs on different tp degrees are each within this of the same reference,
// hence within twice it of each other.
#include "mpi_test.hpp"
#include "small_gpt.hpp"
#include "training_reference.hpp"

#include <shardmesh/models/gpt.hpp>
#include <shardmesh/shardmesh.hpp>

#include <catch2/catch_test_macros.hpp>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

// Inside a namespace of its own: bundled with other test files into one translation unit.
namespace gpt_test {

using namespace shardmesh;
namespace ref = shardmesh::test::reference;

namespace {

using host = Kokkos::HostSpace;
constexpr double tolerance = 1e-4;

parallel::gpt_config config_of(ref::config const& c, bool sequence_parallel) {
  return {c.V, c.T, c.C, c.H, c.D, c.F, c.L, c.eps, sequence_parallel};
}

dynamic_dtensor<int, 2, host> ids(device_mesh const& mesh, layout const& l, ref::config const& c,
                                  std::vector<int> const& values) {
  return test::training::rows(mesh, l, values, {0, c.B}, c.T);
}

void require_close(std::string const& what, std::vector<double> const& got, std::vector<double> const& want) {
  test::training::require_close_to_scale(what, got, want, tolerance);
}

struct run {
  double loss;
  std::vector<double> logits;
  std::map<std::string, std::vector<double>> gradients;
};

run train_step(device_mesh const& mesh, ref::config const& c, bool sequence_parallel,
               std::map<std::string, std::vector<double>> const& values, std::vector<int> const& tokens,
               std::vector<int> const& targets) {
  parallel::gpt<float, host> model(mesh, config_of(c, sequence_parallel),
                                   [&](std::string const& name) { return values.at(name); });
  layout const l = model.layouts().ids;
  auto const f = model.forward(ids(mesh, l, c, tokens), ids(mesh, l, c, targets));
  model.backward();
  run r{f.loss, test::training::gathered(f.logits), {}};
  model.for_each_parameter(
      [&](std::string const& name, auto& p) { r.gradients[name] = test::training::gathered(p.grad()); });
  // The declared shapes are the model's, in its order.
  auto const shapes = parallel::gpt_parameters(config_of(c, sequence_parallel));
  std::size_t i = 0;
  model.for_each_parameter([&](std::string const& name, auto& p) {
    REQUIRE(i < shapes.size());
    CHECK(shapes[i].name == name);
    REQUIRE(shapes[i].extents.size() == p.value().rank);
    for (std::size_t d = 0; d < shapes[i].extents.size(); ++d) CHECK(shapes[i].extents[d] == p.global_extents()[d]);
    ++i;
  });
  CHECK(i == shapes.size());
  return r;
}

}  // namespace

TEST_CASE("the tensor-parallel GPT equals the serial reference: loss, logits, every gradient", "[parallel][gpt]") {
  ref::config const c = test::small_gpt(2, 6);
  ref::parameters const params = ref::init_parameters(c, 7);
  auto const tokens = ref::make_tokens(c, 7, 1);
  auto const targets = ref::make_tokens(c, 7, 2);
  ref::forward_result const want = ref::forward(c, params, tokens, targets);
  ref::gradients const grads = ref::backward(c, params, want, tokens, targets);
  auto const values = test::by_name(c, params);
  auto const want_grads = test::by_name(c, grads);
  device_mesh const mesh(MPI_COMM_WORLD, mesh_shape{{"tp", dynamic_extent}});
  std::vector<run> runs;
  for (bool sp : {false, true}) {
    INFO("tp = " << mesh.size() << (sp ? " with" : " without") << " sequence parallelism");
    run const r = train_step(mesh, c, sp, values, tokens, targets);
    CHECK(std::abs(r.loss - want.loss) <= tolerance * want.loss);
    require_close("logits", r.logits, want.logits);
    REQUIRE(r.gradients.size() == want_grads.size());
    for (auto const& [name, g] : want_grads) require_close(name, r.gradients.at(name), g);
    runs.push_back(r);
  }
  // With and without sequence parallelism: the same step.
  CHECK(std::abs(runs[0].loss - runs[1].loss) <= tolerance * want.loss);
  for (auto const& [name, g] : runs[0].gradients)
    require_close(name + " (sp against not)", runs[1].gradients.at(name), g);
}

}  // namespace gpt_test
