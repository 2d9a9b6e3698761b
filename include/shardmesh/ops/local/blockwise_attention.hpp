#pragma once
// Attention of a rank's queries over key/value blocks that arrive one at a
// time (ring attention passes them around the context-parallel ring), by an
// online softmax. Per query row it keeps a running max m, a running sum l
// of exp(s - m) over the keys seen, and an accumulator of exp(s - m) v;
// each block merges in exactly (what came before is rescaled by
// exp(m_old - m_new)), so the blocks may come in any order and the result
// is softmax(s) v over all of them. attention_finish divides out and gives
// each row's log-sum-exp, m + log l, from which the backward recomputes the
// probabilities block by block.
//
// Local views, LayoutRight: queries and outputs [B, Tq, H, D], a block's
// keys and values [B, Tk, Hk, D] with Hk dividing H (grouped-query
// attention: query head h reads key/value head h / (H / Hk)), the running
// statistics and log-sum-exps [B, Tq, H], all in A (float for bf16 and fp16
// elements). Query row i sits at position q_offset + i, key j at
// k_offset + j; causal hides a key after its query. A row that sees no key
// in any block has output 0 and log-sum-exp -inf, and gets no gradient.
//
//   attention_start(exec, acc, m, l);
//   for each block: attention_block_forward(exec, q, k, v, {q0, k0, causal, scale}, acc, m, l);
//   attention_finish(exec, acc, m, l, out, lse);
//   attention_delta(exec, out, dout, delta);              // backward: rowsum(dout o out)
//   for each block: attention_block_backward(exec, q, k, v, dout, lse, delta, {...}, dq, dk, dv);

#include "shardmesh/comm/reduced_precision.hpp"
#include "shardmesh/ops/local/exponential.hpp"
#include "shardmesh/ops/local/reshape.hpp"
#include "shardmesh/ops/local/row_loops.hpp"

#include <Kokkos_Core.hpp>

#include <cstddef>
#include <string>

namespace shardmesh::ops::local {

// Where a block sits, and how scores are made: s = scale q.k.
struct attention_block {
  std::size_t q_offset = 0, k_offset = 0;
  bool causal = true;
  double scale = 1;
};

namespace detail {

// How many leading keys of a block query position `query` sees.
KOKKOS_INLINE_FUNCTION std::size_t keys_seen(attention_block const& b, std::size_t query, std::size_t keys) {
  if (!b.causal) return keys;
  if (query < b.k_offset) return 0;
  return query - b.k_offset < keys ? query - b.k_offset + 1 : keys;
}

template <class A, class P, class R>
KOKKOS_INLINE_FUNCTION A dot(P const* p, R const* r, std::size_t n) {
  A total = 0;
  for (std::size_t d = 0; d < n; ++d) total += static_cast<A>(p[d]) * static_cast<A>(r[d]);
  return total;
}

// Queries [B, Tq, H, D] against a block [B, Tk, Hk, D].
template <class Q, class K, class V>
void require_attention_shapes(char const* kernel, Q const& q, K const& k, V const& v) {
  require(k.extent(0) == q.extent(0) && k.extent(3) == q.extent(3) && k.extent(2) > 0 &&
              q.extent(2) % k.extent(2) == 0 && v.extent(0) == k.extent(0) && v.extent(1) == k.extent(1) &&
              v.extent(2) == k.extent(2) && v.extent(3) == k.extent(3),
          kernel,
          "queries " + shape(q) + ", keys " + shape(k) + " and values " + shape(v) +
              ": [B, T, H, D] with the key/value heads dividing the query heads");
}

// ds_ij / scale and p_ij (into p) for query row (b, i, h) and key j of key/value head hk.
template <class A, class Q, class K, class V, class DO, class LSE, class DELTA>
KOKKOS_INLINE_FUNCTION A score_gradient(Q const& q, K const& k, V const& v, DO const& dout, LSE const& lse,
                                        DELTA const& delta, A scale, std::size_t b, std::size_t i, std::size_t h,
                                        std::size_t j, std::size_t hk, A& p) {
  std::size_t const D = q.extent(3);
  A const score = scale * dot<A>(&q(b, i, h, 0), &k(b, j, hk, 0), D);
  p = exponential(score - lse(b, i, h));
  return p * (dot<A>(&dout(b, i, h, 0), &v(b, j, hk, 0), D) - delta(b, i, h));
}

// Team scratch for n scores: shared memory while small, else the team's slice of global memory.
inline int scratch_level(std::size_t bytes) { return bytes <= 16384 ? 0 : 1; }

}  // namespace detail

// Empty running statistics: acc 0, m -inf, l 0.
template <class ExecSpace, class ACC, class M, class L>
void attention_start(ExecSpace const& exec, ACC const& acc, M const& m, L const& l) {
  using A = typename M::non_const_value_type;
  Kokkos::deep_copy(exec, acc, A(0));
  Kokkos::deep_copy(exec, m, Kokkos::reduction_identity<A>::max());
  Kokkos::deep_copy(exec, l, A(0));
}

// Merges one key/value block into the running statistics.
template <class ExecSpace, class Q, class K, class V, class ACC, class M, class L>
void attention_block_forward(ExecSpace const& exec, Q const& q, K const& k, V const& v, attention_block const& at,
                             ACC const& acc, M const& m, L const& l) {
  constexpr char const* kernel = "attention_block_forward";
  detail::require_attention_shapes(kernel, q, k, v);
  detail::require_same_extents(kernel, "queries", q, "accumulator", acc);
  using A = typename M::non_const_value_type;
  using policy = Kokkos::TeamPolicy<ExecSpace>;
  using scratch = Kokkos::View<A*, typename ExecSpace::scratch_memory_space, Kokkos::MemoryUnmanaged>;
  std::size_t const Tq = q.extent(1), H = q.extent(2), D = q.extent(3), Tk = k.extent(1);
  std::size_t const group = H / k.extent(2);
  A const scale = static_cast<A>(at.scale);
  int const level = detail::scratch_level(scratch::shmem_size(Tk));
  Kokkos::parallel_for(
      "shardmesh::attention_block_forward",
      policy(exec, detail::league_size(kernel, q.extent(0) * Tq * H), Kokkos::AUTO)
          .set_scratch_size(level, Kokkos::PerTeam(scratch::shmem_size(Tk))),
      KOKKOS_LAMBDA(typename policy::member_type const& team) {
        auto const row = static_cast<std::size_t>(team.league_rank());
        std::size_t const b = row / (Tq * H), i = row / H % Tq, h = row % H, hk = h / group;
        scratch const s(team.team_scratch(level), Tk);
        std::size_t const seen = detail::keys_seen(at, at.q_offset + i, Tk);
        auto const* qr = &q(b, i, h, 0);
        A const top = detail::row_max(team, seen, [&](std::size_t j) {
          A const score = scale * detail::dot<A>(qr, &k(b, j, hk, 0), D);
          s(j) = score;
          return score;
        });
        A const before = m(b, i, h);
        A const after = Kokkos::max(before, top);
        if (after == Kokkos::reduction_identity<A>::max()) return;  // nothing seen yet: nothing to merge
        team.team_barrier();
        A const added = detail::row_sum(team, seen, [&](std::size_t j) {
          A const p = exponential(s(j) - after);
          s(j) = p;
          return p;
        });
        team.team_barrier();
        A const rescale = before == Kokkos::reduction_identity<A>::max() ? A(0) : exponential(before - after);
        detail::row_for(team, D, [&](std::size_t d) {
          A sum = 0;
          for (std::size_t j = 0; j < seen; ++j) sum += s(j) * static_cast<A>(v(b, j, hk, d));
          acc(b, i, h, d) = rescale * acc(b, i, h, d) + sum;
        });
        team.team_barrier();
        Kokkos::single(Kokkos::PerTeam(team), [&] {
          m(b, i, h) = after;
          l(b, i, h) = rescale * l(b, i, h) + added;
        });
      });
}

// out = acc / l and lse = m + log l; a row that saw nothing: 0 and -inf.
template <class ExecSpace, class ACC, class M, class L, class O, class LSE>
void attention_finish(ExecSpace const& exec, ACC const& acc, M const& m, L const& l, O const& out, LSE const& lse) {
  detail::require_same_extents("attention_finish", "accumulator", acc, "output", out);
  using A = typename M::non_const_value_type;
  using T = typename O::non_const_value_type;
  std::size_t const Tq = acc.extent(1), H = acc.extent(2), D = acc.extent(3);
  Kokkos::parallel_for(
      "shardmesh::attention_finish", Kokkos::RangePolicy<ExecSpace>(exec, 0, acc.extent(0) * Tq * H),
      KOKKOS_LAMBDA(std::size_t row) {
        std::size_t const b = row / (Tq * H), i = row / H % Tq, h = row % H;
        A const total = l(b, i, h);
        A const inverse = total > A(0) ? A(1) / total : A(0);
        for (std::size_t d = 0; d < D; ++d) out(b, i, h, d) = static_cast<T>(acc(b, i, h, d) * inverse);
        lse(b, i, h) = total > A(0) ? m(b, i, h) + Kokkos::log(total) : Kokkos::reduction_identity<A>::max();
      });
}

// delta = rowsum(dout o out) per query row, which every block's backward reads.
template <class ExecSpace, class O, class DO, class DELTA>
void attention_delta(ExecSpace const& exec, O const& out, DO const& dout, DELTA const& delta) {
  detail::require_same_extents("attention_delta", "output", out, "its gradient", dout);
  using A = typename DELTA::non_const_value_type;
  std::size_t const Tq = out.extent(1), H = out.extent(2), D = out.extent(3);
  Kokkos::parallel_for(
      "shardmesh::attention_delta", Kokkos::RangePolicy<ExecSpace>(exec, 0, out.extent(0) * Tq * H),
      KOKKOS_LAMBDA(std::size_t row) {
        std::size_t const b = row / (Tq * H), i = row / H % Tq, h = row % H;
        delta(b, i, h) = detail::dot<A>(&dout(b, i, h, 0), &out(b, i, h, 0), D);
      });
}

// One block's gradients, added: dq += scale sum_j ds_ij k_j, dk_j += scale
// sum_i ds_ij q_i and dv_j += sum_i p_ij dout_i, where p_ij = exp(s_ij -
// lse_i) and ds_ij = p_ij (dout_i . v_j - delta_i). dq, dk and dv are in A.
// Two kernels, one over the query rows and one over the key rows (each
// summing over the other side, which it recomputes): no atomics, the same
// sums on every run.
template <class ExecSpace, class Q, class K, class V, class DO, class LSE, class DELTA, class DQ, class DK, class DV>
void attention_block_backward(ExecSpace const& exec, Q const& q, K const& k, V const& v, DO const& dout, LSE const& lse,
                              DELTA const& delta, attention_block const& at, DQ const& dq, DK const& dk, DV const& dv) {
  constexpr char const* kernel = "attention_block_backward";
  detail::require_attention_shapes(kernel, q, k, v);
  detail::require_same_extents(kernel, "queries", q, "output gradient", dout);
  detail::require_same_extents(kernel, "queries", q, "query gradient", dq);
  detail::require_same_extents(kernel, "keys", k, "key gradient", dk);
  detail::require_same_extents(kernel, "values", v, "value gradient", dv);
  using A = typename LSE::non_const_value_type;
  std::size_t const B = q.extent(0), Tq = q.extent(1), H = q.extent(2), D = q.extent(3), Tk = k.extent(1);
  std::size_t const Hk = k.extent(2), group = H / Hk;
  A const scale = static_cast<A>(at.scale);
  A const none = Kokkos::reduction_identity<A>::max();
  Kokkos::parallel_for(
      "shardmesh::attention_block_backward_queries", Kokkos::RangePolicy<ExecSpace>(exec, 0, B * Tq * H),
      KOKKOS_LAMBDA(std::size_t row) {
        std::size_t const b = row / (Tq * H), i = row / H % Tq, h = row % H, hk = h / group;
        if (lse(b, i, h) == none) return;
        std::size_t const seen = detail::keys_seen(at, at.q_offset + i, Tk);
        for (std::size_t j = 0; j < seen; ++j) {
          A p;
          A const ds = scale * detail::score_gradient<A>(q, k, v, dout, lse, delta, scale, b, i, h, j, hk, p);
          for (std::size_t d = 0; d < D; ++d) dq(b, i, h, d) += ds * static_cast<A>(k(b, j, hk, d));
        }
      });
  Kokkos::parallel_for(
      "shardmesh::attention_block_backward_keys", Kokkos::RangePolicy<ExecSpace>(exec, 0, B * Tk * Hk),
      KOKKOS_LAMBDA(std::size_t row) {
        std::size_t const b = row / (Tk * Hk), j = row / Hk % Tk, hk = row % Hk;
        for (std::size_t h = hk * group; h < (hk + 1) * group; ++h)
          for (std::size_t i = 0; i < Tq; ++i) {
            if (lse(b, i, h) == none || detail::keys_seen(at, at.q_offset + i, Tk) <= j) continue;
            A p;
            A const ds = scale * detail::score_gradient<A>(q, k, v, dout, lse, delta, scale, b, i, h, j, hk, p);
            for (std::size_t d = 0; d < D; ++d) {
              dk(b, j, hk, d) += ds * static_cast<A>(q(b, i, h, d));
              dv(b, j, hk, d) += p * static_cast<A>(dout(b, i, h, d));
            }
          }
      });
}

}  // namespace shardmesh::ops::local
