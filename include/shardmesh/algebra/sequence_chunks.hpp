#pragma once
// Where the tokens of a sequence split over a context-parallel axis of cp
// ranks sit. A dtensor's sequence index is the storage order; the position
// (what a causal mask and a position embedding read) follows from the order
// the tokens were split in:
//
//   contiguous  rank r holds positions [r T/cp, (r+1) T/cp): the last rank's
//               queries see every key, the first rank's only its own, so
//               causal attention's work grows with r;
//   balanced    the sequence is cut into 2 cp chunks and rank r holds chunks
//               r and 2cp-1-r, one early and one late: every rank does the
//               same causal work (the load balance of ring attention and
//               Megatron-Core's context parallelism). A model stores its
//               tokens so (storage index s holds the token at ring_position(s)).
//
// A chunk is a run of storage indices whose positions are consecutive.

#include "shardmesh/algebra/shard_geometry.hpp"

#include <cstddef>
#include <string_view>
#include <vector>

namespace shardmesh {

enum class sequence_order { contiguous, balanced };

// How attention reads a sequence split over ranks (ops/context_attention.hpp):
// key/value blocks passed round a ring, or an all-to-all to the heads and back.
enum class context_form { ring, all_to_all };

[[nodiscard]] constexpr std::string_view to_string(context_form f) {
  return f == context_form::ring ? "ring" : "all-to-all";
}

[[nodiscard]] constexpr std::string_view to_string(sequence_order o) {
  return o == sequence_order::contiguous ? "contiguous" : "balanced";
}

// How many pieces of equal length the order cuts a sequence into.
[[nodiscard]] constexpr std::size_t sequence_pieces(std::size_t cp, sequence_order o) {
  return o == sequence_order::contiguous ? cp : 2 * cp;
}

struct sequence_chunk {
  std::size_t begin = 0;     // the first storage index, in the tensor the chunk is read from
  std::size_t position = 0;  // the position of that token
  std::size_t size = 0;
  constexpr bool operator==(sequence_chunk const&) const = default;
};

// The chunks rank r of cp holds of a sequence of `length` tokens (which
// sequence_pieces(cp, o) divides), its storage indices counted from its
// own first token.
[[nodiscard]] constexpr std::vector<sequence_chunk> rank_chunks(std::size_t length, std::size_t cp, std::size_t r,
                                                                sequence_order o) {
  std::size_t const piece = length / sequence_pieces(cp, o);
  if (o == sequence_order::contiguous) return {{0, r * piece, piece}};
  return {{0, r * piece, piece}, {piece, (2 * cp - 1 - r) * piece, piece}};
}

// The chunks of the whole sequence in storage order (every rank's, one after the other).
[[nodiscard]] constexpr std::vector<sequence_chunk> sequence_chunks(std::size_t length, std::size_t cp,
                                                                    sequence_order o) {
  std::vector<sequence_chunk> all;
  for (std::size_t r = 0; r < cp; ++r)
    for (sequence_chunk c : rank_chunks(length, cp, r, o)) {
      c.begin += r * (length / cp);
      all.push_back(c);
    }
  return all;
}

// The position of the token at storage index s.
[[nodiscard]] constexpr std::size_t ring_position(std::size_t s, std::size_t length, std::size_t cp, sequence_order o) {
  for (sequence_chunk const& c : sequence_chunks(length, cp, o))
    if (s >= c.begin && s < c.begin + c.size) return c.position + (s - c.begin);
  return s;
}

// Whether a query chunk sees any key of a key chunk (causal: a key at or before the query).
[[nodiscard]] constexpr bool sees_any(sequence_chunk const& queries, sequence_chunk const& keys, bool causal) {
  return queries.size != 0 && keys.size != 0 && (!causal || keys.position <= queries.position + queries.size - 1);
}

// The all-to-all form's layout of queries, keys and values [B, T, H, D]:
// l with the sequence whole and the heads split on `axis` too (after the
// axes that split them already).
[[nodiscard]] constexpr bound_layout heads_split_on(bound_layout l, std::size_t axis) {
  l.dims[1] = bound_dim{};
  l.dims[2].axes[l.dims[2].count++] = static_cast<unsigned char>(axis);
  return l;
}

// What the ring form exchanges per rank: `exchanges` point-to-point calls,
// each sending and receiving one key/value block (keys and values, or their
// gradients), `bytes` sent in all.
struct ring_exchanges {
  std::size_t exchanges = 0, bytes = 0;
};
struct ring_traffic {
  ring_exchanges forward, backward;
};

// block_elements: the elements of one rank's keys (B T/cp Hk D, on its shard).
[[nodiscard]] constexpr ring_traffic ring_attention_traffic(std::size_t cp, std::size_t block_elements,
                                                            std::size_t element_bytes, std::size_t accumulation_bytes) {
  if (cp < 2) return {};
  std::size_t const block = 2 * block_elements;  // keys and values
  return {{cp - 1, (cp - 1) * block * element_bytes},
          {2 * cp - 1, (cp - 1) * block * element_bytes + cp * block * accumulation_bytes}};
}

}  // namespace shardmesh
