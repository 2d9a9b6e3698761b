#pragma once
// Context parallelism's attention: self-attention of queries, keys and
// values [B, T, H, D] whose sequence is split on one mesh axis (the
// context-parallel axis, "cp" by default), in two forms:
//
//   ring        each rank keeps its queries; the key/value blocks go round
//               the axis's ring point to point, one step at a time, while
//               each rank merges the block it holds into its rows by an
//               online softmax (ops/local/blockwise_attention.hpp). The next
//               block's transfer is posted before the current block's
//               kernels run, on the side instance, so it travels while they
//               compute. The backward passes the blocks round the same
//               ring, each block's key/value gradient one step behind it,
//               summed by every rank it visits and home after the last.
//               Per rank: cp-1 exchanges of its keys and values forward;
//               cp-1 of them and cp of their gradients (in the
//               accumulation type) backward (ring_traffic).
//   all_to_all  (DeepSpeed-Ulysses) the sequence gathered and the heads
//               split on the axis instead, S(seq:cp) to S(heads:cp): a
//               layout transition the algebra plans (one all-to-all per
//               operand); attention runs locally over the whole sequence
//               and the output goes back. The query and key/value heads
//               must split over the axis together with their other axes
//               (expand_heads first where the key/value heads are too few).
//
// Both read positions from the sequence order (algebra/sequence_chunks.hpp), so
// the balanced order's causal load balance serves both, and skip the key
// chunks a query chunk cannot see. The sequence must be split on the axis
// alone (block), the head size whole, nothing partial; a sequence that the
// order does not cut into equal chunks is refused (pad it, or use the
// contiguous order). Every refusal is the same error on every rank, before
// any communication.
//
//   auto [out, saved] = context_attention(q, k, v, {.form = context_form::ring});
//   auto [dq, dk, dv] = context_attention_backward(saved, dout);

#include "shardmesh/algebra/sequence_chunks.hpp"
#include "shardmesh/comm/point_to_point.hpp"
#include "shardmesh/comm/reduced_precision.hpp"
#include "shardmesh/errors.hpp"
#include "shardmesh/ops/detail/op_support.hpp"
#include "shardmesh/ops/heads.hpp"
#include "shardmesh/ops/local/blockwise_attention.hpp"
#include "shardmesh/ops/local/elementwise.hpp"
#include "shardmesh/runtime/side_instance.hpp"
#include "shardmesh/tensor/dtensor.hpp"

#include <Kokkos_Core.hpp>
#include <Kokkos_Profiling_ScopedRegion.hpp>

#include <cmath>
#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace shardmesh::ops {

struct context_options {
  std::string_view axis = "cp";
  context_form form = context_form::ring;
  sequence_order order = sequence_order::balanced;
  bool causal = true;
  double scale = 0;  // of the scores q.k; 0: 1 / sqrt(head size)
};

// Where attention ran: the axis, its extent, this rank's place on it.
struct context_geometry {
  std::size_t axis = 0, cp = 1, position = 0, length = 0;
  context_form form = context_form::ring;
  sequence_order order = sequence_order::balanced;
  bool causal = true;
  double scale = 1;
};

// Each query row's log-sum-exp [B, T, H], in the accumulation type.
template <class T, class MemorySpace>
using row_statistics = dynamic_dtensor<accumulation_t<T>, 3, MemorySpace>;

// What the backward reads, kept by the forward: the operands and output in
// the layouts attention ran in (all_to_all: the heads split on the axis)
// and the layouts the caller's tensors came in.
template <class T, class MemorySpace>
struct context_attention_state {
  heads_tensor<T, MemorySpace> q, k, v, out;
  row_statistics<T, MemorySpace> lse;
  bound_layout queries, keys;  // the caller's layouts of q and of k and v
  context_geometry at;
};

template <class T, class MemorySpace>
struct context_attention_result {
  heads_tensor<T, MemorySpace> out;  // in the queries' layout
  context_attention_state<T, MemorySpace> saved;
};

template <class T, class MemorySpace>
struct context_attention_gradients {
  heads_tensor<T, MemorySpace> dq, dk, dv;  // in the layouts of q, k and v
};

namespace detail {

// A key/value block going round a ring in two buffers: the one held
// (computed on) and the one arriving. Transfers run on the side instance;
// pass() waits for the given instance's work on the held block first.
// Both mark their host time as the region "shardmesh::context_attention::
// transfer" (Kokkos Tools): the ring's time outside its computation.
template <class U, class MemorySpace>
class block_ring {
 public:
  using flat = Kokkos::View<U*, MemorySpace>;
  using exec_type = execution_space_of<MemorySpace>;

  block_ring(communicator const& ring, std::size_t elements, int tag, exec_type const& exec)
      : ring_(&ring),
        held_(Kokkos::view_alloc(Kokkos::WithoutInitializing, "shardmesh::context_attention::block"), elements),
        arriving_(Kokkos::view_alloc(Kokkos::WithoutInitializing, "shardmesh::context_attention::block"), elements),
        tag_(tag),
        exec_(exec),
        side_(side_instance(exec)) {}

  [[nodiscard]] flat const& held() const { return held_; }

  // Sends the held block to the next rank and receives the previous rank's.
  void pass() {
    Kokkos::Profiling::ScopedRegion const region("shardmesh::context_attention::transfer");
    int const size = ring_->size(), me = ring_->rank();
    exec_.fence("shardmesh::context_attention: block ready to pass");
    transfer_ = iexchange(*ring_, held_, (me + 1) % size, arriving_, (me + size - 1) % size, tag_, side_);
  }
  // Waits for the block passed in and holds it.
  void arrive() {
    Kokkos::Profiling::ScopedRegion const region("shardmesh::context_attention::transfer");
    transfer_.wait();
    side_.fence("shardmesh::context_attention: block arrived");
    std::swap(held_, arriving_);
  }

 private:
  communicator const* ring_;
  flat held_, arriving_;
  int tag_;
  exec_type exec_, side_;
  request transfer_;
};

template <class View>
auto chunk_of(View const& x, sequence_chunk const& c) {
  auto const rows = Kokkos::make_pair(c.begin, c.begin + c.size);
  if constexpr (View::rank() == 3)
    return Kokkos::subview(x, Kokkos::ALL, rows, Kokkos::ALL);
  else
    return Kokkos::subview(x, Kokkos::ALL, rows, Kokkos::ALL, Kokkos::ALL);
}

// Key/value heads [B, T, Hk, D] (or their gradients) at the front of a block buffer, values after them.
template <class U, class MemorySpace, class Like>
auto block_part(Kokkos::View<U*, MemorySpace> const& buffer, Like const& like, std::size_t part) {
  using view = Kokkos::View<U****, Kokkos::LayoutRight, MemorySpace, Kokkos::MemoryUnmanaged>;
  return view(buffer.data() + part * like.size(), like.extent(0), like.extent(1), like.extent(2), like.extent(3));
}

inline local::attention_block block_at(context_geometry const& g, sequence_chunk const& q, sequence_chunk const& k) {
  return {q.position, k.position, g.causal, g.scale};
}

// Merges the key chunks of one block into the running statistics of every query chunk that sees them.
template <class Exec, class Q, class K, class V, class ACC, class M, class L>
void merge_block(Exec const& exec, context_geometry const& g, Q const& q, std::vector<sequence_chunk> const& queries,
                 K const& k, V const& v, std::vector<sequence_chunk> const& keys, ACC const& acc, M const& m,
                 L const& l) {
  for (sequence_chunk const& qc : queries)
    for (sequence_chunk const& kc : keys)
      if (sees_any(qc, kc, g.causal))
        local::attention_block_forward(exec, chunk_of(q, qc), chunk_of(k, kc), chunk_of(v, kc), block_at(g, qc, kc),
                                       chunk_of(acc, qc), chunk_of(m, qc), chunk_of(l, qc));
}

// One block's gradients, added into dq and into dk, dv (the block's).
template <class Exec, class Saved, class DO, class DELTA, class DQ, class K, class DK>
void block_gradients(Exec const& exec, context_geometry const& g, Saved const& s, DO const& dout, DELTA const& delta,
                     DQ const& dq, std::vector<sequence_chunk> const& queries, K const& k, K const& v, DK const& dk,
                     DK const& dv, std::vector<sequence_chunk> const& keys) {
  for (sequence_chunk const& qc : queries)
    for (sequence_chunk const& kc : keys)
      if (sees_any(qc, kc, g.causal))
        local::attention_block_backward(exec, chunk_of(s.q.local(), qc), chunk_of(k, kc), chunk_of(v, kc),
                                        chunk_of(dout, qc), chunk_of(s.lse.local(), qc), chunk_of(delta, qc),
                                        block_at(g, qc, kc), chunk_of(dq, qc), chunk_of(dk, kc), chunk_of(dv, kc));
}

// Runs of consecutive storage indices with consecutive positions as one chunk (fewer, larger kernels).
inline std::vector<sequence_chunk> merged(std::vector<sequence_chunk> const& chunks) {
  std::vector<sequence_chunk> out;
  for (sequence_chunk const& c : chunks)
    if (!out.empty() && out.back().begin + out.back().size == c.begin &&
        out.back().position + out.back().size == c.position)
      out.back().size += c.size;
    else
      out.push_back(c);
  return out;
}

// The layout of a [B, T, H] row statistic of heads in layout l.
inline bound_layout rows_layout(bound_layout const& l) {
  bound_layout rows;
  rows.rank = 3;
  for (std::size_t d = 0; d < 3; ++d) rows.dims[d] = l.dims[d];
  return rows;
}

// Whether, on every rank, the query heads of layout lq (of h) read the
// key/value heads of layout lk (of kv) that the rank holds, in order.
inline void require_aligned_heads(std::string const& op, mesh_shape const& mesh, bound_layout const& lq, std::size_t h,
                                  bound_layout const& lk, std::size_t kv) {
  std::size_t const group = h / kv;
  for (std::size_t r = 0; r < mesh.size(); ++r) {
    mesh_coordinates const c = coordinates_of(mesh, r);
    interval const q = held_heads(op.c_str(), mesh, lq, h, c), s = held_heads(op.c_str(), mesh, lk, kv, c);
    if (q.begin != group * s.begin || q.size() != group * s.size())
      throw invalid_layout_error(op + ": the query heads " + std::string(to_string(unbind(mesh, lq)).view()) +
                                 " do not read the key/value heads " + std::string(to_string(unbind(mesh, lk)).view()) +
                                 " each rank holds; split both heads on the same axes by whole groups, or expand the "
                                 "key/value heads to the query heads first (expand_heads)");
  }
}

template <class T, class MemorySpace>
context_geometry context_of(std::string const& op, heads_tensor<T, MemorySpace> const& q,
                            heads_tensor<T, MemorySpace> const& k, heads_tensor<T, MemorySpace> const& v,
                            context_options const& o) {
  require_held(op, q, k, v);
  require_same_mesh(op, q, k);
  require_same_mesh(op, q, v);
  mesh_shape const& mesh = q.mesh().shape();
  std::size_t const axis = mesh.find(o.axis);
  if (axis == npos)
    throw invalid_option_error(op + ": the mesh has no axis \"" + std::string(o.axis) + "\" to split the sequence on");
  if (k.layout() != v.layout() || k.global_extents() != v.global_extents())
    throw mismatched_tensor_error(op + ": keys " + k.notation() + " and values " + v.notation() + " differ");
  check_groups(op.c_str(), q.global_extents(), k.global_extents());
  for (auto const* x : {&q, &k}) {
    bound_layout const l = x->bound();
    bound_dim const& sequence = l.dims[1];
    if (!l.partial_axes.empty() || sequence.count != 1 || sequence.axes[0] != axis ||
        sequence.dist != distribution::block || l.dims[3].count != 0)
      throw invalid_layout_error(op + ": " + x->notation() + " must split the sequence (dimension 1) on " +
                                 std::string(o.axis) +
                                 " alone, in blocks, with the head size whole and nothing partial");
  }
  if (q.bound().dims[0] != k.bound().dims[0])
    throw invalid_layout_error(op + ": queries " + q.notation() + " and keys " + k.notation() +
                               " split the batch differently");
  context_geometry g{axis,
                     mesh.extent(axis),
                     q.mesh().coordinates()[axis],
                     q.global_extents()[1],
                     o.form,
                     o.order,
                     o.causal,
                     o.scale > 0 ? o.scale : 1 / std::sqrt(static_cast<double>(q.global_extents()[3]))};
  std::size_t const pieces = sequence_pieces(g.cp, o.order);
  if (g.length % pieces != 0)
    throw invalid_option_error(op + ": a sequence of " + std::to_string(g.length) + " tokens does not cut into " +
                               std::to_string(pieces) + " equal chunks (the " + std::string(to_string(o.order)) +
                               " order on " + std::to_string(g.cp) + " ranks of " + std::string(o.axis) +
                               "); pad it to a multiple of " + std::to_string(pieces) +
                               (o.order == sequence_order::balanced ? " or use the contiguous order" : ""));
  bool const ring = o.form == context_form::ring;
  require_aligned_heads(op, mesh, ring ? q.bound() : heads_split_on(q.bound(), axis), q.global_extents()[2],
                        ring ? k.bound() : heads_split_on(k.bound(), axis), k.global_extents()[2]);
  return g;
}

template <class U, class MemorySpace, class Like>
Kokkos::View<U***, Kokkos::LayoutRight, MemorySpace> rows_like(char const* label, Like const& x) {
  return Kokkos::View<U***, Kokkos::LayoutRight, MemorySpace>(
      Kokkos::view_alloc(Kokkos::WithoutInitializing, std::string(label)), x.extent(0), x.extent(1), x.extent(2));
}

// Attention of q over the key/value blocks `each_block` hands to merge, into out and lse.
template <class T, class MemorySpace, class EachBlock>
void attend(context_attention_state<T, MemorySpace>& s, EachBlock&& each_block,
            execution_space_of<MemorySpace> const& exec) {
  using A = accumulation_t<T>;
  auto const& q = s.q.local();
  tensor_index const rows = s.q.global_extents();  // its first three
  s.out = make_like<T, 4, MemorySpace>(s.q.mesh(), s.q.bound(), s.q.global_extents());
  s.lse = make_like<A, 3, MemorySpace>(s.q.mesh(), rows_layout(s.q.bound()), rows);
  Kokkos::View<A****, Kokkos::LayoutRight, MemorySpace> acc(
      Kokkos::view_alloc(Kokkos::WithoutInitializing, "shardmesh::context_attention::accumulator"), q.extent(0),
      q.extent(1), q.extent(2), q.extent(3));
  auto const m = rows_like<A, MemorySpace>("shardmesh::context_attention::max", q);
  auto const l = rows_like<A, MemorySpace>("shardmesh::context_attention::sum", q);
  local::attention_start(exec, acc, m, l);
  each_block(
      [&](std::vector<sequence_chunk> const& queries, auto const& k, auto const& v,
          std::vector<sequence_chunk> const& keys) { merge_block(exec, s.at, q, queries, k, v, keys, acc, m, l); });
  local::attention_finish(exec, acc, m, l, s.out.local(), s.lse.local());
}

template <class T, class MemorySpace>
void ring_forward(context_attention_state<T, MemorySpace>& s, execution_space_of<MemorySpace> const& exec) {
  context_geometry const& g = s.at;
  auto const& k = s.k.local();
  std::vector<sequence_chunk> const mine = rank_chunks(g.length, g.cp, g.position, g.order);
  block_ring<T, MemorySpace> blocks(s.q.mesh().group(axis_set::of(g.axis)), 2 * k.size(), 1, exec);
  Kokkos::deep_copy(exec, block_part(blocks.held(), k, 0), k);
  Kokkos::deep_copy(exec, block_part(blocks.held(), k, 1), s.v.local());
  attend(
      s,
      [&](auto&& merge) {
        for (std::size_t t = 0; t < g.cp; ++t) {
          if (t + 1 < g.cp) blocks.pass();
          std::size_t const from = (g.position + g.cp - t) % g.cp;
          merge(mine, block_part(blocks.held(), k, 0), block_part(blocks.held(), k, 1),
                rank_chunks(g.length, g.cp, from, g.order));
          if (t + 1 < g.cp) blocks.arrive();
        }
      },
      exec);
}

template <class T, class MemorySpace>
void whole_forward(context_attention_state<T, MemorySpace>& s, execution_space_of<MemorySpace> const& exec) {
  std::vector<sequence_chunk> const whole = merged(sequence_chunks(s.at.length, s.at.cp, s.at.order));
  attend(s, [&](auto&& merge) { merge(whole, s.k.local(), s.v.local(), whole); }, exec);
}

template <class U, class T, std::size_t Rank, class MemorySpace, class View>
dynamic_dtensor<U, Rank, MemorySpace> tensor_of(dynamic_dtensor<T, Rank, MemorySpace> const& like, View const& values,
                                                execution_space_of<MemorySpace> const& exec) {
  auto out = make_like<U, Rank, MemorySpace>(like.mesh(), like.bound(), like.global_extents());
  local::convert(exec, local::flat(values), local::flat(out.local()));
  return out;
}

}  // namespace detail

template <class T, class MemorySpace>
[[nodiscard]] context_attention_result<T, MemorySpace> context_attention(
    heads_tensor<T, MemorySpace> const& q, heads_tensor<T, MemorySpace> const& k, heads_tensor<T, MemorySpace> const& v,
    context_options const& o = {}, execution_space_of<MemorySpace> const& exec = {}) {
  context_geometry const g = detail::context_of("context_attention", q, k, v, o);
  context_attention_state<T, MemorySpace> s{q, k, v, {}, {}, q.bound(), k.bound(), g};
  if (g.form == context_form::ring) {
    detail::ring_forward(s, exec);
    return {s.out, std::move(s)};
  }
  bound_layout const lq = heads_split_on(q.bound(), g.axis), lk = heads_split_on(k.bound(), g.axis);
  s.q = detail::to_layout(q, lq, exec);
  s.k = detail::to_layout(k, lk, exec);
  s.v = detail::to_layout(v, lk, exec);
  detail::whole_forward(s, exec);
  auto out = detail::to_layout(s.out, s.queries, exec);
  return {std::move(out), std::move(s)};
}

template <class T, class MemorySpace>
[[nodiscard]] context_attention_gradients<T, MemorySpace> context_attention_backward(
    context_attention_state<T, MemorySpace> const& s, heads_tensor<T, MemorySpace> const& dout,
    execution_space_of<MemorySpace> const& exec = {}) {
  constexpr char const* op = "context_attention_backward";
  require_held(op, s.q, s.out, s.lse, dout);
  if (dout.global_extents() != s.q.global_extents())
    throw mismatched_tensor_error(std::string(op) + ": the output gradient " + dout.notation() +
                                  " does not have the output's extents");
  using A = accumulation_t<T>;
  context_geometry const& g = s.at;
  auto const grad = detail::to_layout(dout, s.q.bound(), exec);  // in any layout: moved to attention's
  auto const& q = s.q.local();
  auto const& k = s.k.local();
  auto const delta = detail::rows_like<A, MemorySpace>("shardmesh::context_attention::delta", q);
  local::attention_delta(exec, s.out.local(), grad.local(), delta);
  Kokkos::View<A****, Kokkos::LayoutRight, MemorySpace> dq("shardmesh::context_attention::dq", q.extent(0), q.extent(1),
                                                           q.extent(2), q.extent(3));
  Kokkos::View<A*, MemorySpace> gradients;  // dk then dv, of this rank's keys and values
  if (g.form == context_form::all_to_all) {
    std::vector<sequence_chunk> const whole = detail::merged(sequence_chunks(g.length, g.cp, g.order));
    gradients = Kokkos::View<A*, MemorySpace>("shardmesh::context_attention::dkv", 2 * k.size());
    detail::block_gradients(exec, g, s, grad.local(), delta, dq, whole, k, s.v.local(),
                            detail::block_part(gradients, k, 0), detail::block_part(gradients, k, 1), whole);
  } else {
    communicator const& ring = s.q.mesh().group(axis_set::of(g.axis));
    std::vector<sequence_chunk> const mine = rank_chunks(g.length, g.cp, g.position, g.order);
    detail::block_ring<T, MemorySpace> blocks(ring, 2 * k.size(), 1, exec);
    detail::block_ring<A, MemorySpace> sums(ring, 2 * k.size(), 2, exec);
    Kokkos::View<A*, MemorySpace> partial(
        Kokkos::view_alloc(Kokkos::WithoutInitializing, "shardmesh::context_attention::dkv"), 2 * k.size());
    Kokkos::deep_copy(exec, detail::block_part(blocks.held(), k, 0), k);
    Kokkos::deep_copy(exec, detail::block_part(blocks.held(), k, 1), s.v.local());
    for (std::size_t t = 0; t < g.cp; ++t) {
      if (t + 1 < g.cp) blocks.pass();
      // The first block's sums start here; later ones arrive summed by the ranks before and are added to.
      auto const& into = t == 0 ? sums.held() : partial;
      Kokkos::deep_copy(exec, into, A(0));
      std::size_t const from = (g.position + g.cp - t) % g.cp;
      detail::block_gradients(exec, g, s, grad.local(), delta, dq, mine, detail::block_part(blocks.held(), k, 0),
                              detail::block_part(blocks.held(), k, 1), detail::block_part(into, k, 0),
                              detail::block_part(into, k, 1), rank_chunks(g.length, g.cp, from, g.order));
      if (t > 0) {
        sums.arrive();
        local::axpy(exec, A(1), partial, sums.held());
      }
      if (g.cp > 1) sums.pass();
      if (t + 1 < g.cp) blocks.arrive();
    }
    if (g.cp > 1) sums.arrive();  // this rank's own block, summed over the ring
    gradients = sums.held();
  }
  context_attention_gradients<T, MemorySpace> d{detail::tensor_of<T>(s.q, dq, exec),
                                                detail::tensor_of<T>(s.k, detail::block_part(gradients, k, 0), exec),
                                                detail::tensor_of<T>(s.v, detail::block_part(gradients, k, 1), exec)};
  if (g.form == context_form::ring) return d;
  return {detail::to_layout(d.dq, s.queries, exec), detail::to_layout(d.dk, s.keys, exec),
          detail::to_layout(d.dv, s.keys, exec)};
}

}  // namespace shardmesh::ops
