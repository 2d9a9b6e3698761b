// One forward and backward of a small GPT on 4 ranks: tensor-parallel (tp=4),
// then data- and tensor-parallel on a 2x2 mesh (dp x tp). No layer names a
// collective: each declares the layouts of its weights and activations
// (shardmesh/strategy/transformer_layouts.hpp) and the algebra derives the collectives
// between them. The example prints the layouts, the collectives each layer
// issued (the mesh's counters, read through the model's trace hook), and
// checks the loss against two serial values:
//
//  - the same float model on a one-rank mesh (MPI_COMM_SELF), which every
//    rank runs for itself: the distributed step must reproduce it;
//  - the double-precision reference GPT of the tests
//    (tests/parallel/reference_gpt.hpp: plain loops, no shardmesh), which
//    also gives the deterministic parameters and tokens.
//
//   mpiexec -n 4 build/release/examples/tensor_parallel_gpt
#include <shardmesh/shardmesh.hpp>

#include "reference_gpt.hpp"  // tests/parallel, on this example's include path

#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

using namespace shardmesh;
namespace ref = shardmesh::test::reference;

namespace {

using model_type = parallel::gpt<float, Kokkos::HostSpace>;

// |loss - serial| must stay below this fraction of the loss: float32 against
// double through 2 blocks, the bound tests/parallel/gpt_test.cpp derives
// (~1e-6 in practice). A wrong shard or a missing reduction moves the loss
// by O(1).
constexpr double tolerance = 1e-4;

struct problem {
  ref::config config{.V = 64, .T = 8, .C = 16, .H = 4, .D = 4, .F = 64, .L = 2, .B = 4};
  std::map<std::string, std::vector<double>> values;  // every parameter by name, row-major
  std::vector<int> tokens = ref::make_tokens(config, 7, 1), targets = ref::make_tokens(config, 7, 2);  // [B][T]
};

// "1.5 KiB", or bytes below one KiB.
std::string bytes(double n) {
  char text[32];
  if (n < 1024)
    std::snprintf(text, sizeof text, "%.0f B", n);
  else
    std::snprintf(text, sizeof text, "%.1f KiB", n / 1024);
  return text;
}

// What a stage hands on, in which layout.
std::string output_of(std::string const& stage, std::string const& phase, parallel::transformer_layouts const& l) {
  auto const named = [](char const* what, layout const& x) { return std::string(what) + " " + to_string(x).chars; };
  bool const forward = phase == "forward";
  if (stage == "loss") return forward ? "loss, on every rank" : named("dlogits[b,t,v]", l.features);
  if (stage == "head") return forward ? named("logits[b,t,v]", l.features) : named("dx[b,t,c]", l.activation);
  if (stage == "embedding" && !forward) return named("dwte[v,c]", l.vocabulary);
  return named(forward ? "x[b,t,c]" : "dx[b,t,c]", l.activation);
}

// One forward and backward on `mesh`, reported as it goes if `print`; returns the loss.
double step(device_mesh const& mesh, problem const& p, bool print) {
  ref::config const& c = p.config;
  model_type model(mesh, {c.V, c.T, c.C, c.H, c.D, c.F, c.L, c.eps, /*sequence_parallel=*/false},
                   [&](std::string const& name) { return p.values.at(name); });
  auto const& layouts = model.layouts();
  auto const ids = [&](std::vector<int> const& values) {  // every rank holds them all and keeps its shard
    Kokkos::View<int**, Kokkos::LayoutRight, Kokkos::HostSpace> global("ids", c.B, c.T);
    for (std::size_t i = 0; i < values.size(); ++i) global.data()[i] = values[i];
    return distribute<Kokkos::HostSpace>(mesh, layouts.ids, global);
  };
  auto const tokens = ids(p.tokens), targets = ids(p.targets);

  if (print) {
    std::printf("parameters (h1 as h0):\n");
    model.for_each_parameter([](std::string const& name, auto& parameter) {
      if (name[0] != 'h' || name.starts_with("h0."))
        std::printf("  %-9s %s\n", name.c_str(), parameter.value().notation().c_str());
    });
    std::printf("  %-10s %-9s %-30s %s\n", "stage", "phase", "output", "collectives issued (bytes rank 0 sent)");
  }
  // After each stage: the collectives since the previous one.
  mesh.counters().reset();
  comm_counters::table before;
  model.trace([&](auto const& event) {
    if (event.before) return;
    std::string const stage(event.name), phase(event.phase);
    comm_counters::table const now = mesh.counters().all();
    std::string issued;
    for (auto const& [name, count] : now) {
      collective_count const was = before[name];
      if (count.calls == was.calls) continue;
      issued += (issued.empty() ? "" : ", ") + name + " x" + std::to_string(count.calls - was.calls) + " (" +
                bytes(static_cast<double>(count.bytes_sent - was.bytes_sent)) + ")";
    }
    before = now;
    if (print)
      std::printf("  %-10s %-9s %-30s %s\n", stage.c_str(), phase.c_str(), output_of(stage, phase, layouts).c_str(),
                  issued.empty() ? "none" : issued.c_str());
  });
  double const loss = model.forward(tokens, targets).loss;
  model.backward();
  return loss;
}

// Prints and returns whether |loss - serial| is within the tolerance.
bool check(bool print, char const* against, double loss, double serial) {
  double const difference = std::abs(loss - serial), bound = tolerance * std::abs(serial);
  bool const ok = difference <= bound;
  if (print)
    std::printf("  against %-26s %.9f: |difference| %.1e <= %.1e: %s\n", against, serial, difference, bound,
                ok ? "passed" : "FAILED");
  return ok;
}

}  // namespace

int main(int argc, char* argv[]) {
  MPI_Init(&argc, &argv);
  bool ok = true;
  {
    Kokkos::ScopeGuard kokkos(argc, argv);
    int rank = 0, ranks = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &ranks);
    bool const print = rank == 0;

    problem p;
    ref::parameters const parameters = ref::init_parameters(p.config, 7);
    ref::for_each_parameter(
        p.config, parameters,
        [&](std::string const& name, std::vector<double> const& v, auto const&) { p.values[name] = v; });
    ref::config const& c = p.config;
    double const reference = ref::forward(c, parameters, p.tokens, p.targets).loss;
    // The serial values: the double reference, and this float model on a mesh of this rank alone.
    double const serial = step(device_mesh(MPI_COMM_SELF, mesh_shape{{"tp", 1}}), p, false);
    if (print)
      std::printf("GPT: vocabulary %zu, sequence %zu, hidden %zu, %zu heads of %zu, MLP %zu, %zu blocks, batch %zu\n",
                  c.V, c.T, c.C, c.H, c.D, c.F, c.L, c.B);

    // tp over every rank; on 4 ranks also dp=2 x tp=2 (the batch sharded on dp, the rest as before).
    std::vector<mesh_shape> shapes{mesh_shape{{"tp", dynamic_extent}}};
    if (ranks == 4) shapes.push_back(mesh_shape{{"dp", 2}, {"tp", 2}});
    for (mesh_shape const& shape : shapes) {
      try {
        device_mesh const mesh(MPI_COMM_WORLD, shape);
        if (print) std::printf("\nmesh %s\n", to_string(mesh.shape()).chars);
        double const loss = step(mesh, p, print);
        if (print) std::printf("loss %.9f\n", loss);
        ok = check(print, "the same model on 1 rank", loss, serial) && ok;
        ok = check(print, "the double reference", loss, reference) && ok;
      } catch (error const& e) {  // the same message on every rank
        if (print) std::fprintf(stderr, "tensor_parallel_gpt: %s\n", e.what());
        ok = false;
      }
    }
  }
  MPI_Finalize();
  return ok ? 0 : 1;
}
