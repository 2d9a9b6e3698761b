#pragma once
// Which algorithm a mesh uses for a reduce-scatter on one of its
// communicators: MPI's MPI_Ireduce_scatter, or the ring on point-to-point
// messages (comm/ring_reduce_scatter.hpp). Chosen by measuring both, once
// per communicator and size class (a power of two of the bytes), the first
// time a reduce-scatter of that class is asked for: three timed runs of
// each on a duplicate of the communicator (so the mesh's counters see none
// of them), the slowest rank's time per run, the median per algorithm. The
// measurement is collective over the communicator and every rank gets the
// same answer. Nothing is tuned to one MPI library: a library whose
// reduce-scatter reaches the bound keeps it. prefer() fixes the choice
// (for benchmarks and tests).

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

class collective_tuning {
 public:
  explicit collective_tuning(detail::mesh_context const&) {}

  void prefer(reduce_scatter_algorithm a) {
    std::lock_guard lock(mutex_);
    preferred_ = a;
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

 private:
  template <class T, class Space>
  static reduce_scatter_algorithm measure(communicator const& group, std::vector<std::size_t> const& counts,
                                          execution_space_of<Space> const& exec) {
    MPI_Comm copy = MPI_COMM_NULL;
    MPI_Comm_dup(group.get(), &copy);
    communicator const comm = communicator::adopt(copy);
    std::size_t total = 0;
    for (std::size_t c : counts) total += c;
    Kokkos::View<T*, Space> data("shardmesh::tuning", total),
        recv("shardmesh::tuning", counts[static_cast<std::size_t>(comm.rank())]),
        scratch("shardmesh::tuning", *std::max_element(counts.begin(), counts.end()));
    auto const time = [&](reduce_scatter_algorithm a) {
      MPI_Barrier(comm.get());
      double const start = MPI_Wtime();
      if (a == reduce_scatter_algorithm::ring)
        ring_reduce_scatter<T, Space>(comm, data, recv, counts, 0, scratch, exec).wait();
      else
        ireduce_scatter_v(comm, data, recv, counts, reduce_op::sum, completion::deferred, exec).wait();
      return MPI_Wtime() - start;
    };
    (void)time(reduce_scatter_algorithm::mpi);  // warm up both
    (void)time(reduce_scatter_algorithm::ring);
    std::array<std::array<double, 2>, 3> runs{};
    for (auto& run : runs) {
      run = {time(reduce_scatter_algorithm::mpi), time(reduce_scatter_algorithm::ring)};
      MPI_Allreduce(MPI_IN_PLACE, run.data(), 2, MPI_DOUBLE, MPI_MAX, comm.get());  // the slowest rank's
    }
    auto const median = [&](std::size_t i) {
      std::array<double, 3> t{runs[0][i], runs[1][i], runs[2][i]};
      std::sort(t.begin(), t.end());
      return t[1];
    };
    return median(1) < median(0) ? reduce_scatter_algorithm::ring : reduce_scatter_algorithm::mpi;
  }

  std::mutex mutex_;
  reduce_scatter_algorithm preferred_ = reduce_scatter_algorithm::automatic;
  std::map<std::pair<MPI_Comm, int>, reduce_scatter_algorithm> chosen_;
};

}  // namespace shardmesh
