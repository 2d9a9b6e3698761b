#pragma once
// Which algorithm a mesh uses where two do the same work and which is
// faster depends on the machine and the MPI library:
//  - a reduce-scatter on one of its communicators: MPI's
//    MPI_Ireduce_scatter, or the ring on point-to-point messages
//    (comm/ring_reduce_scatter.hpp);
//  - an all-to-all whose pieces are strided on both sides (host memory):
//    MPI_Alltoallw on datatypes, or a node-shared window where the group
//    shares a node (comm/node_window.hpp; the window wins while the data
//    stays in cache, MPI's single copy beyond).
// Chosen by measuring both, once per communicator and size class (a power
// of two of the bytes), the first time that class is asked for: five timed
// runs of each on a duplicate of the communicator (so the mesh's counters
// see none of them), the slowest rank's time per run, the median per
// algorithm (ours must win by 5%, else MPI's stays). The measurement is
// collective over the communicator and every rank gets the same answer. Nothing is tuned to one MPI library: a library
// whose collective reaches the bound keeps it. prefer() fixes a choice (for
// benchmarks and tests). Both algorithms of a pair give the same result,
// except that a reduce-scatter's two sum in different orders.

#include "shardmesh/comm/communicator.hpp"
#include "shardmesh/comm/reduce_scatter.hpp"
#include "shardmesh/comm/ring_reduce_scatter.hpp"
#include "shardmesh/runtime/mesh_context.hpp"

#include <mpi.h>
#include <Kokkos_Core.hpp>

#include <algorithm>
#include <array>
#include <bit>
#include <cstddef>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

namespace shardmesh {

enum class reduce_scatter_algorithm { automatic, mpi, ring };
enum class strided_all_to_all_algorithm { automatic, datatypes, node_window };

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
      bool const window_faster = second_faster(
          copy, [&] { run(strided_all_to_all_algorithm::datatypes, copy); },
          [&] { run(strided_all_to_all_algorithm::node_window, copy); });
      it = chosen_strided_
               .emplace(key, window_faster ? strided_all_to_all_algorithm::node_window
                                           : strided_all_to_all_algorithm::datatypes)
               .first;
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
    bool const ring_faster = second_faster(
        comm, [&] { ireduce_scatter_v(comm, data, recv, counts, reduce_op::sum, completion::deferred, exec).wait(); },
        [&] { ring_reduce_scatter<T, Space>(comm, data, recv, counts, 0, scratch, exec).wait(); });
    return ring_faster ? reduce_scatter_algorithm::ring : reduce_scatter_algorithm::mpi;
  }

  static communicator duplicate(communicator const& group) {
    MPI_Comm copy = MPI_COMM_NULL;
    MPI_Comm_dup(group.get(), &copy);
    return communicator::adopt(copy);
  }

  // Whether `second` runs faster than `first` on comm: each warmed up once,
  // then five timed runs of each, the slowest rank's time per run, the
  // medians compared; `second` must win by 5%, more than a loaded machine's
  // noise, else MPI's own collective (`first`) stays. Collective over comm.
  template <class First, class Second>
  static bool second_faster(communicator const& comm, First&& first, Second&& second) {
    auto const time = [&](auto&& run) {
      MPI_Barrier(comm.get());
      double const start = MPI_Wtime();
      run();
      return MPI_Wtime() - start;
    };
    (void)time(first);  // warm up both
    (void)time(second);
    std::array<std::array<double, 2>, 5> runs{};
    for (auto& run : runs) {
      run = {time(first), time(second)};
      MPI_Allreduce(MPI_IN_PLACE, run.data(), 2, MPI_DOUBLE, MPI_MAX, comm.get());  // the slowest rank's
    }
    auto const median = [&](std::size_t i) {
      std::array<double, runs.size()> t{};
      for (std::size_t k = 0; k < runs.size(); ++k) t[k] = runs[k][i];
      std::sort(t.begin(), t.end());
      return t[t.size() / 2];
    };
    return median(1) < 0.95 * median(0);
  }

  std::mutex mutex_;
  reduce_scatter_algorithm preferred_ = reduce_scatter_algorithm::automatic;
  strided_all_to_all_algorithm preferred_strided_ = strided_all_to_all_algorithm::automatic;
  std::map<std::pair<MPI_Comm, int>, reduce_scatter_algorithm> chosen_;
  std::map<std::pair<MPI_Comm, int>, strided_all_to_all_algorithm> chosen_strided_;
};

}  // namespace shardmesh
