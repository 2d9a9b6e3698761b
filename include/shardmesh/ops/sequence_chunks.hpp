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

#include <cstddef>
#include <string_view>
#include <vector>

namespace shardmesh::ops {

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

}  // namespace shardmesh::ops
