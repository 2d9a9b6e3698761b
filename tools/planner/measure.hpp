#pragma once
// The measurements of shardmesh-calibrate, each collective over the ranks
// it runs on (every rank calls each with the same arguments) and each
// reporting the same figures on every rank: the slowest rank's median time.
// A machine shared with others slows down for seconds at a time, so
// shardmesh-calibrate makes every measurement in several passes, far apart,
// and keeps each figure's fastest (keep_faster).

#include <shardmesh/comm/communicator.hpp>
#include <shardmesh/models/gpt_description.hpp>
#include <shardmesh/plan/hardware_model.hpp>

#include <algorithm>
#include <cstddef>
#include <vector>

namespace planner_tool {

struct calibration_sizes {
  std::vector<shardmesh::parallel::gemm_rate> gemm_shapes;  // rates left 0, filled in
  std::vector<std::size_t> message_bytes;                   // per collective and group size
  std::size_t elementwise_bytes = 0;                        // per array of the elementwise kernel
  std::size_t operand_bytes = 0;                            // the products' copies of their operands, together
  std::vector<std::size_t> kernel_elements;                 // per kernel, fitted as alpha + beta x elements
  std::size_t repetitions = 0;                              // timed runs per figure (median)
};

// quick: under a minute on 2 cores; else a wider sweep.
[[nodiscard]] calibration_sizes sizes_for(bool quick);

// The compute measurements below run on the ranks whose `computes` is
// true, all at once, the others waiting: at most one rank per core, so that
// each figure is a core's (the planner divides the cores among the ranks).

// A rank's rate of each shape in each precision (float, bf16, fp16: the
// backends local_gemm picks), its operands out of cache, as a training step
// finds them.
[[nodiscard]] std::vector<shardmesh::parallel::gemm_rate> measure_gemm(shardmesh::communicator const& world,
                                                                       calibration_sizes const& s, bool computes);
// Bytes read and written per second by an elementwise kernel (y = a x + y).
[[nodiscard]] double measure_elementwise(shardmesh::communicator const& world, calibration_sizes const& s,
                                         bool computes);
// Seconds of each of the library's kernels the planner prices (float,
// rows of 128 elements) at each of s.kernel_elements.
struct kernel_series {
  shardmesh::parallel::kernel_kind kind;
  std::vector<double> elements, seconds;
};
[[nodiscard]] std::vector<kernel_series> measure_kernels(shardmesh::communicator const& world,
                                                         calibration_sizes const& s, bool computes);
// Seconds of every collective on groups of 2, 4, ... ranks (every group of
// the world at once), blocking and, for those a step defers (all-reduce,
// all-gather, reduce-scatter), deferred too; and of a one-way point-to-point
// transfer; at each of s.message_bytes.
struct collective_series {
  shardmesh::parallel::collective_kind kind;
  std::size_t group;
  std::vector<double> bytes, seconds;
  bool deferred = false;  // posted, then waited for (MPI's non-blocking collective)
};
[[nodiscard]] std::vector<collective_series> measure_collectives(shardmesh::communicator const& world,
                                                                 calibration_sizes const& s);

// The GPT whose stages measure_stage_overheads times: every extent 1 or 2,
// so that its products and kernels take next to nothing and what remains is
// the library's own cost per stage.
inline constexpr shardmesh::parallel::gpt_config tiny_gpt{
    .vocabulary = 2, .sequence = 2, .hidden = 2, .heads = 1, .head_size = 2, .ffn = 2, .layers = 2};
// Seconds of tiny_gpt's forward and backward of one sample per stage kind
// (a block's: the mean of its blocks), on a mesh of this rank alone,
// arithmetic included; indexed by stage_kind.
[[nodiscard]] std::vector<shardmesh::parallel::stage_overhead> measure_stage_seconds(
    shardmesh::communicator const& world, calibration_sizes const& s, bool computes);
// The faster of two measurements of a stage's seconds, phase by phase.
[[nodiscard]] inline shardmesh::parallel::stage_overhead faster(shardmesh::parallel::stage_overhead a,
                                                                shardmesh::parallel::stage_overhead b) {
  return {std::min(a.forward, b.forward), std::min(a.backward, b.backward)};
}
// Seconds a redistribution of a few bytes (an all-gather over every rank)
// takes beyond the same all-gather called directly: the library's own cost
// of a redistribution.
[[nodiscard]] double measure_redistribution_overhead(shardmesh::communicator const& world, calibration_sizes const& s);

// Every figure of `pass` that is faster than `best`'s (the same
// measurements, in the same order), kept in `best`.
void keep_faster(std::vector<shardmesh::parallel::gemm_rate>& best,
                 std::vector<shardmesh::parallel::gemm_rate> const& pass);
template <class Series>
void keep_faster(std::vector<Series>& best, std::vector<Series> const& pass) {
  for (std::size_t i = 0; i < best.size() && i < pass.size(); ++i)
    for (std::size_t j = 0; j < best[i].seconds.size() && j < pass[i].seconds.size(); ++j)
      best[i].seconds[j] = std::min(best[i].seconds[j], pass[i].seconds[j]);
}

// Seconds a tiny all-reduce over every rank costs, each rank computing
// between them (a millisecond of products), beyond the same computing and
// the same all-reduces apart: waiting for ranks that are not running, where
// ranks share cores.
[[nodiscard]] double measure_sync_overhead(shardmesh::communicator const& world, calibration_sizes const& s);

// Each figure of a calibration in progress (h's GEMM rates, bandwidth and
// redistribution overhead, and the series not yet fitted) made the faster
// of its own and `earlier`'s for the same shape or size, where `earlier`
// has it.
void keep_faster(shardmesh::parallel::hardware_model const& earlier, shardmesh::parallel::hardware_model& h,
                 std::vector<kernel_series>& kernels, std::vector<collective_series>& collectives);

}  // namespace planner_tool
