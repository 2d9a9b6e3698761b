#pragma once
// Which algorithm a mesh uses where two do the same work and which is
// faster depends on the machine and the MPI library:
//  - a reduce-scatter on one of its communicators: MPI's
//    MPI_Ireduce_scatter, or the ring on point-to-point messages
//    (comm/ring_reduce_scatter.hpp);
//  - an all-to-all whose pieces are strided on both sides (host memory):
//    MPI_Alltoallw on datatypes, or a node-shared window where the group
//    shares a node (comm/node_window.hpp), its copies storing through the
//    cache (which wins while the data stays in it) or streaming past it
//    (beyond; where the CPU streams, detail/streaming_copy.hpp).
// Chosen by measuring each, once per communicator and size class (a power
// of two of the bytes), the first time that class is asked for: five timed
// runs of each (three calls back to back) on a duplicate of the
// communicator (so the mesh's counters see none of them), the slowest
// rank's time per run, the median per algorithm (ours must win by 5%, else
// MPI's stays). The measurement is
// collective over the communicator and every rank gets the same answer.
// Nothing is tuned to one MPI library: a library whose collective reaches
// the bound keeps it. prefer() fixes a choice (for benchmarks and tests).
// The algorithms for one collective give the same result, except that a
// reduce-scatter's two sum in different orders.

#include "shardmesh/comm/communicator.hpp"
#include "shardmesh/comm/reduce_scatter.hpp"
#include "shardmesh/comm/ring_reduce_scatter.hpp"
#include "shardmesh/detail/streaming_copy.hpp"
#include "shardmesh/runtime/mesh_context.hpp"

#include <mpi.h>
#include <Kokkos_Core.hpp>

#include <algorithm>
#include <array>
#include <bit>
#include <cstddef>
#include <functional>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

namespace shardmesh {

enum class reduce_scatter_algorithm { automatic, mpi, ring };
enum class strided_all_to_all_algorithm { automatic, datatypes, node_window, node_window_streaming };

class collective_tuning {
 public:
  explicit collective_tuning(detail::mesh_context const&) {}

  void prefer(reduce_scatter_algorithm a) {
    std::lock_guard lock(mutex_);
    preferred_ = a;
  }
  void prefer(strided_all_to_all_algorithm a) {
    std::lock_guard lock(mutex_);
    preferred_strided_ = a;
  }

  // The algorithm for a reduce-scatter of `elements` T in blocks `counts`
  // on `group`. Collective over group the first time its size class comes.
  template <class T, class Space>
  reduce_scatter_algorithm reduce_scatter(communicator const& group, std::vector<std::size_t> const& counts,
                                          execution_space_of<Space> const& exec) {
    std::size_t elements = 0;
    for (std::size_t c : counts) elements += c;
    std::lock_guard lock(mutex_);
    if (preferred_ != reduce_scatter_algorithm::automatic) return preferred_;
    auto const key = std::pair(group.get(), std::bit_width(elements * sizeof(T)));
    auto it = chosen_.find(key);
    if (it == chosen_.end()) it = chosen_.emplace(key, measure<T, Space>(group, counts, exec)).first;
    return it->second;
  }

  // The algorithm for an all-to-all of `bytes` in all (the same on every
  // rank) over `group`, whose ranks share a node, of pieces strided on both
  // sides. run(a, comm) runs it once with algorithm a over comm (a copy of
  // group). Collective over group the first time its size class comes.
  template <class Run>
  strided_all_to_all_algorithm strided_all_to_all(communicator const& group, std::size_t bytes, Run&& run) {
    std::lock_guard lock(mutex_);
    if (preferred_strided_ != strided_all_to_all_algorithm::automatic) return preferred_strided_;
    auto const key = std::pair(group.get(), std::bit_width(bytes));
    auto it = chosen_strided_.find(key);
    if (it == chosen_strided_.end()) {
      communicator const copy = duplicate(group);
      std::vector<strided_all_to_all_algorithm> candidates{strided_all_to_all_algorithm::datatypes,
                                                           strided_all_to_all_algorithm::node_window};
      // Every rank times the same algorithms: whether the CPU streams is agreed.
      int streams = detail::streams() ? 1 : 0;
      MPI_Allreduce(MPI_IN_PLACE, &streams, 1, MPI_INT, MPI_MIN, copy.get());
      if (streams == 1) candidates.push_back(strided_all_to_all_algorithm::node_window_streaming);
      std::vector<std::function<void()>> runs;
      for (auto const a : candidates) runs.emplace_back([&run, &copy, a] { run(a, copy); });
      it = chosen_strided_.emplace(key, candidates[fastest(copy, runs)]).first;
    }
    return it->second;
  }

 private:
  template <class T, class Space>
  static reduce_scatter_algorithm measure(communicator const& group, std::vector<std::size_t> const& counts,
                                          execution_space_of<Space> const& exec) {
    communicator const comm = duplicate(group);
    std::size_t total = 0;
    for (std::size_t c : counts) total += c;
    Kokkos::View<T*, Space> data("shardmesh::tuning", total),
        recv("shardmesh::tuning", counts[static_cast<std::size_t>(comm.rank())]),
        scratch("shardmesh::tuning", *std::max_element(counts.begin(), counts.end()));
    std::size_t const chosen = fastest(
        comm, {[&] { ireduce_scatter_v(comm, data, recv, counts, reduce_op::sum, completion::deferred, exec).wait(); },
               [&] { ring_reduce_scatter<T, Space>(comm, data, recv, counts, 0, scratch, exec).wait(); }});
    return chosen == 1 ? reduce_scatter_algorithm::ring : reduce_scatter_algorithm::mpi;
  }

  static communicator duplicate(communicator const& group) {
    MPI_Comm copy = MPI_COMM_NULL;
    MPI_Comm_dup(group.get(), &copy);
    return communicator::adopt(copy);
  }

  // Which of `runs` runs fastest on comm: each warmed up once, then five
  // rounds of one timed run of each, the slowest rank's time per run, the
  // medians compared. A timed run is three calls back to back, as a time
  // loop makes them (where ranks outnumber cores, an algorithm that
  // synchronizes often loses to descheduled peers there, not after a
  // barrier). runs[0] is MPI's own collective: another must beat it by 5%,
  // more than a loaded machine's noise, else it stays. Collective over comm.
  static std::size_t fastest(communicator const& comm, std::vector<std::function<void()>> const& runs) {
    auto const time = [&](std::function<void()> const& run) {
      MPI_Barrier(comm.get());
      double const start = MPI_Wtime();
      for (int call = 0; call < 3; ++call) run();
      return MPI_Wtime() - start;
    };
    for (auto const& run : runs) (void)time(run);  // warm up each
    constexpr std::size_t rounds = 5;
    std::vector<std::array<double, rounds>> times(runs.size());
    for (std::size_t k = 0; k < rounds; ++k) {
      std::vector<double> round;
      for (auto const& run : runs) round.push_back(time(run));
      MPI_Allreduce(MPI_IN_PLACE, round.data(), static_cast<int>(round.size()), MPI_DOUBLE, MPI_MAX,
                    comm.get());  // the slowest rank's
      for (std::size_t i = 0; i < runs.size(); ++i) times[i][k] = round[i];
    }
    std::vector<double> median;
    for (auto& t : times) {
      std::sort(t.begin(), t.end());
      median.push_back(t[rounds / 2]);
    }
    std::size_t best = 0;
    for (std::size_t i = 1; i < runs.size(); ++i)
      if (median[i] < 0.95 * median[0] && (best == 0 || median[i] < median[best])) best = i;
    return best;
  }

  std::mutex mutex_;
  reduce_scatter_algorithm preferred_ = reduce_scatter_algorithm::automatic;
  strided_all_to_all_algorithm preferred_strided_ = strided_all_to_all_algorithm::automatic;
  std::map<std::pair<MPI_Comm, int>, reduce_scatter_algorithm> chosen_;
  std::map<std::pair<MPI_Comm, int>, strided_all_to_all_algorithm> chosen_strided_;
};

}  // namespace shardmesh
