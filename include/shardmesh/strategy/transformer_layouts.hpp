#pragma once
// The layouts of tensor-parallel (and data-parallel) transformer layers on
// a mesh with a "tp" axis and optionally a "dp" axis, as in Megatron-LM:
// activations [batch, sequence, hidden] sharded on the batch by dp and,
// with sequence parallelism, on the sequence by tp; weights sharded by tp on
// features (column-parallel), on inputs (row-parallel), on heads, or on the
// vocabulary. Every collective of the layers follows from these layouts.
// With a "cp" axis (context parallelism) every activation keeps its
// sequence split on cp, in the balanced order (algebra/sequence_chunks.hpp),
// through the whole model: only attention needs the whole sequence, and it
// passes key/value blocks round the ring or moves to the heads
// (ops/context_attention.hpp); sequence parallelism then splits each cp
// rank's tokens on tp as well. With an "ep" axis (experts split on it,
// nn/mixture_of_experts.hpp) the batch is split on ep too, inside dp: the
// expert ranks are data-parallel ranks for every other layer.

#include "shardmesh/algebra/layout.hpp"
#include "shardmesh/algebra/mesh_shape.hpp"

namespace shardmesh::parallel {

struct transformer_layouts {
  layout activation;  // [b, t, c] between blocks
  layout whole_rows;  // [b, t, c] with the sequence whole (on cp alone): a column-parallel layer's input
  layout features;    // [b, t, f] sharded on features (tp): a column-parallel output, logits on the vocabulary
  layout heads;       // [b, t, h, d] sharded on heads (tp)
  layout scores;      // [b, h, t, s] attention scores, sharded on heads (tp)
  layout column;      // [c, f] weight: R,S(tp)
  layout row;         // [f, c] weight: S(tp),R
  layout heads_in;    // [c, h, d] weight: R,S(tp),R
  layout heads_out;   // [h, d, c] weight: S(tp),R,R
  layout vocabulary;  // [v, c] token table: S(tp),R
  layout matrix;      // [t, c] position table, [c, e] router: R,R
  layout experts;     // [e, c, f] and [e, f, c] experts' weights: S(ep),R,R
  layout vector;      // [c] layer-norm gain and bias: R
  layout ids;         // [b, t] token ids

  transformer_layouts(mesh_shape const& mesh, bool sequence_parallel) {
    bool const dp = mesh.find("dp") != npos;
    bool const cp = mesh.find("cp") != npos;
    bool const ep = mesh.find("ep") != npos;
    dim_placement const batch = dp && ep ? shard("dp", "ep") : dp ? shard("dp") : ep ? shard("ep") : replicated;
    dim_placement const tp = shard("tp");
    dim_placement const R = replicated;
    dim_placement const sequence = cp ? shard("cp") : R;
    activation = {batch, sequence_parallel ? (cp ? shard("cp", "tp") : tp) : sequence, R};
    whole_rows = {batch, sequence, R};
    features = {batch, sequence, tp};
    heads = {batch, sequence, tp, R};
    scores = {batch, tp, R, R};
    column = {R, tp};
    row = {tp, R};
    heads_in = {R, tp, R};
    heads_out = {tp, R, R};
    vocabulary = {tp, R};
    matrix = {R, R};
    experts = {ep ? shard("ep") : R, R, R};
    vector = layout{R};
    ids = {batch, sequence};
  }
};

}  // namespace shardmesh::parallel
