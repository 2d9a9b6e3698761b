#pragma once
// The measurements of shardmesh-calibrate, each collective over the ranks
// it runs on (every rank calls each with the same arguments) and each
// reporting the same figures on every rank: the slowest rank's median time.

#include <shardmesh/comm/communicator.hpp>
#include <shardmesh/parallel/hardware_model.hpp>

#include <cstddef>
#include <vector>

namespace planner_tool {

struct calibration_sizes {
  std::vector<shardmesh::parallel::gemm_rate> gemm_shapes;  // rates left 0, filled in
  std::vector<std::size_t> message_bytes;                   // per collective and group size
  std::size_t elementwise_bytes = 0;                        // per array of the elementwise kernel
  std::size_t repetitions = 0;                              // timed runs per figure (median)
};

// quick: under a minute on 2 cores; else a wider sweep.
[[nodiscard]] calibration_sizes sizes_for(bool quick);

// Each rank's rate of each shape, every rank computing at once (float, the host BLAS through local_gemm).
[[nodiscard]] std::vector<shardmesh::parallel::gemm_rate> measure_gemm(shardmesh::communicator const& world,
                                                                       calibration_sizes const& s);
// Bytes read and written per second by an elementwise kernel (y = a x + y), every rank at once.
[[nodiscard]] double measure_elementwise(shardmesh::communicator const& world, calibration_sizes const& s);
// alpha + beta x bytes of every collective on groups of 2, 4, ... ranks
// (every group of the world at once), and of a one-way point-to-point transfer.
[[nodiscard]] std::vector<shardmesh::parallel::collective_fit> measure_collectives(shardmesh::communicator const& world,
                                                                                   calibration_sizes const& s);

}  // namespace planner_tool
