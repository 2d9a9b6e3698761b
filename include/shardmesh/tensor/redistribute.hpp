#pragma once
// Moving a dtensor to another layout by running the algebra's plan:
//
//   auto y = redistribute<cols>(x);              // blocking
//   auto pending = redistribute_async<cols>(x);  // returns at once
//   ... compute ...
//   auto y = pending.get();
//   redistribute(x, y);                          // into y's shard, in y's layout
//
// Collective over the mesh. The input is checked on every rank before any
// data moves (same exception everywhere on bad input). The result always
// owns its memory: when the layouts are equal (which can depend on the mesh:
// an axis of extent 1 shards nothing) it is a copy, so code correct on one
// mesh stays correct on another. Sharing the input when nothing moves is the
// explicit choice of ops::to_layout.
//
// Every form takes an execution-space instance last (the memory space's
// default instance if omitted): the kernels run on it, and only it is
// fenced, before MPI reads a buffer and when the result is complete. The
// input may still be being written by a kernel on that instance.

#include "shardmesh/algebra/hash.hpp"
#include "shardmesh/algebra/plan_traffic.hpp"
#include "shardmesh/algebra/planner.hpp"
#include "shardmesh/algebra/validation.hpp"
#include "shardmesh/errors.hpp"
#include "shardmesh/runtime/workspace.hpp"
#include "shardmesh/tensor/detail/agreement.hpp"
#include "shardmesh/tensor/detail/step_execution.hpp"
#include "shardmesh/tensor/dtensor.hpp"

#include <Kokkos_Core.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <source_location>
#include <string>
#include <utility>
#include <vector>

namespace shardmesh {

namespace detail {

// Why `into` cannot take x's redistribution on this rank, if it cannot.
template <class T, std::size_t Rank, class MemorySpace>
output_problem output_problem_of(dynamic_dtensor<T, Rank, MemorySpace> const& x,
                                 dynamic_dtensor<T, Rank, MemorySpace> const& into) {
  if (into.mesh() != x.mesh()) return output_problem::other_mesh;
  if (into.global_extents() != x.global_extents()) return output_problem::other_extents;
  T const* a = x.local().data();
  T const* b = into.local().data();
  if (a < b + into.local().size() && b < a + x.local().size()) return output_problem::aliases_input;
  return output_problem::none;
}

// Why x cannot move to `to`, or empty. The same on every rank that agrees
// on x and `to`.
template <class T, std::size_t Rank, class MemorySpace>
std::string transition_problem(dynamic_dtensor<T, Rank, MemorySpace> const& x, layout const& to) {
  std::string problem = x.layout_problem("redistribute", to);
  if (problem.empty()) {
    fixed_text const m = transition_error("redistribute", x.mesh().shape(), x.layout(), to);
    if (!m.empty()) problem = tensor_name(element_name<T>(), Rank, x.global_extents()) + ": " + std::string(m.view());
  }
  return problem;
}

// The largest count or displacement any step of x's redistribution to `to`
// would hand MPI on this rank. Precondition: transition_problem(x, to) is
// empty. 0 if the planner cannot make it (raised after the agreement, on
// every rank).
template <class T, std::size_t Rank, class MemorySpace>
std::size_t largest_count(dynamic_dtensor<T, Rank, MemorySpace> const& x, layout const& to,
                          execution_space_of<MemorySpace> const& exec) {
  device_mesh const& mesh = x.mesh();
  try {
    auto const plan = mesh.plan(x.bound(), bind(mesh.shape(), to));
    std::size_t largest = 0;
    for (std::size_t i = 0; i < plan->size(); ++i)
      largest = std::max(largest, prepared<T, MemorySpace>(mesh, (*plan)[i], x.global_extents(), exec)->largest_count);
    return largest;
  } catch (error const&) {
    return 0;
  }
}

// Collective: checks that every rank asks for the same transition of x to
// `to` (into `into`, if given), that it is valid and that every count fits
// MPI's int on every rank; throws the same exception on every rank
// otherwise. One MPI_Allgather of a small record.
template <class T, std::size_t Rank, class MemorySpace>
void agree_on_transition(dynamic_dtensor<T, Rank, MemorySpace> const& x, layout const& to,
                         dynamic_dtensor<T, Rank, MemorySpace> const* into,
                         execution_space_of<MemorySpace> const& exec = {}) {
  device_mesh const& mesh = x.mesh();
  std::string const problem = transition_problem(x, to);  // raised after the agreement
  tensor_record mine{};
  mine.largest_count = problem.empty() ? largest_count(x, to, exec) : 0;
  mine.what = fnv1a{}.mix(hash(x.layout())).mix(hash(to)).mix(sizeof(T)).mix(Rank).mix(into != nullptr).value;
  tensor_index const expected = local_extents(mesh.shape(), x.bound(), x.global_extents(), mesh.rank());
  for (std::size_t d = 0; d < Rank; ++d) {
    mine.global[d] = x.global_extents()[d];
    mine.local[d] = x.local().extent(d);
    mine.expected[d] = expected[d];
  }
  if (into != nullptr) mine.output = static_cast<std::uint64_t>(output_problem_of(x, *into));
  agree(mesh, "redistribute", x.notation(), Rank, mine);
  if (!problem.empty()) throw invalid_layout_error(problem);
}

// Whether a redistribution runs agree_on_transition first, or its caller did.
enum class agreement { check, done };

}  // namespace detail

// A redistribution in flight. test() advances it without blocking; wait()
// and get() finish it. Steps run one after another; each step's collective
// is non-blocking, so work between test() calls overlaps with it. Every
// step but the last writes into a workspace buffer; the last writes into the
// output: a new View, or the given tensor's. Kernels run on one
// execution-space instance, the only one fenced.
template <class Result>
class redistribution {
  using dynamic = dynamic_dtensor<typename Result::value_type, Result::rank, typename Result::memory_space>;
  using view_type = typename dynamic::view_type;
  using value_type = typename Result::value_type;
  using flat_view = Kokkos::View<value_type*, typename Result::memory_space>;
  using lease = typename workspace<typename Result::memory_space>::lease;
  using execution_space = typename Result::execution_space;

 public:
  // Into a new tensor of layout `to`, or, with `into`, into into's shard
  // (its layout is `to`). With completion::immediate every step runs to its
  // end inside the constructor, on MPI's blocking collectives.
  redistribution(dynamic const& x, layout const& to, dynamic const* into = nullptr,
                 completion when = completion::deferred, execution_space const& exec = {},
                 detail::agreement checked = detail::agreement::check)
      : mesh_((require_held("redistribute", x), x.mesh())),
        to_(to),
        global_(x.global_extents()),
        when_(when),
        exec_(exec),
        source_(x.local()),
        current_(flatten(x.local())) {
    if (into != nullptr) require_held("redistribute", *into);
    if (detail::collectives_debugged())
      description_ = "redistribute " + x.notation() + " -> " + std::string(to_string(to).view());
    detail::operation_scope const scope(&description_);
    if (checked == detail::agreement::check) detail::agree_on_transition(x, to, into, exec);
    plan_ = mesh_.plan(x.bound(), bind(mesh_.shape(), to));
    if (into != nullptr) result_ = into->local();
    writes_into_ = into != nullptr;
    if (plan_->size() == 0) {  // equal layouts: a copy, never the input's View
      if (!writes_into_) result_ = detail::allocate<view_type>("shardmesh::shard", detail::extents_of(source_));
      Kokkos::deep_copy(exec_, result_, source_);
      exec_.fence("shardmesh::redistribute");
      return;
    }
    start_next();
  }

  // Advances without blocking; true once the result is ready.
  bool test() {
    detail::operation_scope const scope(&description_);
    while (op_) {
      if (!op_->pending.test()) return false;
      finish_step();
    }
    return true;
  }

  void wait() {
    detail::operation_scope const scope(&description_);
    while (op_) {
      op_->pending.wait();
      finish_step();
    }
  }

  [[nodiscard]] Result get() {
    wait();
    dynamic out = dynamic::adopt(mesh_, to_, global_, result_);
    if constexpr (std::is_same_v<Result, dynamic>)
      return out;
    else
      return Result(std::move(out));
  }

  [[nodiscard]] redistribution_plan const& plan() const { return *plan_; }

 private:
  void start_next() {
    while (next_ < plan_->size()) {
      plan_step const& s = (*plan_)[next_++];
      tensor_index const extents = local_extents(mesh_.shape(), s.after, global_, mesh_.rank());
      flat_view out;
      std::shared_ptr<lease> buffer;
      if (next_ < plan_->size()) {
        std::size_t n = 1;
        for (std::size_t d = 0; d < Result::rank; ++d) n *= extents[d];
        buffer = workspace_of<typename Result::memory_space>(mesh_).acquire(n * sizeof(value_type));
        out = buffer->template as<value_type>(n);
      } else {
        if (!writes_into_) result_ = detail::allocate<view_type>("shardmesh::shard", extents);
        out = flatten(result_);
      }
      detail::step_operation op = detail::start_step(exec_, mesh_, s, global_, current_, out, when_);
      current_ = out;
      input_buffer_ = std::exchange(current_buffer_, buffer);  // MPI may read the input until the step completes
      if (op.pending.test()) {                                 // local steps and completed collectives go on at once
        complete(op);
        continue;
      }
      op_.emplace(std::move(op));
      return;
    }
  }

  void finish_step() {
    complete(*op_);
    op_.reset();
    start_next();
  }

  // Unpacks, and waits for the step's kernels: its buffers go back to the
  // workspace when `op` dies, and the next step or the caller reads its output.
  void complete(detail::step_operation& op) {
    if (op.finish) op.finish();
    exec_.fence("shardmesh::redistribute");
    input_buffer_.reset();
  }

  static flat_view flatten(view_type const& v) { return flat_view(v.data(), v.size()); }

  device_mesh mesh_;
  layout to_;
  tensor_index global_{};
  completion when_;
  execution_space exec_;
  view_type source_;  // the input, alive until the first step completes
  view_type result_;
  bool writes_into_ = false;
  flat_view current_;                      // the latest step's output
  std::shared_ptr<lease> current_buffer_;  // its memory, unless it is result_
  std::shared_ptr<lease> input_buffer_;    // the memory of the input of the step in flight
  std::shared_ptr<redistribution_plan const> plan_;
  std::size_t next_ = 0;
  std::optional<detail::step_operation> op_;
  // In debug mode, the operation its collectives' fingerprints name, for
  // the steps that start from test() or wait() as for those started here.
  std::string description_;
};

// What redistributing a tensor moves, known before it runs.
struct transition_bytes {
  std::vector<std::size_t> received;  // bytes each rank receives over the plan, by rank
  std::size_t lower_bound = 0;        // the least the busiest rank must receive by any plan
  std::size_t steps = 0;              // collectives and local steps of the plan
};

// The plan's bytes for x to `to` on x's mesh against the lower bound
// (transition_lower_bound): the runtime's counters show exactly these.
// Not collective; throws invalid_layout_error if x cannot move to `to`.
template <class T, std::size_t Rank, class MemorySpace>
[[nodiscard]] transition_bytes predicted_bytes(dynamic_dtensor<T, Rank, MemorySpace> const& x, layout const& to) {
  require_held("predicted_bytes", x);
  if (std::string const problem = detail::transition_problem(x, to); !problem.empty())
    throw invalid_layout_error(problem);
  mesh_shape const& mesh = x.mesh().shape();
  bound_layout const target = bind(mesh, to);
  auto const plan = x.mesh().plan(x.bound(), target);
  transition_bytes out{received_bytes<T>(mesh, *plan, x.global_extents()), 0, plan->size()};
  out.lower_bound = transition_lower_bound(mesh, detail::normalized(mesh, x.bound()), detail::normalized(mesh, target),
                                           x.global_extents()) *
                    sizeof(T);
  return out;
}

// Run-time layouts.
template <class T, std::size_t Rank, class MemorySpace>
[[nodiscard]] redistribution<dynamic_dtensor<T, Rank, MemorySpace>> redistribute_async(
    dynamic_dtensor<T, Rank, MemorySpace> const& x, layout const& to, execution_space_of<MemorySpace> const& exec = {},
    std::source_location where = std::source_location::current()) {
  detail::called_from const site(where);
  return {x, to, nullptr, completion::deferred, exec};
}

template <class T, std::size_t Rank, class MemorySpace>
[[nodiscard]] dynamic_dtensor<T, Rank, MemorySpace> redistribute(
    dynamic_dtensor<T, Rank, MemorySpace> const& x, layout const& to, execution_space_of<MemorySpace> const& exec = {},
    std::source_location where = std::source_location::current()) {
  detail::called_from const site(where);
  return redistribution<dynamic_dtensor<T, Rank, MemorySpace>>(x, to, nullptr, completion::immediate, exec).get();
}

// Into an existing tensor: y's shard receives x in y's layout. y lives on
// x's mesh, has x's global extents and shares no memory with x.
template <class T, std::size_t Rank, class MemorySpace>
[[nodiscard]] redistribution<dynamic_dtensor<T, Rank, MemorySpace>> redistribute_async(
    dynamic_dtensor<T, Rank, MemorySpace> const& x, dynamic_dtensor<T, Rank, MemorySpace>& y,
    execution_space_of<MemorySpace> const& exec = {}, std::source_location where = std::source_location::current()) {
  detail::called_from const site(where);
  return {x, y.layout(), &y, completion::deferred, exec};
}

template <class T, std::size_t Rank, class MemorySpace>
void redistribute(dynamic_dtensor<T, Rank, MemorySpace> const& x, dynamic_dtensor<T, Rank, MemorySpace>& y,
                  execution_space_of<MemorySpace> const& exec = {},
                  std::source_location where = std::source_location::current()) {
  detail::called_from const site(where);
  redistribution<dynamic_dtensor<T, Rank, MemorySpace>>(x, y.layout(), &y, completion::immediate, exec).wait();
}

// Constant layouts: what does not depend on the mesh is checked at compile time.
template <layout To, class T, layout From, class MemorySpace>
[[nodiscard]] redistribution<dtensor<T, To, MemorySpace>> redistribute_async(
    dtensor<T, From, MemorySpace> const& x, execution_space_of<MemorySpace> const& exec = {},
    std::source_location where = std::source_location::current()) {
  detail::called_from const site(where);
  static_assert(require_valid<transition_error("redistribute", names_mesh(From, To), From, To)>());
  return {x, To, nullptr, completion::deferred, exec};
}

template <layout To, class T, layout From, class MemorySpace>
[[nodiscard]] dtensor<T, To, MemorySpace> redistribute(dtensor<T, From, MemorySpace> const& x,
                                                       execution_space_of<MemorySpace> const& exec = {},
                                                       std::source_location where = std::source_location::current()) {
  detail::called_from const site(where);
  static_assert(require_valid<transition_error("redistribute", names_mesh(From, To), From, To)>());
  return redistribution<dtensor<T, To, MemorySpace>>(x, To, nullptr, completion::immediate, exec).get();
}

template <class T, layout From, layout To, class MemorySpace>
[[nodiscard]] redistribution<dtensor<T, To, MemorySpace>> redistribute_async(
    dtensor<T, From, MemorySpace> const& x, dtensor<T, To, MemorySpace>& y,
    execution_space_of<MemorySpace> const& exec = {}, std::source_location where = std::source_location::current()) {
  detail::called_from const site(where);
  static_assert(require_valid<transition_error("redistribute", names_mesh(From, To), From, To)>());
  return {x, To, &y, completion::deferred, exec};
}

template <class T, layout From, layout To, class MemorySpace>
void redistribute(dtensor<T, From, MemorySpace> const& x, dtensor<T, To, MemorySpace>& y,
                  execution_space_of<MemorySpace> const& exec = {},
                  std::source_location where = std::source_location::current()) {
  detail::called_from const site(where);
  static_assert(require_valid<transition_error("redistribute", names_mesh(From, To), From, To)>());
  redistribution<dtensor<T, To, MemorySpace>>(x, To, &y, completion::immediate, exec).wait();
}

}  // namespace shardmesh
