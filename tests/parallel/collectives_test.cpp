// Each stage of the tensor-parallel GPT issues exactly the collectives its
// layouts imply (Megatron-LM's, read off the rules), counted per stage
// through the model's trace hook: kinds, counts and, for the all-reduces,
// their payloads. Nothing else communicates.
#include "mpi_test.hpp"
#include "reference_gpt.hpp"

#include <shardmesh/models/gpt.hpp>
#include <shardmesh/shardmesh.hpp>

#include <catch2/catch_test_macros.hpp>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

// Inside a namespace of its own: bundled with other test files into one translation unit.
namespace collectives_test {

using namespace shardmesh;
namespace ref = shardmesh::test::reference;

namespace {

using host = Kokkos::HostSpace;

struct expected {
  std::map<std::string, std::uint64_t> calls;  // by collective; absent kinds: none
  std::vector<std::size_t> all_reduce_sizes;   // elements of each all-reduce, if checked
};

// What each stage and phase issues with tp > 1.
std::map<std::string, expected> megatron(bool sp, std::size_t rows, std::size_t hidden) {
  std::size_t const act = rows * hidden;
  if (!sp)
    return {
        {"embedding forward", {{{"all_reduce", 1}}, {act}}},          // the vocabulary-parallel lookup, P(sum:tp)
        {"h0 forward", {{{"all_reduce", 2}}, {act, act}}},            // row-parallel outputs of attention and MLP
        {"head forward", {}},                                         // column-parallel: logits stay sharded
        {"loss forward", {{{"all_reduce", 3}}, {rows, rows, rows}}},  // max, sum of exponentials, target logit
        {"loss backward", {}},
        {"head backward", {{{"all_reduce", 1}}, {act}}},  // the head's input gradient
        {"h0 backward", {{{"all_reduce", 2}}, {act, act}}},
        {"embedding backward", {}},
    };
  return {
      {"embedding forward", {{{"reduce_scatter", 1}}, {}}},
      {"h0 forward", {{{"all_gather", 2}, {"reduce_scatter", 2}}, {}}},
      {"head forward", {{{"all_gather", 1}}, {}}},
      {"loss forward", {{{"all_reduce", 3}}, {rows, rows, rows}}},
      {"loss backward", {}},
      // dY gathered back (transpose of the reduce-scatter), dX reduce-scattered,
      // the layer norms' gain and bias gradients summed over the sequence shards.
      {"head backward", {{{"reduce_scatter", 1}, {"all_reduce", 2}}, {hidden, hidden}}},
      {"h0 backward", {{{"all_gather", 2}, {"reduce_scatter", 2}, {"all_reduce", 4}}, {}}},
      // wpe's gradient gathered from the sequence shards; wte's: dX gathered (cheaper than the table).
      {"embedding backward", {{{"all_gather", 2}}, {}}},
  };
}

}  // namespace

TEST_CASE("every stage issues exactly the collectives its layouts imply", "[parallel][gpt][counters]") {
  ref::config c;
  c.V = 50, c.T = 6, c.C = 10, c.H = 3, c.D = 4, c.F = 18, c.L = 1, c.B = 2;
  ref::parameters const params = ref::init_parameters(c, 3);
  std::map<std::string, std::vector<double>> values;
  ref::for_each_parameter(c, params, [&](std::string const& name, auto const& v, auto const&) { values[name] = v; });
  auto const tokens = ref::make_tokens(c, 3, 1);
  device_mesh const mesh(MPI_COMM_WORLD, mesh_shape{{"tp", dynamic_extent}});
  std::size_t const tp = mesh.size();
  for (bool sp : {false, true}) {
    INFO("tp = " << tp << (sp ? " with" : " without") << " sequence parallelism");
    parallel::gpt<float, host> model(mesh, {c.V, c.T, c.C, c.H, c.D, c.F, c.L, c.eps, sp},
                                     [&](std::string const& name) { return values.at(name); });
    Kokkos::View<int**, Kokkos::LayoutRight, host> global("ids", c.B, c.T);
    std::copy(tokens.begin(), tokens.end(), global.data());
    auto const ids = distribute<host>(mesh, model.layouts().ids, global);
    std::map<std::string, comm_counters::table> seen;
    mesh.counters().reset();
    model.trace([&](auto const& e) {
      if (e.before) return;
      seen[std::string(e.name) + " " + std::string(e.phase)] = mesh.counters().all();
      mesh.counters().reset();
    });
    auto const f = model.forward(ids, ids);
    model.backward();
    auto const want = megatron(sp, c.B * c.T, c.C);
    REQUIRE(seen.size() == want.size());
    for (auto const& [stage, table] : seen) {
      INFO(stage);
      expected const& e = want.at(stage);
      for (auto const& [kind, count] : table) {
        INFO(kind);
        auto const it = e.calls.find(kind);
        CHECK(count.calls == (tp == 1 || it == e.calls.end() ? 0U : it->second));
      }
      if (tp == 1) continue;
      for (auto const& [kind, calls] : e.calls) CHECK(table.count(kind) == 1);
      if (e.all_reduce_sizes.empty()) continue;
      std::uint64_t bytes = 0;
      for (std::size_t n : e.all_reduce_sizes)
        bytes += shardmesh::detail::all_reduce_moved(mesh.group(axis_set::of(0)), n) * sizeof(float);
      CHECK(table.at("all_reduce").bytes_received == bytes);
    }
  }
}

}  // namespace collectives_test
