#include "measure.hpp"

#include <shardmesh/algebra/axis_groups.hpp>
#include <shardmesh/algebra/plan_traffic.hpp>
#include <shardmesh/comm/mpi_types.hpp>
#include <shardmesh/runtime/workspace.hpp>
#include <shardmesh/tensor/redistributor.hpp>

#include <mpi.h>
#include <Kokkos_Core.hpp>

#include <algorithm>
#include <complex>
#include <cstdint>
#include <functional>
#include <string_view>
#include <type_traits>
#include <utility>

namespace bench_tool {

namespace {

using namespace shardmesh;
using plan_tool::plan_report;
using plan_tool::request;
using space = Kokkos::DefaultExecutionSpace::memory_space;

std::size_t world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return static_cast<std::size_t>(r);
}

// Runs body() between barriers; the slowest rank's time and that rank.
template <class Body>
std::pair<double, std::size_t> slowest(Body&& body) {
  MPI_Barrier(MPI_COMM_WORLD);
  double const start = MPI_Wtime();
  body();
  struct {
    double time;
    int rank;
  } mine{MPI_Wtime() - start, static_cast<int>(world_rank())}, most{};
  MPI_Allreduce(&mine, &most, 1, MPI_DOUBLE_INT, MPI_MAXLOC, MPI_COMM_WORLD);
  return {most.time, static_cast<std::size_t>(most.rank)};
}

// Every rank's value, on every rank.
std::vector<std::size_t> from_every_rank(std::size_t mine) {
  int ranks = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  auto const value = static_cast<std::uint64_t>(mine);
  std::vector<std::uint64_t> all(static_cast<std::size_t>(ranks));
  MPI_Allgather(&value, 1, MPI_UINT64_T, all.data(), 1, MPI_UINT64_T, MPI_COMM_WORLD);
  return {all.begin(), all.end()};
}

template <class View>
View allocate(std::string const& label, tensor_index const& e) {
  return [&]<std::size_t... D>(std::index_sequence<D...>) {
    return View(Kokkos::view_alloc(Kokkos::WithoutInitializing, label), e[D]...);
  }(std::make_index_sequence<View::rank()>{});
}

// Small values: sums, products and extrema of a few ranks' stay in range.
template <class T>
T value(std::size_t k) {
  if constexpr (std::is_same_v<T, bool>)
    return k % 2 == 1;
  else if constexpr (std::is_arithmetic_v<T>)
    return static_cast<T>(1 + k % 2);
  else
    return T(static_cast<typename T::value_type>(1 + k % 2));
}

template <class View>
void fill(View const& v, std::size_t salt) {
  auto host = Kokkos::create_mirror_view(Kokkos::WithoutInitializing, v);
  using T = typename View::non_const_value_type;
  for (std::size_t i = 0; i < host.size(); ++i) host.data()[i] = value<T>(i * 7 + salt);
  Kokkos::deep_copy(v, host);
}

std::size_t per_member(std::size_t elements, std::size_t members) {
  return members > 1 ? (elements + members - 2) / (members - 1) : 0;
}

// The plan's communicating steps as the raw MPI call each makes, on the
// same communicators, moving what the busiest rank receives in that step to
// every rank: equal blocks, no pack or unpack, buffers made once. Buffers
// are in the tensor's memory space when MPI can read it, else on the host.
template <class T>
class ceiling {
 public:
  ceiling(device_mesh const& mesh, request const& r, plan_report const& p) {
    struct call {
      step_kind kind;
      MPI_Comm comm;
      int count;
      int peer;
      MPI_Op op;
    };
    std::vector<call> calls;
    std::size_t send = 0;
    std::size_t recv = 0;
    std::size_t const me = mesh.rank();
    for (plan_tool::step_report const& step : p.steps) {
      plan_step const& s = step.step;
      if (!communicates(s.kind)) continue;
      std::size_t const n = group_size(mesh.shape(), s.axes);
      std::size_t const most = plan_tool::most(step.bytes) / sizeof(T);
      call c{s.kind, s.kind == step_kind::permute ? mesh.comm().get() : mesh.group(s.axes).get(), 0, -1,
             mpi_op(s.before.op)};
      std::size_t count = 0;
      switch (s.kind) {
        case step_kind::all_gather:
          count = per_member(most, n);
          send = std::max(send, count);
          recv = std::max(recv, n * count);
          break;
        case step_kind::all_to_all:
        case step_kind::all_to_all_v:
        case step_kind::reduce_scatter:
          count = per_member(most, n);
          send = std::max(send, n * count);
          recv = std::max(recv, s.kind == step_kind::reduce_scatter ? count : n * count);
          break;
        case step_kind::all_reduce:
          for (std::size_t rank = 0; rank < mesh.size(); ++rank)
            count = std::max(count, local_size(mesh.shape(), s.after, r.global, rank));
          send = std::max(send, count);
          recv = std::max(recv, count);
          break;
        case step_kind::permute: {
          std::size_t const peer = permutation_source(mesh.shape(), s.axes, me);
          count = std::max(step.bytes[me], step.bytes[peer]) / sizeof(T);
          c.peer = peer == me ? -1 : static_cast<int>(peer);
          send = std::max(send, count);
          recv = std::max(recv, count);
          break;
        }
        default: break;
      }
      c.count = static_cast<int>(count);
      calls.push_back(c);
      names_ += (names_.empty() ? "" : " + ") + std::string(mpi_name(s.kind)) + "(" +
                std::string(axis_names_of(mesh.shape(), s.axes).view()) + ")";
    }
    T* out = nullptr;
    T* in = nullptr;
    if (needs_staging<space>(mesh.comm().staging())) {
      host_send_ = Kokkos::View<T*, Kokkos::HostSpace>("shardmesh-bench::mpi_send", send);
      host_recv_ = Kokkos::View<T*, Kokkos::HostSpace>("shardmesh-bench::mpi_recv", recv);
      out = host_send_.data();
      in = host_recv_.data();
    } else {
      send_ = Kokkos::View<T*, space>("shardmesh-bench::mpi_send", send);
      recv_ = Kokkos::View<T*, space>("shardmesh-bench::mpi_recv", recv);
      out = send_.data();
      in = recv_.data();
    }
    MPI_Datatype const type = mpi_type<T>();
    for (call const& c : calls)
      runs_.push_back([c, out, in, type] {
        switch (c.kind) {
          case step_kind::all_gather: MPI_Allgather(out, c.count, type, in, c.count, type, c.comm); break;
          case step_kind::reduce_scatter: MPI_Reduce_scatter_block(out, in, c.count, type, c.op, c.comm); break;
          case step_kind::all_reduce: MPI_Allreduce(out, in, c.count, type, c.op, c.comm); break;
          case step_kind::permute:
            if (c.peer >= 0)
              MPI_Sendrecv(out, c.count, type, c.peer, 0, in, c.count, type, c.peer, 0, c.comm, MPI_STATUS_IGNORE);
            break;
          default: MPI_Alltoall(out, c.count, type, in, c.count, type, c.comm); break;
        }
      });
  }

  void operator()() const {
    for (auto const& run : runs_) run();
  }
  [[nodiscard]] std::string const& names() const { return names_; }

 private:
  static std::string_view mpi_name(step_kind kind) {
    switch (kind) {
      case step_kind::all_gather: return "MPI_Allgather";
      case step_kind::reduce_scatter: return "MPI_Reduce_scatter_block";
      case step_kind::all_reduce: return "MPI_Allreduce";
      case step_kind::permute: return "MPI_Sendrecv";
      default: return "MPI_Alltoall";
    }
  }

  Kokkos::View<T*, space> send_;
  Kokkos::View<T*, space> recv_;
  Kokkos::View<T*, Kokkos::HostSpace> host_send_;
  Kokkos::View<T*, Kokkos::HostSpace> host_recv_;
  std::vector<std::function<void()>> runs_;
  std::string names_;
};

template <class T, std::size_t Rank>
measurement run(device_mesh const& mesh, request const& r, plan_report const& p, settings const& s) {
  using tensor = dynamic_dtensor<T, Rank, space>;
  using view = typename tensor::view_type;
  std::size_t const me = mesh.rank();
  typename tensor::extents_type global{};
  for (std::size_t d = 0; d < Rank; ++d) global[d] = r.global[d];
  measurement out;
  {
    view const in =
        allocate<view>("shardmesh-bench::x", local_extents(mesh.shape(), bind(mesh.shape(), r.from), r.global, me));
    fill(in, me);
    tensor const x(mesh, r.from, global, in);
    tensor y(
        mesh, p.target, global,
        allocate<view>("shardmesh-bench::y", local_extents(mesh.shape(), bind(mesh.shape(), p.target), r.global, me)));
    redistributor<T, Rank, space> const to_target(x, p.target);
    ceiling<T> const mpi(mesh, r, p);
    out.mpi_calls = mpi.names();
    for (std::size_t i = 0; i < s.warmup; ++i) {
      to_target(x, y);
      mpi();
    }

    mesh.counters().reset();
    mesh.ledger().reset_peaks();
    std::vector<double> ours;
    std::vector<double> theirs;
    std::vector<std::size_t> slowest_count(mesh.size(), 0);
    for (std::size_t i = 0; i < s.repetitions; ++i) {
      auto const [time, rank] = slowest([&] { to_target(x, y); });
      ours.push_back(time);
      ++slowest_count[rank];
      if (!out.mpi_calls.empty()) theirs.push_back(slowest(mpi).first);
    }
    out.time = summarize(ours);
    if (!theirs.empty()) out.mpi = summarize(theirs);
    auto const most = std::max_element(slowest_count.begin(), slowest_count.end());
    out.slowest_rank = static_cast<std::size_t>(most - slowest_count.begin());
    out.slowest_runs = *most;

    std::size_t const received = mesh.counters().total().bytes_received;
    out.moved = from_every_rank(received / s.repetitions);
    for (std::size_t const whole : from_every_rank(received % s.repetitions == 0 ? 1 : 0))
      out.moved_whole = out.moved_whole && whole == 1;
    out.peak_extra = from_every_rank(mesh.ledger().peak(memory_category::workspace));
  }
  workspace_of<space>(mesh).release_all();  // the next case, perhaps larger, starts from nothing
  return out;
}

using runner = measurement (*)(device_mesh const&, request const&, plan_report const&, settings const&);

template <class T>
runner runner_of(std::size_t rank) {
  switch (rank) {
    case 1: return &run<T, 1>;
    case 2: return &run<T, 2>;
    case 3: return &run<T, 3>;
    case 4: return &run<T, 4>;
    case 5: return &run<T, 5>;
    case 6: return &run<T, 6>;
    default: return nullptr;
  }
}

struct element {
  std::string_view name;
  runner (*of_rank)(std::size_t);
};

template <class T>
element element_of() {
  return {element_name<T>(), &runner_of<T>};
}

// The types of plan_tool::element_types.
std::vector<element> const elements = {
    element_of<float>(),
    element_of<double>(),
    element_of<std::int8_t>(),
    element_of<std::int16_t>(),
    element_of<std::int32_t>(),
    element_of<std::int64_t>(),
    element_of<std::uint8_t>(),
    element_of<std::uint16_t>(),
    element_of<std::uint32_t>(),
    element_of<std::uint64_t>(),
    element_of<bool>(),
    element_of<std::complex<float>>(),
    element_of<std::complex<double>>(),
};

}  // namespace

timing summarize(std::vector<double> seconds) {
  if (seconds.empty()) return {};
  std::sort(seconds.begin(), seconds.end());
  std::size_t const n = seconds.size();
  double const median = n % 2 == 1 ? seconds[n / 2] : (seconds[n / 2 - 1] + seconds[n / 2]) / 2;
  return {median, seconds.front(), seconds.back()};
}

std::size_t measurement::most_moved() const { return plan_tool::most(moved); }
std::size_t measurement::most_peak_extra() const { return plan_tool::most(peak_extra); }

measurement measure(device_mesh const& mesh, request const& r, plan_report const& p, settings const& s) {
  for (element const& e : elements)
    if (e.name == r.type.name) return e.of_rank(r.rank)(mesh, r, p, s);
  throw invalid_layout_error("shardmesh-bench: no element type " + std::string(r.type.name));
}

}  // namespace bench_tool
