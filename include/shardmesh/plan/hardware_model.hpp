#pragma once
// What the training planner knows of a machine: the rate of the local
// products by shape, each of the library's elementwise and row kernels'
// time as alpha + beta x elements (or, for a described machine, its memory
// bandwidth), each collective's time as alpha + beta x bytes per group
// size, and the library's own fixed costs per stage and per redistribution.
// Measured by
// shardmesh-calibrate on the ranks it runs on (tools/planner), or described
// for a machine that is not here (nodes x devices, links, a device's GEMM
// rate from its specification), in which case what the planner says of it
// is a prediction from the description.
//
// Pure; no Kokkos or MPI.

#include "shardmesh/algebra/plan_step.hpp"
#include "shardmesh/plan/stage_work.hpp"
#include "shardmesh/strategy/precision.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <iterator>
#include <limits>
#include <string>
#include <string_view>
#include <utility>
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
// all-to-all, the message of a point-to-point transfer. between_nodes: the
// group's ranks are on several nodes (a described cluster's slower links).
struct collective_fit {
  collective_kind kind = collective_kind::all_reduce;
  std::size_t group = 2;
  link_cost cost;
  bool between_nodes = false;
  // Posted, then waited for (a ZeRO-3 gather started ahead, a gradient
  // bucket): MPI's non-blocking collective, often slower than the blocking one.
  bool deferred = false;
};

// A local product's measured rate: C[m, n] += A[m, k] B[k, n], its
// operands in `compute` (sums in float for bf16 and fp16).
struct gemm_rate {
  std::size_t m = 0, n = 0, k = 0;
  double flops_per_second = 0;
  precision compute = precision::fp32;
  [[nodiscard]] double flops() const {
    return 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  }
};

// A kernel's measured time for n elements: alpha + beta n.
struct kernel_fit {
  kernel_kind kind = kernel_kind::add;
  link_cost cost;
};

// The calibrated collective that prices a communicating step of a
// redistribution plan: a permutation is point to point, the general
// all-to-all-v an all-to-all. Precondition: communicates(kind).
[[nodiscard]] constexpr collective_kind collective_of(step_kind kind) {
  switch (kind) {
    case step_kind::all_gather: return collective_kind::all_gather;
    case step_kind::all_reduce: return collective_kind::all_reduce;
    case step_kind::reduce_scatter: return collective_kind::reduce_scatter;
    case step_kind::permute: return collective_kind::point_to_point;
    case step_kind::all_to_all:
    case step_kind::all_to_all_v:
    case step_kind::slice:
    case step_kind::to_partial: break;
  }
  return collective_kind::all_to_all;
}

// The library's own seconds for one stage's forward and backward of a
// micro-batch beyond the arithmetic the planner prices (products and
// kernels): its ops' layouts, result buffers, launches and bookkeeping,
// which do not grow with the tensors. Calibration measures it on a GPT
// whose every extent is 1 or 2.
struct stage_overhead {
  double forward = 0, backward = 0;
};

struct hardware_model {
  std::string machine;              // where it was measured, or the description's name
  bool measured = true;             // false: described, so its figures are predictions
  std::size_t ranks = 1;            // the ranks the figures hold for (measured: the ranks it ran on)
  std::size_t cores = 1;            // compute units of a node: cores, or devices
  std::size_t memory_per_rank = 0;  // bytes, 0: not known
  std::size_t ranks_per_node = 0;   // 0: every rank on one node
  std::vector<gemm_rate> gemm;      // one core's (device's) rate, every core computing at once
  // A core's (device's) peak product rate per precision: a described
  // device's specification, the base of model flops utilisation; a
  // precision not here counts its fastest product measured.
  std::vector<std::pair<precision, double>> peaks;
  std::vector<kernel_fit> kernels;          // one core's, likewise; a kind not here streams at:
  double elementwise_bytes_per_second = 0;  // bytes read and written per second by an elementwise kernel
  std::vector<collective_fit> collectives;
  stage_overhead overheads[std::size(stage_kinds)] = {};  // by stage_kind; 0 for a described machine
  // A redistribution's own seconds beyond its collectives (planning lookup,
  // buffers, requests): ZeRO's per-parameter gathers pay it once each.
  double redistribution_overhead = 0;
  // What a collective among computing ranks costs beyond the collective
  // itself: waiting for ranks that are not running (more ranks than
  // cores), paid at every collective of a step.
  double sync_overhead = 0;
  // The share of the gradient buckets' reduction hidden behind the backward
  // (bench_data_parallel's "exposed communication" is 1 minus it: here,
  // where MPI copies with the same cores that compute, little).
  double data_parallel_overlap = 0;
  // The fastest machine_pace seen while calibrating, the figures' machine
  // left alone: measurements to compare with them should be as quiet
  // (machine_pace.hpp). 0: not measured.
  double pace = 0;

  [[nodiscard]] stage_overhead overhead(stage_kind k) const { return overheads[static_cast<std::size_t>(k)]; }

  // How many times slower a rank computes when `ranks` ranks run (over the
  // nodes, ranks_per_node to a node): the share of a node's cores it gets.
  [[nodiscard]] double compute_sharing(std::size_t ranks_planned) const {
    std::size_t const on_node = ranks_per_node > 0 ? std::min(ranks_planned, ranks_per_node) : ranks_planned;
    return std::max(1.0, static_cast<double>(on_node) / static_cast<double>(std::max<std::size_t>(cores, 1)));
  }

  // The core (device) a rank runs on, cores numbered node by node, when
  // `ranks_planned` ranks run: a node's ranks bound to its cores in blocks
  // of consecutive ranks, as Open MPI's --map-by core binds them
  // (tools/mpirun --bind), one to a core where the cores suffice. Where
  // ranks share cores, which share one decides how fast a pipeline's stage
  // runs while the others wait: ranks left unbound land where the system
  // puts them, a different placement each run.
  [[nodiscard]] std::size_t core_of(std::size_t rank, std::size_t ranks_planned) const {
    std::size_t const on_node =
        std::max<std::size_t>(ranks_per_node > 0 ? std::min(ranks_planned, ranks_per_node) : ranks_planned, 1);
    std::size_t const c = std::max<std::size_t>(cores, 1);
    std::size_t const local = rank % on_node;
    return rank / on_node * c + (on_node <= c ? local : local * c / on_node);
  }

  // Seconds of p's products in precision `compute`: each at the measured
  // rate of the nearest shape (distance in log m, log n, log k), which
  // holds the per-call cost of shapes too small to keep the cores busy;
  // where nothing was measured in `compute`, the float rates.
  [[nodiscard]] double gemm_seconds(product_spec const& p, precision compute = precision::fp32) const {
    if (p.count == 0 || p.m == 0 || p.n == 0 || p.k == 0) return 0;
    bool const rated = std::any_of(gemm.begin(), gemm.end(), [&](gemm_rate const& g) { return g.compute == compute; });
    precision const in = rated ? compute : precision::fp32;
    auto const log_gap = [](std::size_t x, std::size_t y) {
      double const d = std::log(static_cast<double>(std::max<std::size_t>(x, 1))) -
                       std::log(static_cast<double>(std::max<std::size_t>(y, 1)));
      return d * d;
    };
    double rate = 0, distance = std::numeric_limits<double>::infinity();
    for (gemm_rate const& g : gemm) {
      if (g.compute != in) continue;
      double const d = log_gap(g.m, p.m) + log_gap(g.n, p.n) + log_gap(g.k, p.k);
      if (d < distance) distance = d, rate = g.flops_per_second;
    }
    return rate > 0 ? p.flops() / rate : 0;
  }

  // A core's (device's) peak product rate in `compute` (peaks, else the fastest product measured in it, else in float).
  [[nodiscard]] double peak_flops(precision compute) const {
    for (auto const& [c, rate] : peaks)
      if (c == compute) return rate;
    double fastest = 0;
    for (precision c : {compute, precision::fp32}) {
      for (gemm_rate const& g : gemm)
        if (g.compute == c) fastest = std::max(fastest, g.flops_per_second);
      if (fastest > 0) return fastest;
    }
    return 0;
  }

  // Seconds of a kernel's calls: its measured fit, else its streamed bytes
  // at the elementwise bandwidth.
  [[nodiscard]] double kernel_seconds(kernel_spec const& k, std::size_t element_bytes = 4) const {
    for (kernel_fit const& f : kernels)
      if (f.kind == k.kind) return static_cast<double>(k.calls) * f.cost.time(k.elements);
    if (!(elementwise_bytes_per_second > 0)) return 0;
    return static_cast<double>(k.calls) * k.elements * streamed_elements(k.kind) * static_cast<double>(element_bytes) /
           elementwise_bytes_per_second;
  }

  // Seconds of collective kind on groups of `group` ranks `stride` apart
  // (ranks numbered node by node) for `bytes`: the fit for that group size,
  // on links between nodes where the group cannot fit in one, else for the
  // nearest group size measured, links between nodes preferred alike, then
  // deferred as asked where both were measured (0 for a group of one).
  [[nodiscard]] double collective_seconds(collective_kind kind, std::size_t group, double bytes, std::size_t stride = 1,
                                          bool deferred = false) const {
    if (group <= 1 && kind != collective_kind::point_to_point) return 0;
    bool const spans = ranks_per_node > 0 && group * stride > ranks_per_node;
    collective_fit const* best = nullptr;
    auto const gap = [&](collective_fit const& x) {
      return 4 * (x.group > group ? x.group - group : group - x.group) + 2 * (x.between_nodes == spans ? 0 : 1) +
             (x.deferred == deferred ? 0 : 1);
    };
    for (collective_fit const& f : collectives)
      if (f.kind == kind && (best == nullptr || gap(f) < gap(*best))) best = &f;
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
