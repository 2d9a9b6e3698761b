#pragma once
// Products of dtensors in index notation, their communication derived from
// the operands' layouts (algebra/propagation.hpp):
//
//   auto y = einsum<"btc,cf->btf">(x, w);            // the layout the rules give
//   auto y = einsum<"btf,fc->btc">(h, w2, rows);     // delivered in `rows` (planned)
//   auto s = einsum<"bthd,bshd->bhts">(0.125F, q, k); // alpha A.B, alpha applied by the GEMM
//   einsum_add<"btf,cf->btc">(dx, dh, w);            // dx += dh.w^T (BLAS's beta = 1 where it can)
//
// Collective over the mesh. The operands are moved to the cheapest layouts
// the product can run on locally (none when they fit), each rank multiplies
// its shards with one strided batched GEMM (local_gemm: BLAS on host memory,
// a Kokkos kernel elsewhere), and the result is moved to the requested
// layout. Every step runs on the execution-space instance given last.

#include "shardmesh/algebra/contraction.hpp"
#include "shardmesh/algebra/propagation.hpp"
#include "shardmesh/algebra/validation.hpp"
#include "shardmesh/errors.hpp"
#include "shardmesh/ops/detail/op_support.hpp"
#include "shardmesh/ops/detail/summa.hpp"
#include "shardmesh/ops/local/elementwise.hpp"
#include "shardmesh/ops/local/reshape.hpp"
#include "shardmesh/ops/local_gemm.hpp"
#include "shardmesh/runtime/progress.hpp"
#include "shardmesh/tensor/dtensor.hpp"

#include <Kokkos_Core.hpp>

#include <array>
#include <cstddef>
#include <source_location>
#include <string>
#include <type_traits>
#include <vector>

namespace shardmesh::ops {

namespace detail {

// One index of the local product: its extent and its stride in A, B and C
// (0 where the operand lacks it).
struct gemm_index {
  std::size_t extent = 1;
  std::ptrdiff_t a = 0, b = 0, c = 0;
};

// LayoutRight strides of a shard with these local extents.
inline std::array<std::ptrdiff_t, max_tensor_rank> strides_of(tensor_index const& e, std::size_t rank) {
  std::array<std::ptrdiff_t, max_tensor_rank> s{};
  std::ptrdiff_t step = 1;
  for (std::size_t d = rank; d-- > 0;) {
    s[d] = step;
    step *= static_cast<std::ptrdiff_t>(e[d]);
  }
  return s;
}

// Folds runs of indices that are contiguous in every operand into one, so
// that each of m, n, k is one index where the operands allow it.
inline std::vector<gemm_index> fold(std::vector<gemm_index> const& run) {
  std::vector<gemm_index> out;
  for (gemm_index const& i : run) {
    if (i.extent == 1) continue;  // index 0 only: its stride does not matter
    if (!out.empty()) {
      gemm_index& last = out.back();
      auto const follows = [&](std::ptrdiff_t outer, std::ptrdiff_t inner) {
        return outer == inner * static_cast<std::ptrdiff_t>(i.extent);
      };
      if (follows(last.a, i.a) && follows(last.b, i.b) && follows(last.c, i.c)) {
        last = {last.extent * i.extent, i.a, i.b, i.c};
        continue;
      }
    }
    out.push_back(i);
  }
  if (out.empty()) out.push_back({});
  return out;
}

// The local product of shards with these local extents as one strided
// batched GEMM. Indices of m or n that do not fold become batch indices;
// contracted ones must fold (they do whenever they are adjacent and in the
// same order in both operands).
inline void gemm_geometry(contraction const& k, tensor_index const& ea, tensor_index const& eb, tensor_index const& ec,
                          gemm_shape& shape, gemm_strides& sa, gemm_strides& sb, gemm_strides& sc) {
  auto const sta = strides_of(ea, k.a.size());
  auto const stb = strides_of(eb, k.b.size());
  auto const stc = strides_of(ec, k.c.size());
  auto const index = [&](char l) {
    gemm_index i;
    std::size_t const pa = contraction::find(k.a, l);
    std::size_t const pb = contraction::find(k.b, l);
    std::size_t const pc = contraction::find(k.c, l);
    i.extent = pa != npos ? ea[pa] : eb[pb];
    i.a = pa != npos ? sta[pa] : 0;
    i.b = pb != npos ? stb[pb] : 0;
    i.c = pc != npos ? stc[pc] : 0;
    return i;
  };
  std::vector<gemm_index> batch, m, n, sum;
  for (std::size_t i = 0; i < k.c.size(); ++i) {
    label_role const role = k.role(k.c.chars[i]);
    (role == label_role::batch ? batch : role == label_role::free_a ? m : n).push_back(index(k.c.chars[i]));
  }
  for (std::size_t i = 0; i < k.a.size(); ++i)
    if (k.role(k.a.chars[i]) == label_role::contracted) sum.push_back(index(k.a.chars[i]));
  std::vector<gemm_index> loops = fold(batch);
  std::vector<gemm_index> fm = fold(m), fn = fold(n), fk = fold(sum);
  // Both hold by einsum's static_asserts (adjacent contracted letters fold whatever the extents).
  if (fk.size() != 1 || fm.size() + fn.size() + loops.size() > max_batch_dims + 2)
    throw error("einsum " + std::string(to_string(k).view()) + ": the local product does not fold");
  loops.insert(loops.end(), fm.begin(), fm.end() - 1);  // all but the innermost run of m and n loop
  loops.insert(loops.end(), fn.begin(), fn.end() - 1);
  std::erase_if(loops, [](gemm_index const& i) { return i.extent == 1; });
  shape = {};
  sa = sb = sc = {};
  shape.batch_rank = loops.size();
  for (std::size_t i = 0; i < loops.size(); ++i) {
    shape.batch[i] = loops[i].extent;
    sa.batch[i] = loops[i].a;
    sb.batch[i] = loops[i].b;
    sc.batch[i] = loops[i].c;
  }
  shape.m = fm.back().extent;
  shape.n = fn.back().extent;
  shape.k = fk.back().extent;
  sa.row = fm.back().a;
  sa.col = fk.back().a;
  sb.row = fk.back().b;
  sb.col = fn.back().b;
  sc.row = fm.back().c;
  sc.col = fn.back().c;
}

// Whether the contracted letters are adjacent and in one order in A and B,
// so that they fold into one index of the local GEMM whatever the extents.
consteval bool contracted_adjacent(contraction const& k) {
  auto const run = [&](contraction::labels const& of) {
    contraction::labels out;
    for (std::size_t i = 0; i < of.size(); ++i)
      if (k.role(of.chars[i]) == label_role::contracted) out.append(std::string_view(&of.chars[i], 1));
    return out;
  };
  auto const adjacent = [&](contraction::labels const& of) {
    std::size_t first = npos, last = 0;
    for (std::size_t i = 0; i < of.size(); ++i)
      if (k.role(of.chars[i]) == label_role::contracted) {
        if (first == npos) first = i;
        last = i;
      }
    return first == npos || last - first + 1 == run(of).size();
  };
  return adjacent(k.a) && adjacent(k.b) && run(k.a) == run(k.b);
}

// The most batch loops a product can need: every batch letter, and all but
// one letter of m and of n (when they do not fold).
consteval std::size_t most_loops(contraction const& k) {
  std::size_t batch = 0, m = 0, n = 0;
  for (std::size_t i = 0; i < k.c.size(); ++i) {
    label_role const r = k.role(k.c.chars[i]);
    (r == label_role::batch ? batch : r == label_role::free_a ? m : n) += 1;
  }
  return batch + (m > 0 ? m - 1 : 0) + (n > 0 ? n - 1 : 0);
}

template <contraction_text Spec>
consteval std::size_t result_rank() {
  static_assert(require_valid<contraction_error(Spec.view())>());
  return parse_contraction(Spec.view()).c.size();
}

// The product's layouts for these operands, and the requested result layout if any.
template <class A, class B>
op_layouts const& product_plan(contraction const& k, A const& a, B const& b, layout const* requested) {
  mesh_shape const& mesh = a.mesh().shape();
  std::string key = "einsum " + std::string(to_string(k).view());
  add_to_key(key, mesh, a.bound(), extents_of(a));
  add_to_key(key, mesh, b.bound(), extents_of(b));
  bound_layout want;
  if (requested != nullptr) {
    want = bind(mesh, *requested);
    key.append("->").append(to_string(*requested).view());
  }
  return planned(a.mesh(), key, [&] {
    return plan_product(mesh, k, a.bound(), b.bound(), extents_of(a), extents_of(b),
                        requested != nullptr ? &want : nullptr, compute_model(a.mesh()));
  });
}

// The product c, planned as `plan`, delivered: moved to plan.out, then
// added into add_to, or spelled as requested.
template <class T, std::size_t RC, class MemorySpace>
dynamic_dtensor<T, RC, MemorySpace> deliver(dynamic_dtensor<T, RC, MemorySpace> const& c, op_layouts const& plan,
                                            layout const* requested, dynamic_dtensor<T, RC, MemorySpace>* add_to,
                                            execution_space_of<MemorySpace> const& exec) {
  auto out = to_layout(c, plan.out, exec);
  if (add_to != nullptr) {
    local::axpy(exec, 1, local::flat(out.local()), local::flat(add_to->local()));
    return *add_to;
  }
  if (requested == nullptr) return out;
  // Spelled as asked (axes of extent 1 place nothing, so equal layouts may read differently).
  return dynamic_dtensor<T, RC, MemorySpace>::adopt(out.mesh(), *requested, out.global_extents(), out.local());
}

template <contraction_text Spec, class T, std::size_t RA, std::size_t RB, class MemorySpace>
dynamic_dtensor<T, result_rank<Spec>(), MemorySpace> einsum(
    dynamic_dtensor<T, RA, MemorySpace> const& a, dynamic_dtensor<T, RB, MemorySpace> const& b, accumulation_t<T> alpha,
    layout const* requested, execution_space_of<MemorySpace> const& exec,
    dynamic_dtensor<T, result_rank<Spec>(), MemorySpace>* add_to = nullptr) {
  constexpr contraction k = parse_contraction(Spec.view());
  static_assert(k.a.size() == RA, "einsum: A's rank differs from the contraction's");
  static_assert(k.b.size() == RB, "einsum: B's rank differs from the contraction's");
  static_assert(contracted_adjacent(k), "einsum: the contracted letters must be adjacent and in one order in A and B");
  static_assert(most_loops(k) <= max_batch_dims, "einsum: too many batch letters for the local GEMM");
  constexpr std::size_t RC = k.c.size();
  char const* const op = add_to != nullptr ? "einsum_add" : "einsum";
  require_held(op, a, b);
  if (add_to != nullptr) require_held(op, *add_to);
  require_same_mesh("einsum", a, b);
  shardmesh::detail::operation_scope const scope([&] {
    return std::string(op) + " " + std::string(Spec.view()) + " of " + a.notation() + " and " + b.notation();
  });
  fixed_text const shape_problem = contraction_shape_error(k, extents_of(a), extents_of(b));
  if (!shape_problem.empty()) throw mismatched_tensor_error(std::string(shape_problem.view()));
  auto const full = contraction_extents(k, extents_of(a), extents_of(b));
  tensor_index global{};
  for (std::size_t d = 0; d < RC; ++d) global[d] = full[d];
  if (add_to != nullptr) {
    require_same_mesh("einsum_add", a, *add_to);
    if (add_to->global_extents() != global)
      throw mismatched_tensor_error("einsum_add: " + add_to->notation() + " is not the product's shape");
    if (add_to->layout().is_partial() && add_to->layout().op != reduce_op::sum)
      throw invalid_layout_error("einsum_add: " + add_to->notation() + " is partial by another op than a sum");
  }
  if (requested != nullptr) {
    fixed_text const m = layout_error<T>("einsum", a.mesh().shape(), *requested);
    if (!m.empty()) throw invalid_layout_error(std::string(m.view()));
    if (requested->rank != RC) throw invalid_layout_error("einsum: the requested layout's rank differs from C's");
  }
  op_layouts const plan = product_plan(k, a, b, requested);
  if constexpr (RA == 2 && RB == 2 && RC == 2) {
    if (plan.algorithm != product_algorithm::gather) {  // the operands stream as they are
      auto const c = make_like<T, RC, MemorySpace>(a.mesh(), plan.c, global);
      summa(a, b, c, alpha, plan.strip, plan.strip_buffers, plan.strip_tiles, exec);
      return deliver(c, plan, requested, add_to, exec);
    }
  }
  auto const la = to_layout(a, plan.a, exec);
  auto const lb = to_layout(b, plan.b, exec);
  // Into add_to's shard with beta = 1 when the local product lies in its
  // layout already (and add_to is no operand's shard).
  mesh_shape const& mesh = a.mesh().shape();
  bool const in_place =
      add_to != nullptr &&
      shardmesh::detail::normalized(mesh, plan.out) == shardmesh::detail::normalized(mesh, plan.c) &&
      shardmesh::detail::normalized(mesh, add_to->bound()) == shardmesh::detail::normalized(mesh, plan.c) &&
      add_to->local().data() != la.local().data() && add_to->local().data() != lb.local().data();
  auto c = in_place ? *add_to : make_like<T, RC, MemorySpace>(a.mesh(), plan.c, global);
  gemm_shape shape;
  gemm_strides sa, sb, sc;
  gemm_geometry(k, shardmesh::detail::extents_of(la.local()), shardmesh::detail::extents_of(lb.local()),
                shardmesh::detail::extents_of(c.local()), shape, sa, sb, sc);
  local_gemm(exec, shape, alpha, la.local().data(), sa, lb.local().data(), sb, in_place ? 1 : 0, c.local().data(), sc);
  shardmesh::progress(a.mesh());  // communication in flight moves between products (runtime/progress.hpp)
  if (in_place) return c;
  return deliver(c, plan, requested, add_to, exec);
}

}  // namespace detail

// How einsum<Spec>(a, b) (or, with `out`, delivered in out) would run: the
// layouts, the algorithm (gather or summa), summa's strip width, the
// workspace in elements and the modelled cost. Not collective.
template <contraction_text Spec, class T, std::size_t RA, std::size_t RB, class MemorySpace>
[[nodiscard]] op_layouts planned_product(dynamic_dtensor<T, RA, MemorySpace> const& a,
                                         dynamic_dtensor<T, RB, MemorySpace> const& b, layout const* out = nullptr) {
  require_held("planned_product", a, b);
  constexpr contraction k = parse_contraction(Spec.view());
  fixed_text const shape_problem = contraction_shape_error(k, detail::extents_of(a), detail::extents_of(b));
  if (!shape_problem.empty()) throw mismatched_tensor_error(std::string(shape_problem.view()));
  detail::require_same_mesh("planned_product", a, b);
  if (out != nullptr)
    if (fixed_text const m = layout_error<T>("planned_product", a.mesh().shape(), *out); !m.empty())
      throw invalid_layout_error(std::string(m.view()));
  return detail::product_plan(k, a, b, out);
}

// C = A.B in index notation, in the layout the propagation rules give.
template <contraction_text Spec, class T, std::size_t RA, std::size_t RB, class MemorySpace>
[[nodiscard]] auto einsum(dynamic_dtensor<T, RA, MemorySpace> const& a, dynamic_dtensor<T, RB, MemorySpace> const& b,
                          execution_space_of<MemorySpace> const& exec = {},
                          std::source_location where = std::source_location::current()) {
  shardmesh::detail::called_from const site(where);
  return detail::einsum<Spec>(a, b, 1, nullptr, exec);
}

// C = A.B delivered in `out`: the cheapest operand and result moves that reach it.
template <contraction_text Spec, class T, std::size_t RA, std::size_t RB, class MemorySpace>
[[nodiscard]] auto einsum(dynamic_dtensor<T, RA, MemorySpace> const& a, dynamic_dtensor<T, RB, MemorySpace> const& b,
                          layout const& out, execution_space_of<MemorySpace> const& exec = {},
                          std::source_location where = std::source_location::current()) {
  shardmesh::detail::called_from const site(where);
  return detail::einsum<Spec>(a, b, 1, &out, exec);
}

// C = alpha A.B: the local GEMM applies alpha (BLAS's alpha), no pass of its
// own. A partial result stays partial: the product is linear in alpha.
template <contraction_text Spec, class T, std::size_t RA, std::size_t RB, class MemorySpace>
[[nodiscard]] auto einsum(std::type_identity_t<accumulation_t<T>> alpha, dynamic_dtensor<T, RA, MemorySpace> const& a,
                          dynamic_dtensor<T, RB, MemorySpace> const& b,
                          execution_space_of<MemorySpace> const& exec = {},
                          std::source_location where = std::source_location::current()) {
  shardmesh::detail::called_from const site(where);
  return detail::einsum<Spec>(a, b, alpha, nullptr, exec);
}

// c += A.B, c in any layout but one partial by another op than a sum:
// where the local product lies in c's layout already, the local GEMM adds
// into c's shard (BLAS's beta = 1); else the product is delivered in c's
// layout and added. Every copy of c sees the sum (copies share the shard).
template <contraction_text Spec, class T, std::size_t RA, std::size_t RB, class MemorySpace>
void einsum_add(dynamic_dtensor<T, detail::result_rank<Spec>(), MemorySpace>& c,
                dynamic_dtensor<T, RA, MemorySpace> const& a, dynamic_dtensor<T, RB, MemorySpace> const& b,
                execution_space_of<MemorySpace> const& exec = {},
                std::source_location where = std::source_location::current()) {
  shardmesh::detail::called_from const site(where);
  require_held("einsum_add", c);
  layout const requested = c.layout();
  (void)detail::einsum<Spec>(a, b, 1, &requested, exec, &c);
}

// C = alpha A.B delivered in `out`.
template <contraction_text Spec, class T, std::size_t RA, std::size_t RB, class MemorySpace>
[[nodiscard]] auto einsum(std::type_identity_t<accumulation_t<T>> alpha, dynamic_dtensor<T, RA, MemorySpace> const& a,
                          dynamic_dtensor<T, RB, MemorySpace> const& b, layout const& out,
                          execution_space_of<MemorySpace> const& exec = {},
                          std::source_location where = std::source_location::current()) {
  shardmesh::detail::called_from const site(where);
  return detail::einsum<Spec>(a, b, alpha, &out, exec);
}

}  // namespace shardmesh::ops
