#include "measure.hpp"

#include <shardmesh/comm/all_gather.hpp>
#include <shardmesh/comm/all_reduce.hpp>
#include <shardmesh/comm/all_to_all.hpp>
#include <shardmesh/comm/point_to_point.hpp>
#include <shardmesh/comm/reduce_scatter.hpp>
#include <shardmesh/models/gpt.hpp>
#include <shardmesh/ops/local/cross_entropy.hpp>
#include <shardmesh/ops/local/elementwise.hpp>
#include <shardmesh/ops/local/embedding.hpp>
#include <shardmesh/ops/local/gelu.hpp>
#include <shardmesh/ops/local/layer_norm.hpp>
#include <shardmesh/ops/local/optimizer.hpp>
#include <shardmesh/ops/local/softmax.hpp>
#include <shardmesh/ops/local_gemm.hpp>
#include <shardmesh/runtime/device_mesh.hpp>
#include <shardmesh/tensor/distribute.hpp>
#include <shardmesh/tensor/redistribute.hpp>
#include <shardmesh/train/update_rules.hpp>

#include <mpi.h>
#include <Kokkos_Core.hpp>

#include <algorithm>
#include <cstddef>
#include <iterator>
#include <string>
#include <vector>

namespace planner_tool {

using namespace shardmesh;
using parallel::collective_fit;
using parallel::collective_kind;
using parallel::gemm_rate;
using parallel::kernel_fit;
using parallel::kernel_kind;
using view = Kokkos::View<float*, Kokkos::HostSpace>;
using matrix = Kokkos::View<float**, Kokkos::LayoutRight, Kokkos::HostSpace>;
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
  // Products of the shapes a GPT step makes: tokens (or a sequence, for
  // attention's batched products) by features, each of m, n and k a power
  // of 2, which the planner reads by the nearest shape. Every power: a BLAS
  // kernel's rate is not smooth in the shape (here, OpenBLAS runs some
  // products with an extent of 256 at a third of the rate of 128 or 512).
  auto const powers = [](std::size_t from, std::size_t to) {
    std::vector<std::size_t> out;
    for (std::size_t x = from; x <= to; x *= 2) out.push_back(x);
    return out;
  };
  std::vector<std::size_t> const ms = quick ? powers(64, 1024) : powers(64, 4096);
  std::vector<std::size_t> const nks = quick ? powers(32, 512) : powers(32, 2048);
  // Up to 2^26 multiply-adds (about 4 ms here): larger products run at the largest ones' rate.
  for (std::size_t m : ms)
    for (std::size_t n : nks)
      for (std::size_t k : nks)
        if (m * n * k <= std::size_t{1} << 26) s.gemm_shapes.push_back({m, n, k, 0});
  for (std::size_t b = std::size_t{1} << 10; b <= (quick ? std::size_t{4} << 20 : std::size_t{64} << 20);
       b *= quick ? 16 : 4)
    s.message_bytes.push_back(b);
  s.elementwise_bytes = std::size_t{16} << 20;
  s.operand_bytes = std::size_t{64} << 20;
  s.kernel_elements = quick ? std::vector<std::size_t>{std::size_t{1} << 12, std::size_t{1} << 18}
                            : std::vector<std::size_t>{std::size_t{1} << 10, std::size_t{1} << 14, std::size_t{1} << 18,
                                                       std::size_t{1} << 21};
  s.repetitions = quick ? 5 : 15;
  return s;
}

namespace {

// The shapes' rates with operands of T (float, bf16 or fp16: sums in float).
template <class T>
std::vector<gemm_rate> measure_gemm_in(communicator const& world, calibration_sizes const& s, bool computes,
                                       parallel::precision compute) {
  // A step's operands are seldom in cache: its activations and weights were
  // written or last read many products before. So each call takes the next
  // of many copies of A, B and C, together larger than the caches.
  Kokkos::View<T*, Kokkos::HostSpace> const memory("operands", computes ? s.operand_bytes / sizeof(T) : 0);
  Kokkos::deep_copy(memory, static_cast<T>(1.0F));
  std::size_t next = 0;  // the copy the next call takes
  std::vector<gemm_rate> out;
  for (gemm_rate shape : s.gemm_shapes) {
    std::size_t const a_size = shape.m * shape.k, b_size = shape.k * shape.n, c_size = shape.m * shape.n;
    std::size_t const copies = std::max<std::size_t>(memory.size() / (a_size + b_size + c_size), 1);
    auto const operand = [&](std::size_t offset) {
      return memory.data() + (next % copies) * (a_size + b_size + c_size) + offset;
    };
    ops::gemm_shape const g{.m = shape.m, .n = shape.n, .k = shape.k};
    ops::gemm_strides const sa{.row = static_cast<std::ptrdiff_t>(shape.k), .col = 1};
    ops::gemm_strides const sb{.row = static_cast<std::ptrdiff_t>(shape.n), .col = 1};
    ops::gemm_strides const sc{.row = static_cast<std::ptrdiff_t>(shape.n), .col = 1};
    // Enough products per run that a run takes about a millisecond at 10 GFLOP/s.
    std::size_t const calls = std::max<std::size_t>(1, static_cast<std::size_t>(1e7 / shape.flops()));
    double const t = slowest_median(world, s.repetitions, [&] {
      if (!computes) return;
      for (std::size_t i = 0; i < calls; ++i, ++next)
        ops::local_gemm(exec{}, g, 1.0F, operand(0), sa, operand(a_size), sb, 0.0F, operand(a_size + b_size), sc);
      exec{}.fence();
    });
    shape.flops_per_second = static_cast<double>(calls) * shape.flops() / t;
    shape.compute = compute;
    out.push_back(shape);
  }
  return out;
}

}  // namespace

std::vector<gemm_rate> measure_gemm(communicator const& world, calibration_sizes const& s, bool computes) {
  std::vector<gemm_rate> out = measure_gemm_in<float>(world, s, computes, parallel::precision::fp32);
  for (auto const& more : {measure_gemm_in<bf16>(world, s, computes, parallel::precision::bf16),
                           measure_gemm_in<fp16>(world, s, computes, parallel::precision::fp16)})
    out.insert(out.end(), more.begin(), more.end());
  return out;
}

double measure_elementwise(communicator const& world, calibration_sizes const& s, bool computes) {
  std::size_t const n = s.elementwise_bytes / sizeof(float);
  view const x = filled("x", n), y = filled("y", n);
  double const t = slowest_median(world, s.repetitions, [&] {
    if (!computes) return;
    Kokkos::parallel_for(
        "shardmesh::calibrate::axpy", Kokkos::RangePolicy<exec>(0, n),
        KOKKOS_LAMBDA(std::size_t i) { y(i) += 0.5F * x(i); });
    exec{}.fence();
  });
  return 3.0 * static_cast<double>(n * sizeof(float)) / t;  // x and y read, y written
}

void keep_faster(std::vector<gemm_rate>& best, std::vector<gemm_rate> const& pass) {
  for (std::size_t i = 0; i < best.size() && i < pass.size(); ++i)
    best[i].flops_per_second = std::max(best[i].flops_per_second, pass[i].flops_per_second);
}

std::vector<kernel_series> measure_kernels(communicator const& world, calibration_sizes const& s, bool computes) {
  std::size_t const width = 128;  // a row: hidden features, or a sequence of scores
  std::vector<kernel_series> out;
  for (kernel_kind kind : parallel::kernel_kinds) {
    kernel_series series{kind, {}, {}};
    for (std::size_t n : s.kernel_elements) {
      std::size_t const rows = std::max<std::size_t>(n / width, 1);
      matrix const x("x", rows, width), y("y", rows, width), dy("dy", rows, width);
      Kokkos::deep_copy(x, 0.5F);
      Kokkos::deep_copy(dy, 0.25F);
      view const flat_x(x.data(), x.size()), flat_y(y.data(), y.size()), flat_dy(dy.data(), dy.size());
      view const gamma = filled("gamma", width), beta = filled("beta", width), d_gamma = filled("d_gamma", width),
                 d_beta = filled("d_beta", width);
      view const per_row = filled("per_row", rows), other = filled("other", rows), third = filled("third", rows);
      view const moment = filled("moment", x.size()), second = filled("second", x.size());
      Kokkos::View<int*, Kokkos::HostSpace> const ids("ids", rows);
      matrix const table("table", width, width);  // a vocabulary of `width` rows of `width` features
      double const t = slowest_median(world, s.repetitions, [&] {
        if (!computes) return;
        switch (kind) {
          case kernel_kind::add: ops::local::add(exec{}, flat_x, flat_dy, flat_y); break;
          case kernel_kind::fill: ops::local::fill(exec{}, flat_y, 0.0F); break;
          case kernel_kind::gelu_forward: ops::local::gelu_forward(exec{}, flat_x, flat_y); break;
          case kernel_kind::gelu_backward: ops::local::gelu_backward(exec{}, flat_x, flat_dy, flat_y); break;
          case kernel_kind::softmax_forward:
            ops::local::softmax_forward(exec{}, x, y, ops::local::causal_mask{width, 0, 0});
            break;
          case kernel_kind::softmax_backward: ops::local::softmax_backward(exec{}, x, dy, y); break;
          case kernel_kind::layer_norm_forward:
            ops::local::layer_norm_forward(exec{}, x, gamma, beta, 1e-5F, y, per_row, other);
            break;
          case kernel_kind::layer_norm_backward:
            ops::local::layer_norm_backward(exec{}, x, gamma, per_row, other, dy, y, d_gamma, d_beta, dy);
            break;
          case kernel_kind::cross_entropy_forward:
            ops::local::cross_entropy_parts(exec{}, x, per_row, ids, 0, other, third);
            break;
          case kernel_kind::cross_entropy_backward:
            ops::local::cross_entropy_backward(exec{}, x, per_row, other, ids, 0, 1.0F, y);
            break;
          case kernel_kind::embedding_forward: ops::local::embedding_forward(exec{}, ids, table, 0, y); break;
          case kernel_kind::embedding_backward: ops::local::embedding_backward(exec{}, ids, dy, 0, table); break;
          case kernel_kind::adamw:
            ops::local::apply_update(exec{},
                                     parallel::adamw{.lr = 1e-3, .beta2 = 0.95, .weight_decay = 0.1}.at<float>(1),
                                     flat_y, flat_dy, Kokkos::Array<view, 2>{moment, second}, 1.0);
            break;
        }
        exec{}.fence();
      });
      series.elements.push_back(static_cast<double>(x.size()));
      series.seconds.push_back(t);
    }
    out.push_back(std::move(series));
  }
  return out;
}

std::vector<collective_series> measure_collectives(communicator const& world, calibration_sizes const& s) {
  auto const ranks = static_cast<std::size_t>(world.size()), me = static_cast<std::size_t>(world.rank());
  std::vector<collective_series> out;
  std::vector<double> bytes;
  for (std::size_t b : s.message_bytes) bytes.push_back(static_cast<double>(b));
  for (std::size_t group = 2; group <= ranks; group *= 2) {
    if (ranks % group != 0) continue;
    communicator const g = world.split(static_cast<int>(me / group), static_cast<int>(me));
    for (collective_kind kind : parallel::collective_kinds)
      for (completion when : {completion::immediate, completion::deferred}) {
        bool const deferred = when == completion::deferred;
        if (kind == collective_kind::point_to_point && (group != 2 || deferred)) continue;
        if (kind == collective_kind::all_to_all && deferred) continue;  // a step posts these immediately
        std::vector<double> seconds;
        for (std::size_t b : s.message_bytes) {
          std::size_t const n = std::max<std::size_t>(b / sizeof(float) / group, 1) * group;  // whole blocks per rank
          view const send = filled("send", n), recv = filled("recv", n), part = filled("part", n / group);
          int const peer = g.rank() ^ 1;
          seconds.push_back(slowest_median(world, s.repetitions, [&] {
            switch (kind) {
              case collective_kind::all_reduce: iall_reduce(g, send, recv, reduce_op::sum, when, exec{}).wait(); break;
              case collective_kind::all_gather: iall_gather(g, part, recv, when, exec{}).wait(); break;
              case collective_kind::reduce_scatter:
                ireduce_scatter(g, send, part, reduce_op::sum, when, exec{}).wait();
                break;
              case collective_kind::all_to_all: iall_to_all(g, send, recv, when, exec{}).wait(); break;
              case collective_kind::point_to_point:  // one way: even ranks send, odd ranks receive
                (g.rank() % 2 == 0 ? isend(g, send, peer, 7, exec{}) : irecv(g, recv, peer, 7, exec{})).wait();
                break;
            }
          }));
        }
        out.push_back({kind, group, bytes, std::move(seconds), deferred});
      }
  }
  return out;
}

std::vector<parallel::stage_overhead> measure_stage_seconds(communicator const& world, calibration_sizes const& s,
                                                            bool computes) {
  using parallel::stage_kind;
  parallel::gpt_config const& c = tiny_gpt;
  std::size_t const kinds = std::size(parallel::stage_kinds);
  // Every value alike: the time does not depend on them.
  parallel::parameter_source const values = [declared = parallel::gpt_parameters(c)](std::string const& name) {
    parallel::parameter_spec const* p = parallel::find_parameter(declared, name);
    return std::vector<double>(p != nullptr ? p->elements() : 0, name.ends_with("_g") ? 1.0 : 0.01);
  };
  device_mesh const mesh(MPI_COMM_SELF, mesh_shape{{"dp", 1}, {"tp", 1}});  // no collective
  parallel::gpt<float, Kokkos::HostSpace> model(mesh, c, values);
  Kokkos::View<int**, Kokkos::LayoutRight, Kokkos::HostSpace> const tokens("tokens", 1, c.sequence);
  auto const ids = distribute<Kokkos::HostSpace>(mesh, model.layouts().ids, tokens);
  // Seconds of one forward and backward per kind, forward then backward.
  std::vector<double> run(2 * kinds);
  double started = 0;
  model.trace([&](parallel::stage_event const& e) {
    if (e.before) {
      started = MPI_Wtime();
      return;
    }
    stage_kind const k = parallel::decoder_stage_kind(c.layers, e.stage);
    double const share = k == stage_kind::block ? 1.0 / static_cast<double>(c.layers) : 1.0;
    run[2 * static_cast<std::size_t>(k) + (e.phase == "forward" ? 0 : 1)] += share * (MPI_Wtime() - started);
  });
  std::size_t const runs = 10 * s.repetitions;
  std::vector<std::vector<double>> seconds(2 * kinds);
  for (std::size_t i = 0; i < runs + 2 && computes; ++i) {
    std::fill(run.begin(), run.end(), 0.0);
    (void)model.forward(ids, ids);
    model.backward();
    for (std::size_t j = 0; i >= 2 && j < run.size(); ++j) seconds[j].push_back(run[j]);
  }
  std::vector<double> median(2 * kinds, 0.0);
  for (std::size_t j = 0; j < median.size() && computes; ++j) {
    std::ranges::nth_element(seconds[j], seconds[j].begin() + static_cast<std::ptrdiff_t>(runs / 2));
    median[j] = seconds[j][runs / 2];
  }
  MPI_Allreduce(MPI_IN_PLACE, median.data(), static_cast<int>(median.size()), MPI_DOUBLE, MPI_MAX, world.get());
  std::vector<parallel::stage_overhead> out;
  for (std::size_t k = 0; k < kinds; ++k) out.push_back({median[2 * k], median[2 * k + 1]});
  return out;
}

double measure_redistribution_overhead(communicator const& world, calibration_sizes const& s) {
  auto const ranks = static_cast<std::size_t>(world.size());
  device_mesh const mesh(world.get(), mesh_shape{{"dp", ranks}});
  Kokkos::View<float*, Kokkos::LayoutRight, Kokkos::HostSpace> const global("global", ranks);
  auto const x = distribute<Kokkos::HostSpace>(mesh, layout{shard("dp")}, global);
  view const part = filled("part", 1), recv = filled("recv", ranks);
  constexpr std::size_t calls = 50;
  double const direct = slowest_median(world, s.repetitions, [&] {
    for (std::size_t i = 0; i < calls; ++i) all_gather(world, part, recv, exec{});
  });
  double const library = slowest_median(world, s.repetitions, [&] {  // as ZeRO gathers a parameter
    for (std::size_t i = 0; i < calls; ++i) (void)redistribute_async(x, layout{replicated}).get();
  });
  return std::max(0.0, (library - direct) / static_cast<double>(calls));
}

double measure_sync_overhead(communicator const& world, calibration_sizes const& s) {
  constexpr std::size_t n = 128, products = 8, rounds = 20;  // about a millisecond of products a round here
  view const a = filled("a", n * n), b = filled("b", n * n), c = filled("c", n * n), one = filled("one", 1),
             sum = filled("sum", 1);
  ops::gemm_shape const g{.m = n, .n = n, .k = n};
  ops::gemm_strides const rows{.row = static_cast<std::ptrdiff_t>(n), .col = 1};
  auto const compute = [&] {
    for (std::size_t i = 0; i < products; ++i)
      ops::local_gemm(exec{}, g, 1.0F, a.data(), rows, b.data(), rows, 0.0F, c.data(), rows);
  };
  auto const reduce = [&] { all_reduce(world, one, sum, reduce_op::sum, exec{}); };
  double const both = slowest_median(world, s.repetitions, [&] {
    for (std::size_t r = 0; r < rounds; ++r) compute(), reduce();
  });
  double const computing = slowest_median(world, s.repetitions, [&] {
    for (std::size_t r = 0; r < rounds; ++r) compute();
  });
  double const reducing = slowest_median(world, s.repetitions, [&] {
    for (std::size_t r = 0; r < rounds; ++r) reduce();
  });
  return std::max(0.0, (both - computing - reducing) / static_cast<double>(rounds));
}

void keep_faster(parallel::hardware_model const& earlier, parallel::hardware_model& h,
                 std::vector<kernel_series>& kernels, std::vector<collective_series>& collectives) {
  for (gemm_rate& g : h.gemm)
    for (gemm_rate const& e : earlier.gemm)
      if (e.m == g.m && e.n == g.n && e.k == g.k && e.compute == g.compute)
        g.flops_per_second = std::max(g.flops_per_second, e.flops_per_second);
  h.elementwise_bytes_per_second = std::max(h.elementwise_bytes_per_second, earlier.elementwise_bytes_per_second);
  h.redistribution_overhead = std::min(h.redistribution_overhead, earlier.redistribution_overhead);
  h.sync_overhead = std::min(h.sync_overhead, earlier.sync_overhead);
  for (kernel_series& k : kernels)
    if (std::ranges::any_of(earlier.kernels, [&](kernel_fit const& f) { return f.kind == k.kind; }))
      for (std::size_t j = 0; j < k.seconds.size(); ++j)
        k.seconds[j] = std::min(k.seconds[j], earlier.kernel_seconds({k.kind, k.elements[j]}));
  for (collective_series& c : collectives)
    if (std::ranges::any_of(earlier.collectives, [&](collective_fit const& f) {
          return f.kind == c.kind && f.group == c.group && !f.between_nodes && f.deferred == c.deferred;
        }))
      for (std::size_t j = 0; j < c.seconds.size(); ++j)
        c.seconds[j] = std::min(c.seconds[j], earlier.collective_seconds(c.kind, c.group, c.bytes[j], 1, c.deferred));
}

}  // namespace planner_tool
