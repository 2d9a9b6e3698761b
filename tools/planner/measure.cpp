#include "measure.hpp"

#include <shardmesh/comm/all_gather.hpp>
#include <shardmesh/comm/all_reduce.hpp>
#include <shardmesh/comm/all_to_all.hpp>
#include <shardmesh/comm/point_to_point.hpp>
#include <shardmesh/comm/reduce_scatter.hpp>
#include <shardmesh/ops/local_gemm.hpp>

#include <mpi.h>
#include <Kokkos_Core.hpp>

#include <algorithm>
#include <cstddef>
#include <vector>

namespace planner_tool {

using namespace shardmesh;
using parallel::collective_fit;
using parallel::collective_kind;
using parallel::gemm_rate;
using view = Kokkos::View<float*, Kokkos::HostSpace>;
using exec = Kokkos::DefaultHostExecutionSpace;

namespace {

// The median over runs of the slowest rank's seconds for body(), after two untimed runs.
template <class Body>
double slowest_median(communicator const& world, std::size_t runs, Body&& body) {
  std::vector<double> times;
  for (std::size_t i = 0; i < runs + 2; ++i) {
    MPI_Barrier(world.get());
    double const start = MPI_Wtime();
    body();
    double t = MPI_Wtime() - start;
    MPI_Allreduce(MPI_IN_PLACE, &t, 1, MPI_DOUBLE, MPI_MAX, world.get());
    if (i >= 2) times.push_back(t);
  }
  std::nth_element(times.begin(), times.begin() + static_cast<std::ptrdiff_t>(times.size() / 2), times.end());
  return times[times.size() / 2];
}

view filled(char const* label, std::size_t n) {
  view v(label, n);
  Kokkos::deep_copy(v, 1.0F);
  return v;
}

}  // namespace

calibration_sizes sizes_for(bool quick) {
  calibration_sizes s;
  // Products of the shapes a GPT step makes here: tokens x hidden x hidden, and wider.
  std::vector<std::size_t> const tokens =
      quick ? std::vector<std::size_t>{256, 1024} : std::vector<std::size_t>{64, 256, 1024, 4096};
  std::vector<std::size_t> const widths =
      quick ? std::vector<std::size_t>{128, 512} : std::vector<std::size_t>{32, 128, 512, 1024};
  for (std::size_t m : tokens)
    for (std::size_t n : widths) s.gemm_shapes.push_back({m, n, n, 0});
  for (std::size_t b = std::size_t{1} << 10; b <= (quick ? std::size_t{4} << 20 : std::size_t{64} << 20);
       b *= quick ? 16 : 4)
    s.message_bytes.push_back(b);
  s.elementwise_bytes = std::size_t{16} << 20;
  s.repetitions = quick ? 5 : 15;
  return s;
}

std::vector<gemm_rate> measure_gemm(communicator const& world, calibration_sizes const& s) {
  std::vector<gemm_rate> out;
  for (gemm_rate shape : s.gemm_shapes) {
    view const a = filled("a", shape.m * shape.k), b = filled("b", shape.k * shape.n),
               c = filled("c", shape.m * shape.n);
    ops::gemm_shape const g{.m = shape.m, .n = shape.n, .k = shape.k};
    ops::gemm_strides const sa{.row = static_cast<std::ptrdiff_t>(shape.k), .col = 1};
    ops::gemm_strides const sb{.row = static_cast<std::ptrdiff_t>(shape.n), .col = 1};
    ops::gemm_strides const sc{.row = static_cast<std::ptrdiff_t>(shape.n), .col = 1};
    // Enough products per run that a run takes about a millisecond at 10 GFLOP/s.
    std::size_t const calls = std::max<std::size_t>(1, static_cast<std::size_t>(1e7 / shape.flops()));
    double const t = slowest_median(world, s.repetitions, [&] {
      for (std::size_t i = 0; i < calls; ++i)
        ops::local_gemm(exec{}, g, 1.0F, a.data(), sa, b.data(), sb, 0.0F, c.data(), sc);
      exec{}.fence();
    });
    shape.flops_per_second = static_cast<double>(calls) * shape.flops() / t;
    out.push_back(shape);
  }
  return out;
}

double measure_elementwise(communicator const& world, calibration_sizes const& s) {
  std::size_t const n = s.elementwise_bytes / sizeof(float);
  view const x = filled("x", n), y = filled("y", n);
  double const t = slowest_median(world, s.repetitions, [&] {
    Kokkos::parallel_for(
        "shardmesh::calibrate::axpy", Kokkos::RangePolicy<exec>(0, n),
        KOKKOS_LAMBDA(std::size_t i) { y(i) += 0.5F * x(i); });
    exec{}.fence();
  });
  return 3.0 * static_cast<double>(n * sizeof(float)) / t;  // x and y read, y written
}

std::vector<collective_fit> measure_collectives(communicator const& world, calibration_sizes const& s) {
  auto const ranks = static_cast<std::size_t>(world.size()), me = static_cast<std::size_t>(world.rank());
  std::vector<collective_fit> out;
  std::vector<double> bytes;
  for (std::size_t b : s.message_bytes) bytes.push_back(static_cast<double>(b));
  for (std::size_t group = 2; group <= ranks; group *= 2) {
    if (ranks % group != 0) continue;
    communicator const g = world.split(static_cast<int>(me / group), static_cast<int>(me));
    for (collective_kind kind : parallel::collective_kinds) {
      if (kind == collective_kind::point_to_point && group != 2) continue;
      std::vector<double> seconds;
      for (std::size_t b : s.message_bytes) {
        std::size_t const n = std::max<std::size_t>(b / sizeof(float) / group, 1) * group;  // whole blocks per rank
        view const send = filled("send", n), recv = filled("recv", n), part = filled("part", n / group);
        int const peer = g.rank() ^ 1;
        seconds.push_back(slowest_median(world, s.repetitions, [&] {
          switch (kind) {
            case collective_kind::all_reduce: all_reduce(g, send, recv, reduce_op::sum, exec{}); break;
            case collective_kind::all_gather: all_gather(g, part, recv, exec{}); break;
            case collective_kind::reduce_scatter: reduce_scatter(g, send, part, reduce_op::sum, exec{}); break;
            case collective_kind::all_to_all: iall_to_all(g, send, recv, completion::immediate, exec{}).wait(); break;
            case collective_kind::point_to_point:  // one way: even ranks send, odd ranks receive
              (g.rank() % 2 == 0 ? isend(g, send, peer, 7, exec{}) : irecv(g, recv, peer, 7, exec{})).wait();
              break;
          }
        }));
      }
      out.push_back({kind, group, parallel::fit_link_cost(bytes, seconds)});
    }
  }
  return out;
}

}  // namespace planner_tool
