#pragma once
// How layouts propagate through compute (DESIGN.md, "Layouts propagate
// through compute"; docs/05-sharded-compute.md). For each kind of op a rule
// says which operand layouts it can run on locally and the layout of its
// result; when the operands do not fit, the cheapest redistribution of the
// operands (and of the result, if a layout is requested) is chosen with the
// planner's cost model. Pure constexpr; no Kokkos or MPI.
//
//   product   C = A.B in index notation (contraction.hpp), per mesh axis x:
//             x shards a free dimension of one operand, unused by the other: C sharded there;
//             x shards a shared dimension the same way in both: batch -> sharded, contracted -> P(sum:x);
//             x shards a shared dimension of one operand only: the other is sliced to match (local);
//             one operand P(sum:x), the other not using x: C P(sum:x) (the product is linear).
//   elementwise   equal placements, or a replicated operand sliced to the other's (broadcast);
//             partial operands only where the op is linear in them.
//   reduction over a dimension sharded on x: P(op:x).
//   row-wise (softmax, layer norm over a dimension): that dimension unsharded, nothing partial.

#include "shardmesh/algebra/axis_groups.hpp"
#include "shardmesh/algebra/axis_set.hpp"
#include "shardmesh/algebra/contraction.hpp"
#include "shardmesh/algebra/layout.hpp"
#include "shardmesh/algebra/mesh_shape.hpp"
#include "shardmesh/algebra/planner.hpp"
#include "shardmesh/algebra/product_algorithm.hpp"
#include "shardmesh/algebra/shard_geometry.hpp"
#include "shardmesh/algebra/static_string.hpp"
#include "shardmesh/algebra/validation.hpp"

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

namespace shardmesh {

// The layouts an op runs on and the layout of its result. `a` and `b` are
// reached from the given operands by redistribution (none if equal); `out`
// is the result as delivered: `c`, or the requested layout, planned from it.
struct op_layouts {
  bool ok = false;
  bound_layout a, b;
  bound_layout c;
  bound_layout out;
  std::uint64_t cost = 0;  // elements a rank receives, plus latency, over every move
  std::uint64_t work = 0;  // the local compute, in the same units (products only)
  fixed_text why;          // when !ok: why no layouts fit
  // Products only: how the layouts run (product_algorithm.hpp), summa's
  // strip width, strips in flight per operand and tiles per strip, and the
  // extra elements the busiest rank holds meanwhile (the gathered operands,
  // or the strips).
  product_algorithm algorithm = product_algorithm::gather;
  std::size_t strip = 0;
  std::size_t strip_buffers = 0;
  std::size_t strip_tiles = 0;
  std::uint64_t workspace = 0;
};

// The price of moving data, in elements a rank receives: each communicating
// step costs `latency_elements` on top of its bytes; a product's local
// multiply-adds count too, `flops_per_element` of them as much as one
// element received (CPUs here do tens of GFLOP/s and move a few GB/s), so
// that gathering operands to multiply them whole on every rank is not
// mistaken for a saving.
struct compute_cost_model {
  std::uint64_t latency_elements = 4096;
  std::uint64_t flops_per_element = 64;
  // The extra elements a product may hold on a rank beyond its operands and
  // result (product_algorithm.hpp); 0: as many as its larger operand's
  // shard, and at least 64 Ki.
  std::uint64_t workspace_limit = 0;
};

enum class elementwise_kind : unsigned char {
  linear,     // a + b, a - b: partial inputs of op sum on the same or disjoint axes
  bilinear,   // a * b: each partial axis of one operand replicated in the other
  nonlinear,  // anything else: no partial input
};

namespace detail {

[[nodiscard]] constexpr axis_set used_axes(bound_layout const& l) { return sharding_axes(l) | l.partial_axes; }

[[nodiscard]] constexpr axis_set dim_axes(bound_dim const& d) {
  axis_set s;
  for (std::size_t i = 0; i < d.count; ++i) s.insert(d.axes[i]);
  return s;
}

// l without the axes in s: the dimensions they shard gathered, the partial sums on them reduced.
[[nodiscard]] constexpr bound_layout without_axes(bound_layout l, axis_set s) {
  for (std::size_t d = 0; d < l.rank; ++d) {
    bound_dim& dim = l.dims[d];
    unsigned char kept = 0;
    for (std::size_t i = 0; i < dim.count; ++i)
      if (!s.contains(dim.axes[i])) dim.axes[kept++] = dim.axes[i];
    dim.count = kept;
    if (kept == 0) dim = bound_dim{};
  }
  l.partial_axes -= s;
  if (l.partial_axes.empty()) l.op = reduce_op::sum;
  return l;
}

// Whether no mesh axis is used twice.
[[nodiscard]] constexpr bool axes_unique(bound_layout const& l) {
  axis_set seen = l.partial_axes;
  for (std::size_t d = 0; d < l.rank; ++d)
    for (std::size_t i = 0; i < l.dims[d].count; ++i) {
      if (seen.contains(l.dims[d].axes[i])) return false;
      seen.insert(l.dims[d].axes[i]);
    }
  return true;
}

[[nodiscard]] constexpr fixed_text dim_text(mesh_shape const& mesh, bound_dim const& d) {
  bound_layout one;
  one.rank = 1;
  one.dims[0] = d;
  return to_string(mesh, one);
}

// Whether a dimension placed `from` reaches `to` by a local slice in a
// layout that uses the axes `used`: from replicated, or block with its axes
// a prefix of to's, the rest free.
[[nodiscard]] constexpr bool slices_to(bound_dim const& from, bound_dim const& to, axis_set used) {
  if (from == to) return true;
  if (from.count != 0 && (from.dist != distribution::block || to.dist != distribution::block)) return false;
  if (from.count > to.count) return false;
  for (std::size_t i = 0; i < from.count; ++i)
    if (from.axes[i] != to.axes[i]) return false;
  for (std::size_t i = from.count; i < to.count; ++i)
    if (used.contains(to.axes[i])) return false;
  return true;
}

// Elements of a tensor with the given extents.
[[nodiscard]] constexpr std::uint64_t elements(std::span<std::size_t const> extents) {
  std::uint64_t n = 1;
  for (std::size_t e : extents) n *= e;
  return n;
}

// Elements of the largest local shard under l (shard 0's, in block and
// cyclic alike): among equally cheap layouts, the best balanced.
[[nodiscard]] constexpr std::uint64_t largest_shard(mesh_shape const& mesh, bound_layout const& l,
                                                    std::span<std::size_t const> extents) {
  std::uint64_t n = 1;
  for (std::size_t d = 0; d < l.rank; ++d) n *= local_extent(mesh, l.dims[d], extents[d], mesh_coordinates{});
  return n;
}

// Elements a rank receives moving a tensor of `count` elements from one
// layout to another, plus latency; ~0 if the move is impossible.
[[nodiscard]] constexpr std::uint64_t move_cost(mesh_shape const& mesh, bound_layout const& from,
                                                bound_layout const& to, std::uint64_t count, compute_cost_model model) {
  bound_layout const f = normalized(mesh, from);
  bound_layout const t = normalized(mesh, to);
  if (f == t) return 0;
  if (!transition_error("propagation", mesh, unbind(mesh, f), unbind(mesh, t)).empty()) return ~std::uint64_t{0};
  redistribution_plan const plan = plan_redistribution(mesh, f, t);
  return plan.bytes * count / global_units(mesh) + plan.communicating_steps() * model.latency_elements;
}

// The product rule on operands a and b: the layouts it runs on (a and b,
// sliced where a shared dimension is sharded in one of them only) and its result.
[[nodiscard]] constexpr op_layouts product_rule(mesh_shape const& mesh, contraction const& k, bound_layout a,
                                                bound_layout b) {
  op_layouts r;
  auto const fail = [&](auto const&... parts) -> op_layouts {
    ((r.why << to_string(k) << ": ") << ... << parts);
    return r;
  };
  // Shared dimensions first: slicing one operand to match the other.
  for (std::size_t i = 0; i < k.a.size(); ++i) {
    std::size_t const j = contraction::find(k.b, k.a.chars[i]);
    if (j == npos || a.dims[i] == b.dims[j]) continue;
    if (slices_to(a.dims[i], b.dims[j], used_axes(a)))
      a.dims[i] = b.dims[j];
    else if (slices_to(b.dims[j], a.dims[i], used_axes(b)))
      b.dims[j] = a.dims[i];
    else
      return fail("dimension \"", std::string_view(&k.a.chars[i], 1), "\" is ", dim_text(mesh, a.dims[i]), " in A and ",
                  dim_text(mesh, b.dims[j]), " in B");
  }
  for (bound_layout const* p : {&a, &b})
    if (!p->partial_axes.empty() && p->op != reduce_op::sum)
      return fail(p == &a ? "A" : "B", " is partial with ", to_string(p->op), ": a product is linear in sums only");
  if (!(a.partial_axes & used_axes(b)).empty() || !(b.partial_axes & used_axes(a)).empty())
    return fail("an axis partial in one operand is used by the other");
  r.c.rank = k.c.size();
  for (std::size_t i = 0; i < k.c.size(); ++i) {
    char const l = k.c.chars[i];
    std::size_t const in_a = contraction::find(k.a, l);
    std::size_t const in_b = contraction::find(k.b, l);
    if (in_a != npos) {  // free in A or batch: A's placement (equal to B's for a batch dimension)
      r.c.dims[i] = a.dims[in_a];
      if (in_b == npos && !(dim_axes(a.dims[in_a]) & used_axes(b)).empty())
        return fail("dimension \"", std::string_view(&l, 1), "\" of A is sharded on an axis B uses");
    } else if (in_b != npos) {
      r.c.dims[i] = b.dims[in_b];
      if (!(dim_axes(b.dims[in_b]) & used_axes(a)).empty())
        return fail("dimension \"", std::string_view(&l, 1), "\" of B is sharded on an axis A uses");
    }
  }
  r.c.partial_axes = a.partial_axes | b.partial_axes;
  for (std::size_t i = 0; i < k.a.size(); ++i)
    if (k.role(k.a.chars[i]) == label_role::contracted) r.c.partial_axes |= dim_axes(a.dims[i]);
  r.ok = true;
  r.a = a;
  r.b = b;
  return r;
}

// The elementwise rule: the result's placement per dimension, and each
// operand's layout brought to it by local steps only (slice, to_partial).
[[nodiscard]] constexpr op_layouts elementwise_rule(mesh_shape const& mesh, elementwise_kind kind, bound_layout a,
                                                    bound_layout b) {
  op_layouts r;
  auto const fail = [&](auto const&... parts) -> op_layouts {
    ((r.why << "elementwise: ") << ... << parts);
    return r;
  };
  if (kind == elementwise_kind::nonlinear && (a.partial_axes | b.partial_axes) != axis_set{})
    return fail("a partial operand of a nonlinear op");
  for (bound_layout const* p : {&a, &b})
    if (!p->partial_axes.empty() && p->op != reduce_op::sum)
      return fail("an operand partial with ", to_string(p->op), " in an op linear in sums only");
  r.c.rank = a.rank;
  for (std::size_t d = 0; d < a.rank; ++d) {
    if (slices_to(b.dims[d], a.dims[d], used_axes(b)))
      r.c.dims[d] = a.dims[d];
    else if (slices_to(a.dims[d], b.dims[d], used_axes(a)))
      r.c.dims[d] = b.dims[d];
    else
      return fail("dimension ", d, " is ", dim_text(mesh, a.dims[d]), " and ", dim_text(mesh, b.dims[d]));
  }
  axis_set const sharded = sharding_axes(r.c);
  if (!axes_unique(r.c) || !(sharded & (a.partial_axes | b.partial_axes)).empty())
    return fail("the operands use one axis in different roles");
  axis_set const both = a.partial_axes & b.partial_axes;
  if (kind == elementwise_kind::bilinear && !both.empty()) return fail("both operands of a product are partial");
  r.c.partial_axes = a.partial_axes | b.partial_axes;
  r.ok = true;
  r.a = r.c;
  r.b = r.c;
  if (kind == elementwise_kind::bilinear) {  // a partial axis of one operand stays replicated in the other
    r.a.partial_axes = a.partial_axes;
    r.b.partial_axes = b.partial_axes;
  }
  for (bound_layout* p : {&r.a, &r.b})
    if (p->partial_axes.empty()) p->op = reduce_op::sum;
  return r;
}

// Searches operand layouts with subsets of their axes removed (gathered or
// reduced): the cheapest pair on which rule(a', b') holds, with the result
// moved to `requested` if given.
// The choice goes by moves plus work(layouts); equal ones to the smaller
// largest local operands and result.
template <class Rule, class Work>
[[nodiscard]] constexpr op_layouts cheapest(mesh_shape const& mesh, bound_layout a, bound_layout b,
                                            std::span<std::size_t const> ea, std::span<std::size_t const> eb,
                                            std::span<std::size_t const> ec, bound_layout const* requested,
                                            compute_cost_model model, Rule const& rule, Work const& work) {
  a = normalized(mesh, a);
  b = normalized(mesh, b);
  op_layouts best;
  best.cost = ~std::uint64_t{0};
  std::uint64_t best_memory = 0;
  unsigned const ua = used_axes(a).bits;
  unsigned const ub = used_axes(b).bits;
  op_layouts first;  // the untouched operands' verdict, for the message
  bool any = false;
  for (unsigned sa = 0;; sa = (sa - ua) & ua) {  // every subset of ua, the empty one first
    for (unsigned sb = 0;; sb = (sb - ub) & ub) {
      op_layouts r = rule(without_axes(a, {sa}), without_axes(b, {sb}));
      if (!any) first = r;
      any = true;
      if (r.ok) {
        r.c = normalized(mesh, r.c);
        r.out = requested != nullptr ? normalized(mesh, *requested) : r.c;
        std::uint64_t const parts[3] = {move_cost(mesh, a, r.a, elements(ea), model),
                                        move_cost(mesh, b, r.b, elements(eb), model),
                                        move_cost(mesh, r.c, r.out, elements(ec), model)};
        bool possible = true;
        r.cost = 0;
        for (std::uint64_t p : parts) {
          possible = possible && p != ~std::uint64_t{0};
          r.cost += p;
        }
        std::uint64_t const memory =
            largest_shard(mesh, r.a, ea) + largest_shard(mesh, r.b, eb) + largest_shard(mesh, r.c, ec);
        r.work = possible ? work(r) : 0;
        std::uint64_t const total = r.cost + r.work;
        std::uint64_t const best_total = best.cost == ~std::uint64_t{0} ? best.cost : best.cost + best.work;
        if (possible && (total < best_total || (total == best_total && memory < best_memory))) {
          best = r;
          best_memory = memory;
        }
      }
      if (((sb - ub) & ub) == 0) break;
    }
    if (((sa - ua) & ua) == 0) break;
  }
  if (best.ok) return best;
  first.ok = false;
  if (requested != nullptr)
    first.why << (first.why.empty() ? "" : "; ") << "no redistribution reaches " << to_string(mesh, *requested);
  return first;
}

// "ik,kj->ij": rank-2 operands, A's last dimension contracted with B's first.
[[nodiscard]] constexpr bool matrix_product_form(contraction const& k) {
  return k.a.size() == 2 && k.b.size() == 2 && k.c.size() == 2 && k.a.chars[1] == k.b.chars[0] &&
         k.c.chars[0] == k.a.chars[0] && k.c.chars[1] == k.b.chars[1] && k.a.chars[0] != k.b.chars[1];
}

// The extra elements the busiest rank holds for a product planned as r from
// a and b: the operands where they moved, and the result before its move.
[[nodiscard]] constexpr std::uint64_t product_workspace(mesh_shape const& mesh, bound_layout const& a,
                                                        bound_layout const& b, std::span<std::size_t const> ea,
                                                        std::span<std::size_t const> eb,
                                                        std::span<std::size_t const> ec, op_layouts const& r) {
  return (r.a != a ? largest_shard(mesh, r.a, ea) : 0) + (r.b != b ? largest_shard(mesh, r.b, eb) : 0) +
         (r.c != r.out ? largest_shard(mesh, r.c, ec) : 0);
}

// The mesh axes of extent above 1 that neither a nor b uses: both operands
// are replicated over them (the layers of summa_2_5d).
[[nodiscard]] constexpr axis_set free_axes(mesh_shape const& mesh, bound_layout const& a, bound_layout const& b) {
  axis_set s;
  for (std::size_t i = 0; i < mesh.ndim; ++i)
    if (mesh[i].extent > 1) s.insert(i);
  return s - used_axes(a) - used_axes(b);
}

// The SUMMA plan of a matrix product from a and b (normalised, not partial,
// k sharded in at least one): k gathered in both as far as the rule goes,
// the operands streamed in strips instead of moved; in layers over the
// axes `layers` (none: plain SUMMA), where C is partial until delivered.
// !ok if the product rule refuses those layouts. r.work is the
// multiply-adds of a whole walk, `work`, scaled to the layer's share.
[[nodiscard]] constexpr op_layouts summa_plan(mesh_shape const& mesh, contraction const& k, bound_layout const& a,
                                              bound_layout const& b, std::span<std::size_t const> ea,
                                              std::span<std::size_t const> eb, std::span<std::size_t const> ec,
                                              bound_layout const* requested, compute_cost_model model,
                                              std::uint64_t limit, std::uint64_t work, axis_set layers) {
  bound_layout const whole_a = normalized(mesh, without_axes(a, dim_axes(a.dims[1])));
  bound_layout const whole_b = normalized(mesh, without_axes(b, dim_axes(b.dims[0])));
  op_layouts r = product_rule(mesh, k, whole_a, whole_b);
  // The strips are a's and b's rows and columns as they are: nothing else may move.
  if (!r.ok || normalized(mesh, r.a) != whole_a || normalized(mesh, r.b) != whole_b) return op_layouts{};
  r.c = normalized(mesh, r.c);
  // Delivered as asked, or as plain SUMMA delivers it: layers change how, not what.
  r.out = requested != nullptr ? normalized(mesh, *requested) : r.c;
  if (!layers.empty()) {
    r.c.partial_axes = layers;
    r.c.op = reduce_op::sum;
  }
  std::uint64_t const result_move = move_cost(mesh, r.c, r.out, elements(ec), model);
  if (result_move == ~std::uint64_t{0}) return op_layouts{};
  mesh_coordinates const busiest{};  // block shards are largest at coordinate 0
  std::size_t const extent = ea[1];
  bool const a_travels = a.dims[1].count != 0, b_travels = b.dims[0].count != 0;
  std::size_t const rows = local_extent(mesh, a.dims[0], ea[0], busiest);
  std::size_t const cols = local_extent(mesh, b.dims[1], eb[1], busiest);
  std::size_t const buffered = (a_travels ? rows : 0) + (b_travels ? cols : 0);
  strip_shape strips = summa_strips(buffered, extent, model.latency_elements, limit);
  strip_walk walk = walk_strips(mesh, a.dims[1], b.dims[0], extent, strips.width);
  // Where one operand travels, tiles of it may keep strips as deep as the
  // limit would not: taken where the tiles' products read less.
  if (a_travels != b_travels) {
    std::size_t const deepest = summa_strips(buffered, extent, model.latency_elements, 0).width;
    strip_walk const deep = walk_strips(mesh, a.dims[1], b.dims[0], extent, deepest);
    strip_shape const tiled = tiled_strips(buffered, deep.widest, limit);
    if (tiled.tiles != 0 &&
        reads_less(deep.widest, (buffered + tiled.tiles - 1) / tiled.tiles, walk.widest, buffered)) {
      strips = tiled;
      walk = deep;
    }
  }
  r.strip = walk.widest;
  r.strip_buffers = strips.buffers;
  r.strip_tiles = strips.tiles;
  std::size_t const tile = (buffered + strips.tiles - 1) / strips.tiles;  // a buffer's elements per index of k
  // A layer's share of the strips, of their bytes and of the multiply-adds.
  std::size_t const count = layers.empty() ? 1 : group_size(mesh, layers);
  std::uint64_t const share = (walk.count + count - 1) / count;
  auto const scaled = [&](std::uint64_t x) { return walk.count == 0 ? 0 : (x * share + walk.count - 1) / walk.count; };
  // The gathers' bytes, in one broadcast per strip and operand whose k is sharded.
  std::uint64_t const received = rows * (extent - local_extent(mesh, a.dims[1], extent, busiest)) +
                                 cols * (extent - local_extent(mesh, b.dims[0], extent, busiest));
  std::uint64_t const messages = share * strips.tiles * ((a_travels ? 1U : 0U) + (b_travels ? 1U : 0U));
  r.cost = scaled(received) + messages * model.latency_elements + result_move;
  r.work = scaled(work);
  r.algorithm = layers.empty() ? product_algorithm::summa : product_algorithm::summa_2_5d;
  r.workspace = r.strip_buffers * tile * r.strip + (r.c != r.out ? largest_shard(mesh, r.c, ec) : 0);
  return r;
}

// Workspace every product may use whatever its operands: 64 Ki elements.
inline constexpr std::uint64_t small_workspace = std::uint64_t{1} << 16;

// Of the cheapest plan r and, for a matrix product whose k is sharded, the
// SUMMA plan and its layered (2.5-D) plan where the operands leave mesh
// axes free: the cheapest in moves plus work of those whose workspace fits
// the model's limit (by default the larger operand's shard, or
// small_workspace if more), else the one needing least workspace.
[[nodiscard]] constexpr op_layouts choose_algorithm(mesh_shape const& mesh, contraction const& k, bound_layout const& a,
                                                    bound_layout const& b, std::span<std::size_t const> ea,
                                                    std::span<std::size_t const> eb, std::span<std::size_t const> ec,
                                                    bound_layout const* requested, compute_cost_model model,
                                                    op_layouts r) {
  r.workspace = product_workspace(mesh, a, b, ea, eb, ec, r);
  bool const streamable = matrix_product_form(k) && a.partial_axes.empty() && b.partial_axes.empty() &&
                          (a.dims[1].count != 0 || b.dims[0].count != 0);
  if (!streamable) return r;
  std::uint64_t const larger =
      largest_shard(mesh, a, ea) > largest_shard(mesh, b, eb) ? largest_shard(mesh, a, ea) : largest_shard(mesh, b, eb);
  std::uint64_t const limit =
      model.workspace_limit != 0 ? model.workspace_limit : (larger > small_workspace ? larger : small_workspace);
  axis_set const layers = free_axes(mesh, a, b);
  std::array<op_layouts, 3> const candidates{
      r, summa_plan(mesh, k, a, b, ea, eb, ec, requested, model, limit, r.work, axis_set{}),
      layers.empty() ? op_layouts{} : summa_plan(mesh, k, a, b, ea, eb, ec, requested, model, limit, r.work, layers)};
  op_layouts const* best = &candidates[0];
  auto const better = [&](op_layouts const& x) {
    bool const fits = x.workspace <= limit, best_fits = best->workspace <= limit;
    if (fits != best_fits) return fits;
    return fits ? x.cost + x.work < best->cost + best->work : x.workspace < best->workspace;
  };
  for (op_layouts const& x : candidates)
    if (x.ok && better(x)) best = &x;
  return *best;
}

}  // namespace detail

// The result layout of C = A.B when the operands are used as they are
// (slicing an operand to match the other is local), or !ok and why.
// Postconditions (tested as properties): ok implies every element of C is
// the sum over ranks of the local products, on the layout c; with no
// partial inputs and no sharded contracted dimension, c is not partial.
[[nodiscard]] constexpr op_layouts product_layout(mesh_shape const& mesh, contraction const& k, bound_layout const& a,
                                                  bound_layout const& b) {
  op_layouts r = detail::product_rule(mesh, k, detail::normalized(mesh, a), detail::normalized(mesh, b));
  r.c = detail::normalized(mesh, r.c);
  r.out = r.c;
  return r;
}

// The cheapest way to compute C = A.B from operands in layouts a and b with
// the given global extents, delivering C in `requested` if not null.
// Precondition: contraction_shape_error(k, ea, eb) is empty.
// Postcondition: product_layout(mesh, k, r.a, r.b).c == r.c, and no other
// pair of operand layouts with axes removed costs less in moves plus work.
// r.algorithm says how those layouts run: gather moves the operands to r.a
// and r.b; summa streams them from a and b (product_algorithm.hpp).
[[nodiscard]] constexpr op_layouts plan_product(mesh_shape const& mesh, contraction const& k, bound_layout const& a,
                                                bound_layout const& b, std::span<std::size_t const> ea,
                                                std::span<std::size_t const> eb,
                                                bound_layout const* requested = nullptr,
                                                compute_cost_model model = {}) {
  auto const ec = contraction_extents(k, ea, eb);
  // Multiply-adds on the busiest rank: every letter at its largest local extent.
  auto const work = [&](op_layouts const& r) {
    std::uint64_t flops = 2;
    for (std::size_t i = 0; i < k.a.size(); ++i) flops *= local_extent(mesh, r.a.dims[i], ea[i], mesh_coordinates{});
    for (std::size_t i = 0; i < k.b.size(); ++i)
      if (contraction::find(k.a, k.b.chars[i]) == npos)
        flops *= local_extent(mesh, r.b.dims[i], eb[i], mesh_coordinates{});
    return flops / model.flops_per_element;
  };
  op_layouts r = detail::cheapest(
      mesh, a, b, ea, eb, std::span(ec).first(k.c.size()), requested, model,
      [&](bound_layout const& x, bound_layout const& y) { return detail::product_rule(mesh, k, x, y); }, work);
  if (!r.ok) return r;
  return detail::choose_algorithm(mesh, k, detail::normalized(mesh, a), detail::normalized(mesh, b), ea, eb,
                                  std::span(ec).first(k.c.size()), requested, model, r);
}

// Why a and b cannot meet in an elementwise op whatever the redistribution
// (different ranks, partial sums with different ops), or empty.
[[nodiscard]] constexpr fixed_text elementwise_error(mesh_shape const& mesh, bound_layout const& a,
                                                     bound_layout const& b) {
  fixed_text m;
  if (a.rank != b.rank)
    m << "elementwise: " << to_string(mesh, a) << " and " << to_string(mesh, b) << " have different ranks";
  else if (!a.partial_axes.empty() && !b.partial_axes.empty() && a.op != b.op)
    m << "elementwise: partial operands of different ops, " << to_string(mesh, a) << " and " << to_string(mesh, b);
  return m;
}

// The elementwise op's layouts when no communication is needed, or !ok.
[[nodiscard]] constexpr op_layouts elementwise_layout(mesh_shape const& mesh, elementwise_kind kind,
                                                      bound_layout const& a, bound_layout const& b) {
  op_layouts r = detail::elementwise_rule(mesh, kind, detail::normalized(mesh, a), detail::normalized(mesh, b));
  r.out = r.c;
  return r;
}

// The cheapest layouts for an elementwise op of two tensors of these extents.
// Precondition: elementwise_error(mesh, a, b) is empty.
[[nodiscard]] constexpr op_layouts plan_elementwise(mesh_shape const& mesh, elementwise_kind kind,
                                                    bound_layout const& a, bound_layout const& b,
                                                    std::span<std::size_t const> extents,
                                                    compute_cost_model model = {}) {
  return detail::cheapest(
      mesh, a, b, extents, extents, extents, nullptr, model,
      [&](bound_layout const& x, bound_layout const& y) { return detail::elementwise_rule(mesh, kind, x, y); },
      [](op_layouts const&) { return std::uint64_t{0}; });
}

// Reducing dimension `dim` with op: the input layout it runs on (partial
// sums of another op reduced first) and the result, which lacks `dim` and is
// P(op) on the axes that sharded it. Precondition: dim < a.rank.
[[nodiscard]] constexpr op_layouts plan_reduction(mesh_shape const& mesh, bound_layout const& a, std::size_t dim,
                                                  reduce_op op, std::span<std::size_t const> extents,
                                                  compute_cost_model model = {}) {
  op_layouts r;
  r.ok = true;
  r.a = detail::normalized(mesh, a);
  if (!r.a.partial_axes.empty() && r.a.op != op) r.a = detail::without_axes(r.a, r.a.partial_axes);
  r.cost = detail::move_cost(mesh, detail::normalized(mesh, a), r.a, detail::elements(extents), model);
  r.c.rank = r.a.rank - 1;
  for (std::size_t d = 0, e = 0; d < r.a.rank; ++d)
    if (d != dim) r.c.dims[e++] = r.a.dims[d];
  r.c.partial_axes = r.a.partial_axes | detail::dim_axes(r.a.dims[dim]);
  r.c.op = r.c.partial_axes.empty() ? reduce_op::sum : op;
  r.out = r.c;
  return r;
}

// An op along dimension `dim` of each row (softmax, layer norm): the
// cheapest layout reachable from a with `dim` whole and nothing partial (the
// axes in the way gathered, or moved to another dimension), and the result in
// that same layout; equal costs go to the best balanced layout.
// Precondition: dim < a.rank.
[[nodiscard]] constexpr op_layouts plan_rowwise(mesh_shape const& mesh, bound_layout const& a, std::size_t dim,
                                                std::span<std::size_t const> extents, compute_cost_model model = {}) {
  bound_layout const from = detail::normalized(mesh, a);
  axis_set const moving = detail::dim_axes(from.dims[dim]) | from.partial_axes;
  bound_layout const base = detail::without_axes(from, moving);
  std::size_t axes[max_mesh_axes]{};
  std::size_t n = 0;
  for (std::size_t x = 0; x < mesh.ndim; ++x)
    if (moving.contains(x)) axes[n++] = x;
  // Each moving axis goes nowhere (index a.rank) or to the end of a block dimension other than dim.
  op_layouts best;
  best.cost = ~std::uint64_t{0};
  std::uint64_t best_memory = 0;
  std::size_t choice[max_mesh_axes]{};
  while (true) {
    bound_layout t = base;
    bool valid = true;
    for (std::size_t i = 0; i < n; ++i) {
      std::size_t const d = choice[i];
      if (d == from.rank) continue;
      if (d == dim || t.dims[d].dist != distribution::block) valid = false;
      if (valid) detail::append_axis(t.dims[d], axes[i]);
    }
    if (valid) {
      std::uint64_t const cost = detail::move_cost(mesh, from, t, detail::elements(extents), model);
      std::uint64_t const memory = detail::largest_shard(mesh, t, extents);
      if (cost < best.cost || (cost == best.cost && memory < best_memory)) {
        best_memory = memory;
        best.ok = true;
        best.cost = cost;
        best.a = detail::normalized(mesh, t);
        best.c = best.a;
        best.out = best.a;
      }
    }
    std::size_t i = 0;
    for (; i < n && ++choice[i] > from.rank; ++i) choice[i] = 0;
    if (i == n) break;
  }
  return best;
}

// Why this product cannot be computed at all, or empty: a malformed
// contraction, an invalid layout, ranks or extents that do not match.
[[nodiscard]] constexpr fixed_text product_error(mesh_shape const& mesh, std::string_view spec, layout const& a,
                                                 layout const& b, std::span<std::size_t const> ea,
                                                 std::span<std::size_t const> eb) {
  fixed_text m = contraction_error(spec);
  if (m.empty()) m = layout_error("product", mesh, a);
  if (m.empty()) m = layout_error("product", mesh, b);
  if (!m.empty()) return m;
  contraction const k = parse_contraction(spec);
  if (a.rank != k.a.size() || ea.size() != k.a.size())
    return m << to_string(k) << ": A has " << a.rank << " dimensions and " << ea.size() << " extents, not "
             << k.a.size();
  if (b.rank != k.b.size() || eb.size() != k.b.size())
    return m << to_string(k) << ": B has " << b.rank << " dimensions and " << eb.size() << " extents, not "
             << k.b.size();
  return contraction_shape_error(k, ea, eb);
}

// Compile-time forms, for layouts and extents that are constants:
//   constexpr auto r = static_product<mesh, "btc,cf->btf", x, w, std::array{2, 8, 16}, std::array{16, 64}>();
using contraction_text = static_string<3 * max_tensor_rank + 3>;

template <mesh_shape Mesh, contraction_text Spec, layout A, layout B, auto EA, auto EB>
consteval op_layouts static_product() {
  static_assert(require_valid<mesh_error("static_product", Mesh)>());
  static_assert(require_valid<product_error(Mesh, Spec.view(), A, B, EA, EB)>());
  return plan_product(Mesh, parse_contraction(Spec.view()), bind(Mesh, A), bind(Mesh, B), EA, EB);
}

template <mesh_shape Mesh, elementwise_kind Kind, layout A, layout B, auto Extents>
consteval op_layouts static_elementwise() {
  static_assert(require_valid<mesh_error("static_elementwise", Mesh)>());
  static_assert(require_valid<layout_error("elementwise", Mesh, A)>());
  static_assert(require_valid<layout_error("elementwise", Mesh, B)>());
  static_assert(require_valid<elementwise_error(Mesh, bind(Mesh, A), bind(Mesh, B))>());
  return plan_elementwise(Mesh, Kind, bind(Mesh, A), bind(Mesh, B), Extents);
}

}  // namespace shardmesh
