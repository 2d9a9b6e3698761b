#pragma once
// A redistribution checked and planned once, run many times: the persistent
// form for loops, as MPI has persistent collectives.
//
//   redistributor const to_cols(x, cols);  // collective: every rank agrees, the plan is made
//   for (...) {
//     ...
//     to_cols(x, y);                        // only the plan's kernels and collectives
//   }
//
// Construction runs redistribute's checks (the same exception on every
// rank). Each run then checks, on its own rank only, that x and y are on the
// mesh, in the layouts and of the global extents it was made for, and that
// they do not overlap. Like MPI's calls, every rank must run the same
// redistributor at the same point; a run given other tensors on some rank
// cannot be told to the other ranks without a collective (which would cost
// each run what this form saves), and they may already wait in the plan's
// first collective, so it ends the job with a message naming the rank.

#include "shardmesh/tensor/detail/agreement.hpp"
#include "shardmesh/tensor/redistribute.hpp"

#include <string>

namespace shardmesh {

template <class T, std::size_t Rank, class MemorySpace>
class redistributor {
 public:
  using tensor = dynamic_dtensor<T, Rank, MemorySpace>;
  using execution_space = execution_space_of<MemorySpace>;

  redistributor(dynamic_dtensor<T, Rank, MemorySpace> const& x, layout const& to)
      : mesh_((require_held("redistributor", x), x.mesh())), from_(x.layout()), to_(to), global_(x.global_extents()) {
    detail::agree_on_transition(x, to, static_cast<tensor const*>(nullptr));
    (void)mesh_.plan(x.bound(), bind(mesh_.shape(), to));  // plan now, not in the first run
  }

  // y's shard receives x in layout `to`; kernels on exec.
  void operator()(tensor const& x, tensor& y, execution_space const& exec = {}) const {
    check(x, y);
    redistribution<tensor>(x, to_, &y, completion::immediate, exec, detail::agreement::done).wait();
  }

  // The same, returning at once; y is written once the redistribution completes.
  [[nodiscard]] redistribution<tensor> start(tensor const& x, tensor& y, execution_space const& exec = {}) const {
    check(x, y);
    return {x, to_, &y, completion::deferred, exec, detail::agreement::done};
  }

  [[nodiscard]] layout const& from() const { return from_; }
  [[nodiscard]] layout const& to() const { return to_; }

 private:
  void check(tensor const& x, tensor const& y) const {
    require_held("redistributor", x, y);
    auto const fail = [&](std::string const& why) {
      detail::end_job(mesh_, "redistributor " + std::string(to_string(from_).view()) + " -> " +
                                 std::string(to_string(to_).view()) + ": " + why);
    };
    if (x.mesh() != mesh_) fail("the input is on another mesh");
    if (x.layout() != from_ || x.global_extents() != global_) fail("the input is " + x.notation());
    if (y.layout() != to_) fail("the output is " + y.notation());
    if (detail::output_problem const p = detail::output_problem_of(x, y); p != detail::output_problem::none)
      fail("the output " + std::string(detail::describe(p)));
  }

  device_mesh mesh_;
  layout from_;
  layout to_;
  tensor_index global_{};
};

}  // namespace shardmesh
