// The mixture-of-experts MLP with experts split on ep, against a serial
// reference in double with plain loops that routes the same way: the
// output and the auxiliary losses exactly (1e-12), and every gradient
// (input, router, both experts' weights) against central finite
// differences of the serial objective J = sum(y . dy) + w (the auxiliary
// losses over every token), which checks the load-balancing and z-loss
// gradients by finite differences too; the auxiliary losses are the same
// on every rank and mesh. Meshes: ep alone on 1, 2, 4 ranks,
// and dp x ep on 4; top-1 and top-2; dropless and capacity factors that
// drop (the serial reference applies the same rule per expert group); every
// token on one expert. Finite differences: step 1e-5 on values of order 1,
// truncation about 1e-10 and rounding about 1e-11 over 1e-5: compared within
// 1e-6 of max(1, |value|). The routing is piecewise constant: the data is
// drawn so that no choice is within a step of a tie.
#include "expert_meshes.hpp"
#include "mpi_test.hpp"

#include "../ops/ops_check.hpp"

#include <shardmesh/nn/detail/saved_data.hpp>
#include <shardmesh/nn/mixture_of_experts.hpp>
#include <shardmesh/ops/detail/result_pool.hpp>

#include <catch2/catch_test_macros.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <numbers>
#include <vector>

// Inside a namespace of its own: bundled with other test files into one translation unit.
namespace mixture_of_experts_test {

using namespace shardmesh;
using host = Kokkos::HostSpace;
using layer = parallel::mixture_of_experts<double, host>;
using values = std::vector<double>;

namespace {

struct sizes {
  std::size_t B = 4, T = 3, C = 4, E = 4, F = 5;
};

struct inputs {
  values x, router, up, down, dy;
};

double gelu(double v) {
  return 0.5 * v * (1 + std::tanh(std::sqrt(2 / std::numbers::pi) * (v + 0.044715 * v * v * v)));
}

// The serial layer: J and y, given which batch rows each expert group and each rank hold.
struct serial {
  sizes s;
  std::size_t k;
  double factor, balance, z, weight;
  std::vector<std::vector<std::size_t>> groups;  // per expert group: its ranks' batch rows, in rank order

  struct result {
    values y;
    double objective = 0;
    double auxiliary = 0;
    std::size_t dropped = 0;
  };

  result run(inputs const& in) const {
    std::size_t const N = s.B * s.T;
    result r{values(N * s.C, 0.0), 0, 0, 0};
    values p(N * s.E), lse(N);
    std::vector<std::vector<std::size_t>> choice(N);
    std::vector<values> gate(N);
    for (std::size_t n = 0; n < N; ++n) {
      values z_(s.E, 0.0);
      for (std::size_t e = 0; e < s.E; ++e)
        for (std::size_t c = 0; c < s.C; ++c) z_[e] += in.x[n * s.C + c] * in.router[c * s.E + e];
      double const top = *std::max_element(z_.begin(), z_.end());
      double sum = 0;
      for (double v : z_) sum += std::exp(v - top);
      lse[n] = top + std::log(sum);
      for (std::size_t e = 0; e < s.E; ++e) p[n * s.E + e] = std::exp(z_[e] - lse[n]);
      std::vector<std::size_t> idx(s.E);
      for (std::size_t e = 0; e < s.E; ++e) idx[e] = e;
      std::stable_sort(idx.begin(), idx.end(),
                       [&](std::size_t a, std::size_t b) { return p[n * s.E + a] > p[n * s.E + b]; });
      double chosen = 0;
      for (std::size_t j = 0; j < k; ++j) chosen += p[n * s.E + idx[j]];
      for (std::size_t j = 0; j < k; ++j) {
        choice[n].push_back(idx[j]);
        gate[n].push_back(p[n * s.E + idx[j]] / chosen);
      }
    }
    // Which slots each expert keeps: per group, in order (rank, token, choice).
    std::vector<std::vector<bool>> kept(N, std::vector<bool>(k, true));
    for (auto const& rows : groups) {
      std::size_t const tokens = rows.size() * s.T;
      std::size_t const cap =
          factor > 0
              ? static_cast<std::size_t>(std::ceil(factor * static_cast<double>(tokens * k) / static_cast<double>(s.E)))
              : tokens * k;
      std::vector<std::size_t> taken(s.E, 0);
      for (std::size_t b : rows)
        for (std::size_t t = 0; t < s.T; ++t)
          for (std::size_t j = 0; j < k; ++j) {
            std::size_t const n = b * s.T + t;
            kept[n][j] = taken[choice[n][j]]++ < cap;
            r.dropped += kept[n][j] ? 0 : 1;
          }
    }
    for (std::size_t n = 0; n < N; ++n)
      for (std::size_t j = 0; j < k; ++j) {
        if (!kept[n][j]) continue;
        std::size_t const e = choice[n][j];
        values h(s.F, 0.0);
        for (std::size_t f = 0; f < s.F; ++f)
          for (std::size_t c = 0; c < s.C; ++c) h[f] += in.x[n * s.C + c] * in.up[(e * s.C + c) * s.F + f];
        for (std::size_t c = 0; c < s.C; ++c) {
          double o = 0;
          for (std::size_t f = 0; f < s.F; ++f) o += gelu(h[f]) * in.down[(e * s.F + f) * s.C + c];
          r.y[n * s.C + c] += gate[n][j] * o;
        }
      }
    for (std::size_t i = 0; i < r.y.size(); ++i) r.objective += r.y[i] * in.dy[i];
    // The auxiliary losses over every token.
    values share(s.E, 0.0), mean(s.E, 0.0);
    double zl = 0;
    for (std::size_t n = 0; n < N; ++n) {
      for (std::size_t j = 0; j < k; ++j) share[choice[n][j]] += 1.0 / static_cast<double>(N * k);
      for (std::size_t e = 0; e < s.E; ++e) mean[e] += p[n * s.E + e] / static_cast<double>(N);
      zl += lse[n] * lse[n] / static_cast<double>(N);
    }
    double bl = 0;
    for (std::size_t e = 0; e < s.E; ++e) bl += static_cast<double>(s.E) * share[e] * mean[e];
    r.auxiliary = balance * bl + z * zl;
    r.objective += weight * r.auxiliary;
    return r;
  }

  // dJ/d(v[i]) by central differences.
  values differences(inputs in, values inputs::* which) const {
    values d((in.*which).size());
    double const h = 1e-5;
    for (std::size_t i = 0; i < d.size(); ++i) {
      double const at = (in.*which)[i];
      (in.*which)[i] = at + h;
      double const up = run(in).objective;
      (in.*which)[i] = at - h;
      double const down = run(in).objective;
      (in.*which)[i] = at;
      d[i] = (up - down) / (2 * h);
    }
    return d;
  }
};

void require_near(char const* what, values const& got, values const& want, double tolerance) {
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    INFO(what << " element " << i << ": " << got[i] << " vs " << want[i]);
    REQUIRE(std::abs(got[i] - want[i]) <= tolerance * std::max(1.0, std::abs(want[i])));
  }
}

template <class P>
values gradient_of(P const& p) {
  return p.with_grad([](auto const& g) { return test::values_of(g); });
}

enum class routing { spread, one_expert };

// Every token on expert 0, dropless: its rank holds each of its group's
// `group_tokens` rows k times for the experts' MLP (the rows received and
// their hidden pre-activations), every other rank none, and the mesh's
// ledger counts what the layer keeps (this rank's N tokens) for its backward as activations: those
// rows with the gates [N, k] and the slots brought back [N k, C].
void require_ledger_counts_rows(device_mesh const& mesh, layer& moe, sizes const& s, std::size_t k, std::size_t N,
                                std::size_t group_tokens) {
  std::vector<void const*> kept;
  moe.visit_saved([&](auto const& saved) { parallel::detail::add_saved_data(kept, saved); });
  mesh.state<ops::detail::result_pools>().classify(kept);
  bool const holds_expert_0 = mesh.coordinates()[mesh.shape().find("ep")] == 0;
  std::size_t const M = holds_expert_0 ? group_tokens * k : 0;
  INFO("rows at this rank's experts " << M);
  REQUIRE(mesh.ledger().current(memory_category::activations) ==
          sizeof(double) * (N * k + M * (s.C + s.F) + N * k * s.C));
  mesh.state<ops::detail::result_pools>().classify({});
}

void check(mesh_shape const& shape, std::size_t k, double factor, routing how) {
  device_mesh const mesh(MPI_COMM_WORLD, shape);
  sizes const s;
  bool const dp = shape.find("dp") != npos;
  std::size_t const replicas = dp ? shape.extent(shape.find("dp")) : 1;
  INFO("mesh " << to_string(shape).view() << ", top-" << k << ", capacity factor " << factor
               << (how == routing::one_expert ? ", every token on expert 0" : ""));
  inputs in{test::pseudo_random(s.B * s.T * s.C, 1), test::pseudo_random(s.C * s.E, 2),
            test::pseudo_random(s.E * s.C * s.F, 3), test::pseudo_random(s.E * s.F * s.C, 4),
            test::pseudo_random(s.B * s.T * s.C, 5)};
  if (how == routing::one_expert) {
    for (double& v : in.x) v = std::abs(v) + 0.25;  // positive tokens, and a router column that wins for all
    for (std::size_t c = 0; c < s.C; ++c) in.router[c * s.E] = 4;
  }
  serial reference{s, k, factor, 0.1, 0.01, 0.5, {}};
  for (std::size_t d = 0; d < replicas; ++d) {  // batch rows split (dp, ep), dp major: replica d's group
    std::vector<std::size_t> rows;
    for (std::size_t b = d * s.B / replicas; b < (d + 1) * s.B / replicas; ++b) rows.push_back(b);
    reference.groups.push_back(rows);
  }
  auto const want = reference.run(in);

  constexpr dim_placement R = replicated;
  layout const tokens{dp ? shard("dp", "ep") : shard("ep"), R, R};
  layer moe(layer::router_weight("router", mesh, {R, R}, {s.C, s.E}, in.router),
            layer::expert_weight("up", mesh, {shard("ep"), R, R}, {s.E, s.C, s.F}, in.up),
            layer::expert_weight("down", mesh, {shard("ep"), R, R}, {s.E, s.F, s.C}, in.down),
            {.top_k = k, .capacity_factor = factor, .balance = 0.1, .z_loss = 0.01});
  auto const x = test::make<3>(mesh, tokens, {s.B, s.T, s.C}, in.x);
  auto const y = moe.forward(x, {}, reference.weight);
  require_near("output", test::values_of(y), want.y, 1e-12);
  REQUIRE(std::abs(moe.auxiliary_loss() - want.auxiliary) <= 1e-12);
  if (how == routing::one_expert && factor == 0)
    require_ledger_counts_rows(mesh, moe, s, k, x.local().extent(0) * s.T, s.B / replicas * s.T);
  std::size_t dropped = moe.dropped();
  MPI_Allreduce(MPI_IN_PLACE, &dropped, 1, MPI_UNSIGNED_LONG, MPI_SUM, MPI_COMM_WORLD);
  REQUIRE(dropped == want.dropped);
  if (factor == 0) REQUIRE(dropped == 0);

  auto const dx = moe.backward(test::make<3>(mesh, tokens, {s.B, s.T, s.C}, in.dy));
  require_near("input gradient", test::values_of(dx), reference.differences(in, &inputs::x), 1e-6);
  std::vector<values> grads;
  moe.for_each_parameter("", [&](std::string const&, auto& p) { grads.push_back(gradient_of(p)); });
  require_near("router gradient", grads[0], reference.differences(in, &inputs::router), 1e-6);
  require_near("experts' up gradient", grads[1], reference.differences(in, &inputs::up), 1e-6);
  require_near("experts' down gradient", grads[2], reference.differences(in, &inputs::down), 1e-6);
}

}  // namespace

TEST_CASE("mixture of experts on ep equals the serial layer, gradients by finite differences", "[parallel][experts]") {
  for (mesh_shape const& shape : test::expert_meshes())
    for (std::size_t k : {1U, 2U})
      for (double factor : {0.0, 1.0, 0.5}) check(shape, k, factor, routing::spread);
}

TEST_CASE("mixture of experts with every token on one expert", "[parallel][experts]") {
  for (mesh_shape const& shape : test::expert_meshes())
    for (double factor : {0.0, 1.0}) check(shape, 1, factor, routing::one_expert);
}

TEST_CASE("mixture of experts refuses a top-k above its experts and inputs whose tokens are not split on ep",
          "[parallel][experts]") {
  auto const n = static_cast<std::size_t>(test::world_size());
  device_mesh const mesh(MPI_COMM_WORLD, mesh_shape{{"ep", n}});
  sizes const s;
  constexpr dim_placement R = replicated;
  layer moe(layer::router_weight("router", mesh, {R, R}, {s.C, s.E}, test::pseudo_random(s.C * s.E, 2)),
            layer::expert_weight("up", mesh, {shard("ep"), R, R}, {s.E, s.C, s.F}, test::pseudo_random(80, 3)),
            layer::expert_weight("down", mesh, {shard("ep"), R, R}, {s.E, s.F, s.C}, test::pseudo_random(80, 4)), {});
  REQUIRE_THROWS_AS(
      layer(layer::router_weight("router", mesh, {R, R}, {s.C, s.E}, test::pseudo_random(16, 2)),
            layer::expert_weight("up", mesh, {shard("ep"), R, R}, {s.E, s.C, s.F}, test::pseudo_random(80, 3)),
            layer::expert_weight("down", mesh, {shard("ep"), R, R}, {s.E, s.F, s.C}, test::pseudo_random(80, 4)),
            {.top_k = s.E + 1}),
      invalid_option_error);
  if (n > 1) {  // on one rank, every layout holds every token and feature
    auto const whole = test::make<3>(mesh, {R, R, R}, {s.B, s.T, s.C}, test::pseudo_random(48, 1));
    REQUIRE_THROWS_AS(moe.forward(whole), invalid_layout_error);
    auto const features = test::make<3>(mesh, {R, R, shard("ep")}, {s.B, s.T, s.C}, test::pseudo_random(48, 1));
    REQUIRE_THROWS_AS(moe.forward(features), invalid_layout_error);
  }
  REQUIRE_THROWS_AS(
      layer(layer::router_weight("router", mesh, {R, R}, {s.C, s.E}, test::pseudo_random(16, 2)),
            layer::expert_weight("up", mesh, {R, R, R}, {s.E, s.C, s.F}, test::pseudo_random(80, 3)),
            layer::expert_weight("down", mesh, {shard("ep"), R, R}, {s.E, s.F, s.C}, test::pseudo_random(80, 4)), {}),
      invalid_layout_error);
}

}  // namespace mixture_of_experts_test
