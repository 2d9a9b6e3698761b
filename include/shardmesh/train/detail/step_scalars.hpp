#pragma once
// The numbers a training step sums over the whole mesh, kept in the
// model's memory until the step reads them once, together, after its
// reductions: no host round trip per micro-batch or per parameter.
//   - the loss: added by the first rank of the last stage's mesh (every rank
//     of that stage holds the same loss; the other stages have none);
//   - the targets that count, per micro-batch: every rank counts its shard,
//     so the sum counts each target once per copy of it (divided out on the
//     host, exactly: the counts are integers);
//   - each parameter's counted sum of squares (each element once).
// The read is one all-reduce over the mesh and one copy to the host.

#include "shardmesh/comm/all_reduce.hpp"
#include "shardmesh/comm/communicator.hpp"
#include "shardmesh/comm/memory_kind.hpp"

#include <Kokkos_Core.hpp>

#include <cstddef>
#include <vector>

namespace shardmesh::parallel::detail {

template <class MemorySpace>
class step_scalars {
 public:
  using exec_type = execution_space_of<MemorySpace>;
  using slot = Kokkos::View<double, MemorySpace, Kokkos::MemoryUnmanaged>;

  struct totals {
    double loss = 0, squares = 0;
    std::vector<double> counted;  // per micro-batch, summed over every rank
  };

  // Zeroed slots for a step of this many micro-batches and parameters.
  void begin(std::size_t micro_batches, std::size_t parameters, exec_type const& exec) {
    micro_ = micro_batches;
    parameters_ = parameters;
    host_loss_ = 0;
    std::size_t const n = 1 + micro_ + parameters_;
    if (slots_.extent(0) != n)
      slots_ = Kokkos::View<double*, MemorySpace>(
          Kokkos::view_alloc("shardmesh::step_scalars", Kokkos::WithoutInitializing), n);
    if (sums_.extent(0) != 2 + micro_) {
      sums_ = Kokkos::View<double*, MemorySpace>(
          Kokkos::view_alloc("shardmesh::step_sums", Kokkos::WithoutInitializing), 2 + micro_);
      host_ = Kokkos::create_mirror_view(sums_);
    }
    Kokkos::deep_copy(exec, slots_, 0.0);
  }

  [[nodiscard]] slot counted(std::size_t micro) const { return slot(slots_.data() + 1 + micro); }
  [[nodiscard]] slot squares(std::size_t parameter) const { return slot(slots_.data() + 1 + micro_ + parameter); }

  // Adds a micro-batch's loss: a device_scalar stays where it is; a number
  // (a model whose loss the host already holds) is added at the read.
  template <class Loss>
  void add_loss(Loss const& loss, exec_type const& exec) {
    if constexpr (requires { loss.view(); })
      add_device_loss(loss.view(), exec);
    else
      host_loss_ += static_cast<double>(loss);
  }
  template <class View>
  void add_device_loss(View const& from, exec_type const& exec) {
    auto const to = slots_;
    Kokkos::parallel_for(
        "shardmesh::step_loss", Kokkos::RangePolicy<exec_type>(exec, 0, 1),
        KOKKOS_LAMBDA(int) { to(0) += static_cast<double>(from()); });
  }

  // Every slot summed over comm's ranks, read by the host once.
  [[nodiscard]] totals read(communicator const& comm, exec_type const& exec) {
    auto const slots = slots_;
    auto const sums = sums_;
    std::size_t const micro = micro_, parameters = parameters_;
    double const host_loss = host_loss_;
    Kokkos::parallel_for(
        "shardmesh::step_sums", Kokkos::RangePolicy<exec_type>(exec, 0, 1), KOKKOS_LAMBDA(int) {
          sums(0) = slots(0) + host_loss;
          double squares = 0;
          for (std::size_t p = 0; p < parameters; ++p) squares += slots(1 + micro + p);
          sums(1) = squares;
          for (std::size_t m = 0; m < micro; ++m) sums(2 + m) = slots(1 + m);
        });
    all_reduce(comm, sums, reduce_op::sum, exec);
    Kokkos::deep_copy(exec, host_, sums);
    exec.fence("shardmesh::step_scalars: the step's one read");
    totals t{host_(0), host_(1), std::vector<double>(micro_)};
    for (std::size_t m = 0; m < micro_; ++m) t.counted[m] = host_(2 + m);
    return t;
  }

 private:
  std::size_t micro_ = 0, parameters_ = 0;
  double host_loss_ = 0;
  Kokkos::View<double*, MemorySpace> slots_;  // the loss, counted per micro-batch, squares per parameter
  Kokkos::View<double*, MemorySpace> sums_;   // the loss, the squares, counted per micro-batch
  typename Kokkos::View<double*, MemorySpace>::host_mirror_type host_;
};

}  // namespace shardmesh::parallel::detail
