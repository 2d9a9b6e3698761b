#pragma once
// The gradient of a vocabulary-parallel token table, onehot^T dX
// ("btv,btc->vc"), planned like any product: gather dX, or reduce the
// table's gradient, whichever moves less (plan_product). The one-hot ids
// are never built: the embedding's kernels look rows up and scatter-add
// them; what is planned is where the ids, dX and the gradient live. The
// embedding layer (nn/embedding.hpp) runs this plan and the decoder's
// description (models/decoder_description.hpp) prices it. Pure.

#include "shardmesh/algebra/contraction.hpp"
#include "shardmesh/algebra/layout.hpp"
#include "shardmesh/algebra/propagation.hpp"
#include "shardmesh/algebra/shard_geometry.hpp"

#include <array>
#include <cstddef>

namespace shardmesh::parallel {

inline constexpr contraction table_gradient_product = parse_contraction("btv,btc->vc");

// The one-hot [b, t, v] of ids in layout `ids` [b, t], the vocabulary placed as `vocabulary`.
[[nodiscard]] constexpr bound_layout one_hot_layout(bound_layout const& ids, bound_dim const& vocabulary = {}) {
  bound_layout l = ids;
  l.rank = 3;
  l.dims[2] = vocabulary;
  return l;
}

// The product's layouts for ids in layout `ids`, dX in `dx` and the gradient wanted in `want`; one_hot:
// [b, t, v] extents, dx_extents: [b, t, c].
[[nodiscard]] constexpr op_layouts plan_table_gradient(mesh_shape const& mesh, bound_layout const& ids,
                                                       bound_layout const& dx,
                                                       std::array<std::size_t, 3> const& one_hot,
                                                       std::array<std::size_t, 3> const& dx_extents,
                                                       bound_layout const& want) {
  return plan_product(mesh, table_gradient_product, one_hot_layout(ids), dx, one_hot, dx_extents, &want);
}

// Where the plan wants the ids [b, t]: the one-hot's placement of them.
[[nodiscard]] constexpr bound_layout table_gradient_ids(op_layouts const& plan) {
  bound_layout rows = plan.a;
  rows.rank = 2;
  rows.partial_axes = {};
  return rows;
}

}  // namespace shardmesh::parallel
