#pragma once
// How a distributed matrix product C(i,j) = sum_k A(i,k) B(k,j) runs once
// propagation (propagation.hpp) has chosen its layouts, when those layouts
// gather the contracted dimension k of an operand (each rank needs the
// whole of its row panel of A or column panel of B):
//
//   gather  the operands are redistributed to the chosen layouts (all-gathers
//           of whole panels), then one local product. Fewest messages; the
//           gathered panels are extra memory.
//   summa   SUMMA (van de Geijn and Watts, 1997): k is walked in strips, no
//           wider than `strip` and never crossing a holder's run in A or in
//           B; each strip of A is broadcast over the axes that shard A's k
//           from the rank that holds it, each strip of B likewise, and every
//           rank adds the strip product into C. The same bytes as gather;
//           two strips of each operand that travels of extra memory
//           (double-buffered: the next strip travels while this one
//           multiplies). Where a tight limit would make strips shallower
//           than a holder's run and one operand travels, its strips are cut
//           across into tiles instead (as deep, fewer elements each);
//           otherwise one strip in flight where two would be narrow.
//   summa_2_5d  SUMMA in layers (2.5-D; Solomonik and Demmel, 2011): where
//           both operands are replicated over some mesh axes (the layers),
//           each layer walks every layers-th strip only, and C, partial
//           over the layers, is summed there. Each rank receives and
//           multiplies a layer's share of the strips, for one reduction
//           of its block of C; the operands' replicas are the memory that
//           pays for it.
//
// All deliver the same C, in the same layout. The choice: among the
// algorithms whose extra memory fits the limit (by default the larger
// operand's shard, and at least 64 Ki elements: a large product may not
// need more workspace than an input holds), the faster by the cost model
// (moves plus multiply-adds); if none fits, the one needing less.
// Pure constexpr; no Kokkos or MPI.

#include "shardmesh/algebra/layout.hpp"
#include "shardmesh/algebra/mesh_shape.hpp"
#include "shardmesh/algebra/shard_geometry.hpp"

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace shardmesh {

enum class product_algorithm : unsigned char { gather, summa, summa_2_5d };

[[nodiscard]] constexpr std::string_view to_string(product_algorithm a) {
  switch (a) {
    case product_algorithm::summa: return "summa";
    case product_algorithm::summa_2_5d: return "summa-2.5d";
    default: return "gather";
  }
}

// Whether strip s of a walk belongs to `layer` of `layers` (round robin).
[[nodiscard]] constexpr bool layer_walks(std::size_t s, std::size_t layer, std::size_t layers) {
  return s % layers == layer;
}

// Where a strip of k that starts at global index g ends: at most `width`
// wide, and within one holder's run in A's and in B's placement of k (so
// that one rank of each broadcast group holds all of it). A run wider than
// `width` is cut into as few strips as greedy cutting makes, but even ones
// (a run of 64 in strips of at most 48: 32 + 32, not 48 + 16, whose
// shallow product runs far below the BLAS's rate).
// Precondition: g < extent, width >= 1. Postcondition: g < result <= extent.
[[nodiscard]] constexpr std::size_t strip_end(mesh_shape const& mesh, bound_dim const& ka, bound_dim const& kb,
                                              std::size_t extent, std::size_t g, std::size_t width) {
  std::size_t const in_a = held_from(mesh, ka, extent, g);
  std::size_t const in_b = held_from(mesh, kb, extent, g);
  std::size_t const run = in_a < in_b ? in_a : in_b;
  std::size_t const strips = (run + width - 1) / width;
  return g + (run + strips - 1) / strips;
}

// How a walk in strips of at most `width` goes: how many strips, and the
// widest (what a strip's buffer must hold).
struct strip_walk {
  std::size_t count = 0;
  std::size_t widest = 0;
};

[[nodiscard]] constexpr strip_walk walk_strips(mesh_shape const& mesh, bound_dim const& ka, bound_dim const& kb,
                                               std::size_t extent, std::size_t width) {
  strip_walk w;
  for (std::size_t g = 0; g < extent;) {
    std::size_t const end = strip_end(mesh, ka, kb, extent, g, width);
    w.widest = end - g > w.widest ? end - g : w.widest;
    ++w.count;
    g = end;
  }
  return w;
}

// The depth below which a local product streams its C more than it
// computes: a strip of depth 256 does 256 multiply-adds per element of C it
// reads and writes, narrower ones leave the product bound by memory.
inline constexpr std::size_t efficient_depth = 256;

// How wide a SUMMA product's strips are, how many of each operand's are in
// flight: 2 (the next strip travels while this one multiplies) or 1
// (received, then multiplied), and into how many tiles the travelling
// operand's other dimension cuts each strip (its rows of A or columns of
// B; 1: whole strips).
struct strip_shape {
  std::size_t width = 1;
  std::size_t buffers = 2;
  std::size_t tiles = 1;
};

// The strips of a SUMMA product whose busiest rank receives `buffered`
// elements per index of k (its rows of A and columns of B, of the operands
// that travel): wide enough that each strip's bytes are 8 times a message's
// latency (the latency adds at most an eighth) and at least
// efficient_depth, double-buffered, within `limit` elements (0: no limit).
// Where the limit leaves double-buffered strips narrower than
// efficient_depth, single buffers twice as wide: a product twice as deep
// gains more than overlapping the broadcast, which shared memory moves
// only while the ranks call MPI. At least 1 wide.
[[nodiscard]] constexpr strip_shape summa_strips(std::size_t buffered, std::size_t extent,
                                                 std::uint64_t latency_elements, std::uint64_t limit) {
  std::size_t const per_index = buffered > 0 ? buffered : 1;
  std::size_t width = static_cast<std::size_t>((8 * latency_elements + per_index - 1) / per_index);
  if (width < efficient_depth) width = efficient_depth;
  if (width > extent) width = extent;
  strip_shape s{width, 2};
  if (limit != 0 && 2 * per_index * width > limit) {
    std::size_t const doubled = static_cast<std::size_t>(limit / (2 * per_index));
    s = doubled >= efficient_depth ? strip_shape{doubled, 2}
                                   : strip_shape{static_cast<std::size_t>(limit / per_index), 1};
    if (s.width > width) s.width = width;
  }
  if (s.width == 0) s.width = 1;
  return s;
}

// Strips `depth` deep (a holder's whole run) of an operand that travels
// alone, `buffered` elements per index of k, double-buffered within `limit`
// elements: its other dimension cut into as few tiles as fit. tiles == 0
// where no limit binds, or not even one index per tile fits.
// Postcondition (tiles != 0): 2 * ceil(buffered / tiles) * depth <= limit.
[[nodiscard]] constexpr strip_shape tiled_strips(std::size_t buffered, std::size_t depth, std::uint64_t limit) {
  std::uint64_t const per_tile = limit / (2 * std::uint64_t{depth > 0 ? depth : 1});  // a tile's elements per index
  if (limit == 0 || per_tile >= buffered || per_tile == 0) return strip_shape{depth, 2, 0};
  return strip_shape{depth, 2, static_cast<std::size_t>((buffered + per_tile - 1) / per_tile)};
}

// Whether a local product k deep and n wide reads less per multiply-add
// than one k0 deep and n0 wide, of the same rows: each multiply-add reads
// about 1/k of an element of C and 1/n of one of the strip, so
// 1/k + 1/n < 1/k0 + 1/n0.
[[nodiscard]] constexpr bool reads_less(std::uint64_t k, std::uint64_t n, std::uint64_t k0, std::uint64_t n0) {
  return (k + n) * k0 * n0 < (k0 + n0) * k * n;
}

}  // namespace shardmesh
