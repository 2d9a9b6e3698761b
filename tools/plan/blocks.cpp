#include "blocks.hpp"

#include <shardmesh/algebra/axis_groups.hpp>
#include <shardmesh/algebra/shard_geometry.hpp>

#include <algorithm>
#include <map>

namespace plan_tool {

namespace {

using namespace shardmesh;

// Maximal runs of indices of one dimension held by the same coordinates,
// or nothing if there are more than `limit`.
std::vector<segment> cuts(mesh_shape const& mesh, bound_dim const& dim, std::size_t extent, std::size_t limit) {
  std::vector<segment> out;
  if (dim.dist == distribution::block) {
    // One interval per shard, in index order: shard s's coordinates are s
    // in mixed radix over the dimension's axes.
    std::size_t const n = shard_count(mesh, dim);
    if (n > limit * 64) return out;  // more shards than any picture shows
    for (std::size_t s = 0; s < n; ++s) {
      mesh_coordinates c{};
      std::size_t rest = s;
      for (std::size_t i = dim.count; i-- > 0;) {
        c[dim.axes[i]] = rest % mesh.extent(dim.axes[i]);
        rest /= mesh.extent(dim.axes[i]);
      }
      interval const piece = block_interval(mesh, dim, extent, c);
      if (piece.size() != 0) out.push_back({piece.begin, piece.end});
    }
    std::sort(out.begin(), out.end(), [](segment a, segment b) { return a.begin < b.begin; });
    if (out.size() > limit) out.clear();
    return out;
  }
  // Cyclic over several shards: a cut every block_size indices.
  std::size_t const b = dim.block_size;
  std::size_t const blocks = (extent + b - 1) / b;
  if (shard_count(mesh, dim) == 1) return {{0, extent}};
  if (blocks > limit) return out;
  for (std::size_t k = 0; k < blocks; ++k) out.push_back({k * b, std::min(extent, (k + 1) * b)});
  return out;
}

}  // namespace

std::vector<std::size_t> block::ranks() const {
  std::vector<std::size_t> all;
  for (auto const& copy : copies) all.insert(all.end(), copy.begin(), copy.end());
  std::sort(all.begin(), all.end());
  return all;
}

std::string block::label() const {
  std::string out = partial ? "P " : "";
  for (std::size_t i = 0; i < copies.size(); ++i) {
    out += i == 0 ? "" : ",";
    for (std::size_t j = 0; j < copies[i].size(); ++j) out += (j == 0 ? "" : "+") + std::to_string(copies[i][j]);
  }
  return out;
}

block_grid blocks_of(request const& r, layout const& l, std::size_t limit) {
  block_grid grid;
  grid.layout = l;
  grid.rank = r.rank;
  if (r.rank != 1 && r.rank != 2) {
    grid.problem = "pictures show tensors of rank 1 or 2, not " + std::to_string(r.rank);
    return grid;
  }
  mesh_shape const& mesh = r.mesh;
  bound_layout const b = bind(mesh, l);
  std::vector<std::vector<segment>> dims;
  for (std::size_t d = 0; d < r.rank; ++d) {
    dims.push_back(cuts(mesh, b.dims[d], r.global[d], limit));
    if (dims.back().empty()) {
      grid.problem = "dimension " + std::to_string(d) + " of " + tensor_name(r) + " has more than " +
                     std::to_string(limit) + " blocks under " + std::string(to_string(l).view()) + ", too many to draw";
      return grid;
    }
  }
  grid.rows = r.rank == 2 ? dims[0] : std::vector<segment>{{0, 1}};
  grid.cols = dims[r.rank - 1];
  for (segment const& row : grid.rows)
    for (segment const& col : grid.cols) {
      tensor_index g{};
      g[0] = r.rank == 2 ? row.begin : col.begin;
      g[1] = col.begin;
      block out;
      out.partial = l.is_partial();
      // Holders grouped by their coordinates off the partial axes: each
      // group holds the addends of one copy.
      std::map<std::size_t, std::vector<std::size_t>> copies;
      for (std::size_t rank = 0; rank < mesh.size(); ++rank) {
        mesh_coordinates const c = coordinates_of(mesh, rank);
        bool holds = true;
        for (std::size_t d = 0; d < r.rank; ++d)
          holds = holds && holds_index(b.dims[d], locate(mesh, b.dims[d], r.global[d], g[d]), c);
        if (holds) copies[group_index(mesh, b.partial_axes, rank)].push_back(rank);
      }
      for (auto& [key, ranks] : copies) {
        if (out.partial) {
          out.copies.push_back(ranks);
        } else {
          for (std::size_t rank : ranks) out.copies.push_back({rank});
        }
      }
      grid.blocks.push_back(std::move(out));
    }
  return grid;
}

std::string coordinates_text(mesh_shape const& mesh, std::size_t rank) {
  mesh_coordinates const c = coordinates_of(mesh, rank);
  std::string out;
  for (std::size_t a = 0; a < mesh.ndim; ++a)
    out += (a == 0 ? "" : ",") + std::string(mesh[a].name.view()) + "=" + std::to_string(c[a]);
  return out;
}

}  // namespace plan_tool
