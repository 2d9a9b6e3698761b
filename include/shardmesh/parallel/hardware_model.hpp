#pragma once
// What the training planner knows of a machine: the rate of the local
// products by shape, the bandwidth of elementwise kernels, and each
// collective's time as alpha + beta x bytes per group size. Measured by
// shardmesh-calibrate on the ranks it runs on (tools/planner), or described
// for a machine that is not here (nodes x devices, links, a device's GEMM
// rate from its specification), in which case what the planner says of it
// is a prediction from the description.
//
// Pure; no Kokkos or MPI.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

namespace shardmesh::parallel {

// Seconds for a message of b bytes: alpha + beta b.
struct link_cost {
  double alpha = 0;  // seconds
  double beta = 0;   // seconds per byte
  [[nodiscard]] double time(double bytes) const { return alpha + beta * bytes; }
};

// The collectives the planner times, and the one-way transfer between pipeline stages.
enum class collective_kind { all_reduce, all_gather, reduce_scatter, all_to_all, point_to_point };
inline constexpr collective_kind collective_kinds[] = {collective_kind::all_reduce, collective_kind::all_gather,
                                                       collective_kind::reduce_scatter, collective_kind::all_to_all,
                                                       collective_kind::point_to_point};

[[nodiscard]] constexpr std::string_view to_string(collective_kind k) {
  constexpr std::string_view names[] = {"all_reduce", "all_gather", "reduce_scatter", "all_to_all", "point_to_point"};
  return names[static_cast<std::size_t>(k)];
}

// One collective on groups of `group` ranks. Bytes are what one rank's
// buffer holds: the whole vector of an all-reduce, the gathered result of
// an all-gather, the input of a reduce-scatter, the send buffer of an
// all-to-all, the message of a point-to-point transfer.
struct collective_fit {
  collective_kind kind = collective_kind::all_reduce;
  std::size_t group = 2;
  link_cost cost;
};

// A local product's measured rate: C[m, n] += A[m, k] B[k, n].
struct gemm_rate {
  std::size_t m = 0, n = 0, k = 0;
  double flops_per_second = 0;
  [[nodiscard]] double flops() const {
    return 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  }
};

struct hardware_model {
  std::string machine;                      // where it was measured, or the description's name
  bool measured = true;                     // false: described, so its figures are predictions
  std::size_t ranks = 1;                    // the ranks the figures hold for (measured: the ranks it ran on)
  std::size_t cores = 1;                    // cores those ranks share (ranks > cores: oversubscribed)
  std::size_t memory_per_rank = 0;          // bytes, 0: not known
  std::vector<gemm_rate> gemm;              // each rank's rate with every rank computing at once
  double elementwise_bytes_per_second = 0;  // bytes read and written per second by an elementwise kernel
  std::vector<collective_fit> collectives;
  // The share of the gradient buckets' reduction hidden behind the backward
  // (bench_data_parallel's "exposed communication" is 1 minus it: here,
  // where MPI copies with the same cores that compute, little).
  double data_parallel_overlap = 0;

  // Flops per second of a product of this many flops: the measured rate of
  // the shape with the nearest flop count (on a log scale), else of the largest.
  [[nodiscard]] double gemm_flops_per_second(double flops) const {
    double best = 0, distance = std::numeric_limits<double>::infinity();
    for (gemm_rate const& g : gemm) {
      double const d = std::abs(std::log(std::max(flops, 1.0)) - std::log(std::max(g.flops(), 1.0)));
      if (d < distance) distance = d, best = g.flops_per_second;
    }
    return best;
  }

  // Seconds of collective kind on groups of `group` ranks for `bytes`: the
  // fit for that group, else for the nearest group measured (0 for a group of one).
  [[nodiscard]] double collective_seconds(collective_kind kind, std::size_t group, double bytes) const {
    if (group <= 1 && kind != collective_kind::point_to_point) return 0;
    collective_fit const* best = nullptr;
    for (collective_fit const& f : collectives) {
      if (f.kind != kind) continue;
      auto const gap = [&](collective_fit const& x) { return x.group > group ? x.group - group : group - x.group; };
      if (best == nullptr || gap(f) < gap(*best)) best = &f;
    }
    return best == nullptr ? 0 : best->cost.time(bytes);
  }
};

// The line alpha + beta x bytes through measured (bytes, seconds) with the
// least squared relative error (a small message's microseconds count as
// much as a large one's milliseconds), alpha and beta each at least 0.
[[nodiscard]] inline link_cost fit_link_cost(std::vector<double> const& bytes, std::vector<double> const& seconds) {
  double sw = 0, swx = 0, swxx = 0, swy = 0, swxy = 0;
  for (std::size_t i = 0; i < std::min(bytes.size(), seconds.size()); ++i) {
    if (seconds[i] <= 0) continue;
    double const w = 1 / (seconds[i] * seconds[i]), x = bytes[i], y = seconds[i];
    sw += w, swx += w * x, swxx += w * x * x, swy += w * y, swxy += w * x * y;
  }
  if (sw == 0) return {};
  double const d = sw * swxx - swx * swx;
  double const beta = std::max(d > 0 ? (sw * swxy - swx * swy) / d : 0.0, 0.0);
  return {std::max((swy - beta * swx) / sw, 0.0), beta};
}

}  // namespace shardmesh::parallel
