#pragma once
// Checksums of the boxes a checkpoint was written in, checkable under any
// other layout.
//
// A dataset is written in boxes: the shards of its layout when saved, one
// writer per replica group. A box's checksum is two sums over its 32-bit
// words, modulo 2^64 (Fletcher's two sums, with global positions):
//
//   words    = sum of w          weighted = sum of q * w
//
// where an element at row-major position p of the global array has words
// at positions q = p * W + j (W = sizeof(T) / 4 words, little-endian,
// j = 0 .. W-1; elements of 1 or 2 bytes are one word, zero-extended).
// Both sums split over any partition of the box, so readers under another
// layout (other mesh, other rank count) each add up the elements they read
// into the box that held them when saved, and one all-reduce gives every
// box's sums back. Changing one word changes `words` (by less than 2^32);
// swapping two different words changes `weighted` by (q - r) * (w_r - w_q),
// nonzero modulo 2^64 whenever |q - r| < 2^32 (datasets under 16 GiB). Two
// additions per word, in independent lanes that vector units run side by
// side, as wide as the processor has (detail::word_sums). Host memory, no
// communication.

#include "shardmesh/algebra/mesh_shape.hpp"
#include "shardmesh/algebra/shard_geometry.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <type_traits>
#include <vector>

// The wide kernels are host code: a CUDA or HIP device pass also defines
// __x86_64__ (the host's), but has neither the intrinsics nor the CPU checks.
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(__CUDA_ARCH__) && \
    !defined(__HIP_DEVICE_COMPILE__)
#define SHARDMESH_WIDE_WORD_SUMS 1
#include <immintrin.h>
#endif

namespace shardmesh::io {

// The 32-bit words of an element type.
template <class T>
inline constexpr std::size_t words_per_element = sizeof(T) >= 4 ? sizeof(T) / 4 : 1;

// A box's two sums.
struct box_sum {
  std::uint64_t words = 0, weighted = 0;
  constexpr bool operator==(box_sum const&) const = default;
  constexpr box_sum& operator+=(box_sum const& o) {
    words += o.words;
    weighted += o.weighted;
    return *this;
  }
};

// Any element type's bytes read as 32-bit words (GCC and Clang, and the
// host compilers nvcc uses, know this attribute).
using aliasing_word = std::uint32_t __attribute__((__may_alias__));

namespace detail {

// The sums of `count` consecutive words, their positions counted from the
// first. Lane j of 16 adds words j, j + 16, j + 32, ...: s1 their sum, s2
// the sum of the running s1, so that the sum of m * w over a lane's M words
// is M s1 - s2. Within blocks of 256 steps the lanes add each word's two
// 16-bit halves in 32-bit sums (after 256 steps a half's sum of running
// sums is at most 256 * 257 / 2 * (2^16 - 1) < 2^32), which vector units add
// 4, 8 or 16 at a time without widening; each block then joins the 64-bit
// sums s1 and s2. A Store other than no_store also stores each step's 16
// words to `copy_to`: a copy and its checksum in one pass over memory.
struct no_store {};
struct plain_store {
  [[gnu::always_inline]] void operator()(aliasing_word* to, std::uint32_t const* step) const {
    for (std::size_t j = 0; j < 16; ++j) to[j] = step[j];
  }
};
template <class Store>
[[gnu::always_inline]] inline box_sum word_sums_body(void const* data, void* copy_to, std::size_t count, Store store) {
  constexpr bool copies = !std::is_same_v<Store, no_store>;
  auto const* words = static_cast<aliasing_word const*>(data);
  [[maybe_unused]] auto* out = static_cast<aliasing_word*>(copy_to);
  constexpr std::size_t lanes = 16, block = 256;
  std::size_t const steps = count / lanes;
  std::uint64_t s1[lanes] = {}, s2[lanes] = {};
  for (std::size_t first = 0; first < steps; first += block) {
    std::size_t const k = std::min(block, steps - first);
    std::uint32_t low1[lanes] = {}, low2[lanes] = {}, high1[lanes] = {}, high2[lanes] = {};
    for (std::size_t m = first; m < first + k; ++m) {
      // A step's words loaded before they are stored: the stores cannot
      // change them, so the step stays one vector load and one store.
      std::uint32_t step[lanes];
      for (std::size_t j = 0; j < lanes; ++j) step[j] = words[lanes * m + j];
      if constexpr (copies) store(out + lanes * m, step);
      for (std::size_t j = 0; j < lanes; ++j) {
        std::uint32_t const w = step[j];
        low1[j] += w & 0xFFFFU;
        low2[j] += low1[j];
        high1[j] += w >> 16;
        high2[j] += high1[j];
      }
    }
    for (std::size_t j = 0; j < lanes; ++j) {
      s2[j] += k * s1[j] + low2[j] + (std::uint64_t{high2[j]} << 16);
      s1[j] += low1[j] + (std::uint64_t{high1[j]} << 16);
    }
  }
  box_sum r;
  for (std::size_t j = 0; j < lanes; ++j) {
    r.words += s1[j];
    r.weighted += lanes * (steps * s1[j] - s2[j]) + j * s1[j];
  }
  for (std::size_t i = steps * lanes; i < count; ++i) {
    if constexpr (copies) out[i] = words[i];
    r.words += words[i];
    r.weighted += i * std::uint64_t{words[i]};
  }
  return r;
}

// Sums whose positions were counted from 0, counted from q instead.
[[nodiscard]] constexpr box_sum at_position(box_sum r, std::uint64_t q) {
  r.weighted += q * r.words;
  return r;
}

// The sums of `count` words at `words`, copied to `copy_to` unless it is null.
using word_sums_kernel = box_sum (*)(void const* words, void* copy_to, std::size_t count);

// The same code for the instructions every x86-64 (or other) processor
// has, and on x86-64 for wider vectors, chosen by the processor at run
// time: a library of headers cannot count on the user's -march.
inline box_sum word_sums_portable(void const* words, void* copy_to, std::size_t count) {
  return copy_to != nullptr ? word_sums_body(words, copy_to, count, plain_store{})
                            : word_sums_body(words, nullptr, count, no_store{});
}

// A wide kernel's copy of at least this many words streams its stores past
// the cache: a plain store first reads the line it overwrites (half again
// the memory traffic), and a copy this long (a checkpoint's shard, say)
// would push out of the cache most of what it leaves there before anything
// reads it. The AVX-512 kernel copying 512 MiB in 1 MiB runs, out of cache:
// 79 ms streamed, 103 ms stored plainly; memcpy alone, 93 ms.
inline constexpr std::size_t stream_words = std::size_t{1} << 16;  // 256 KiB

#ifdef SHARDMESH_WIDE_WORD_SUMS

// A wide kernel: Stream stores a step's 16 words to an address aligned to
// Align bytes. The words up to the first such address are stored plainly.
template <std::size_t Align, class Stream>
[[gnu::always_inline]] inline box_sum word_sums_wide(void const* words, void* copy_to, std::size_t count,
                                                     Stream stream) {
  auto const address = reinterpret_cast<std::uintptr_t>(copy_to);
  if (copy_to == nullptr) return word_sums_body(words, nullptr, count, no_store{});
  if (count < stream_words || address % sizeof(std::uint32_t) != 0)
    return word_sums_body(words, copy_to, count, plain_store{});
  std::size_t const head = (Align - address % Align) % Align / sizeof(std::uint32_t);
  auto const* from = static_cast<aliasing_word const*>(words);
  auto* to = static_cast<aliasing_word*>(copy_to);
  box_sum r = word_sums_body(from, to, head, plain_store{});
  r += at_position(word_sums_body(from + head, to + head, count - head, stream), head);
  _mm_sfence();  // streamed stores are ordered by nothing else
  return r;
}

struct stream_avx2 {
  [[gnu::target("avx2")]] void operator()(aliasing_word* to, std::uint32_t const* step) const {
    auto* out = reinterpret_cast<__m256i*>(to);
    auto const* in = reinterpret_cast<__m256i const*>(step);
    _mm256_stream_si256(out, _mm256_loadu_si256(in));
    _mm256_stream_si256(out + 1, _mm256_loadu_si256(in + 1));
  }
};
struct stream_avx512 {
  [[gnu::target("avx512f")]] void operator()(aliasing_word* to, std::uint32_t const* step) const {
    _mm512_stream_si512(reinterpret_cast<__m512i*>(to), _mm512_loadu_si512(step));
  }
};
// Flattened: the stores, made for these instructions, inline into a step.
[[gnu::target("avx2"), gnu::flatten]] inline box_sum word_sums_avx2(void const* words, void* copy_to,
                                                                    std::size_t count) {
  return word_sums_wide<32>(words, copy_to, count, stream_avx2{});
}
[[gnu::target("avx512f,avx512bw"), gnu::flatten]] inline box_sum word_sums_avx512(void const* words, void* copy_to,
                                                                                  std::size_t count) {
  return word_sums_wide<64>(words, copy_to, count, stream_avx512{});
}
#endif

// The kernels this processor runs, widest first.
[[nodiscard]] inline std::vector<word_sums_kernel> word_sums_kernels() {
  std::vector<word_sums_kernel> out;
#ifdef SHARDMESH_WIDE_WORD_SUMS
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512bw")) out.push_back(word_sums_avx512);
  if (__builtin_cpu_supports("avx2")) out.push_back(word_sums_avx2);
#endif
  out.push_back(word_sums_portable);
  return out;
}

[[nodiscard]] inline box_sum word_sums(void const* words, std::size_t count, void* copy_to = nullptr) {
  static word_sums_kernel const widest = word_sums_kernels().front();
  return widest(words, copy_to, count);
}

}  // namespace detail

// The sums of n consecutive elements whose first word is at position q,
// copied to `copy_to` unless it is null.
template <class T>
[[nodiscard]] box_sum run_checksum(T const* elements, std::size_t n, std::uint64_t q, T* copy_to = nullptr) {
  static_assert(sizeof(T) == 1 || sizeof(T) == 2 || sizeof(T) == 4 || sizeof(T) == 8,
                "checkpoint: elements of 1, 2, 4 or 8 bytes");
  box_sum r;
  if constexpr (sizeof(T) < 4) {
    if (copy_to != nullptr) std::memcpy(copy_to, elements, n * sizeof(T));
    for (std::size_t i = 0; i < n; ++i) {
      std::uint32_t word = 0;
      std::memcpy(&word, elements + i, sizeof(T));
      r.words += word;
      r.weighted += (q + i) * word;
    }
    return r;
  } else {
    return detail::at_position(detail::word_sums(elements, n * words_per_element<T>, copy_to), q);
  }
}

// Where the boxes were: the layout and mesh a dataset was saved under.
struct box_grid {
  mesh_shape mesh;
  bound_layout layout;
};

namespace detail {

// The row-major rank stride of each mesh axis.
[[nodiscard]] constexpr mesh_coordinates rank_strides(mesh_shape const& mesh) {
  mesh_coordinates stride{};
  std::size_t s = 1;
  for (std::size_t a = mesh.ndim; a-- > 0;) {
    stride[a] = s;
    s *= mesh.extent(a);
  }
  return stride;
}

// A stretch of one dimension's local indices whose global indices are
// consecutive and held by one box: where it starts locally and globally,
// its length, and its share of that box's rank.
struct stretch {
  std::size_t local = 0, global = 0, length = 0, box = 0;
};

// The stretches of the local indices `part` of one dimension, in local
// order, their local starts counted from part.begin: one step each (not one
// per index), as far as both the shard and the saved box run on.
inline std::vector<stretch> stretches_of(std::size_t d, mesh_shape const& mesh, bound_layout const& l,
                                         tensor_index const& global, mesh_coordinates const& at, box_grid const& boxes,
                                         interval part) {
  mesh_coordinates const stride = rank_strides(boxes.mesh);
  bound_dim const& saved = boxes.layout.dims[d];
  std::vector<stretch> out;
  for (std::size_t i = part.begin; i < part.end;) {
    std::size_t const g = to_global(mesh, l.dims[d], global[d], at, i);
    dim_location const where = locate(boxes.mesh, saved, global[d], g);
    std::size_t box = 0;
    for (std::size_t k = 0; k < saved.count; ++k) box += where.coordinates[saved.axes[k]] * stride[saved.axes[k]];
    std::size_t const length = std::min({part.end - i, consecutive_from(mesh, l.dims[d], global[d], at, i),
                                         held_from(boxes.mesh, saved, global[d], g)});
    if (!out.empty() && out.back().box == box && out.back().global + out.back().length == g)
      out.back().length += length;
    else
      out.push_back({i - part.begin, g, length, box});
    i += length;
  }
  return out;
}

// Calls f(box, element, position, n) for each run of n elements of the
// local rows `rows` (of dimension 0, every index of the others) of one
// rank's shard under layout l on mesh that are consecutive in the global
// array and in one box of `boxes`: `element` is the run's first element in
// those rows (row-major), `position` its row-major index in the global array.
template <class F>
void for_each_box_run(mesh_shape const& mesh, bound_layout const& l, tensor_index const& global, std::size_t rank,
                      interval rows, box_grid const& boxes, F&& f) {
  std::size_t const r = l.rank;
  mesh_coordinates const at = coordinates_of(mesh, rank);
  std::vector<std::vector<stretch>> dims;
  std::vector<std::uint64_t> strides(r);  // of global positions
  std::vector<std::size_t> local_strides(r);
  for (std::size_t d = r, s = 1, ls = 1; d-- > 0;) {
    strides[d] = s;
    local_strides[d] = ls;
    s *= global[d];
    ls *= local_extent(mesh, l.dims[d], global[d], at);
  }
  for (std::size_t d = 0; d < r; ++d)
    dims.push_back(stretches_of(d, mesh, l, global, at, boxes,
                                d == 0 ? rows : interval{0, local_extent(mesh, l.dims[d], global[d], at)}));
  // Trailing dimensions held whole (one stretch over all their indices)
  // join the runs of the dimension before them: a shard of whole rows is
  // one run per stretch of rows.
  std::size_t last = r - 1, whole_box = 0;
  while (last > 0 && dims[last].size() == 1 && dims[last][0].global == 0 && dims[last][0].length == global[last])
    whole_box += dims[last--][0].box;
  // Odometer over every index of the dimensions before `last` (whose
  // stretches run inside); the index within a stretch is counted apart.
  std::vector<std::size_t> piece_index(r, 0), offset(r, 0);
  while (true) {
    std::uint64_t position = 0;
    std::size_t box = whole_box, element = 0;
    for (std::size_t d = 0; d < last; ++d) {
      stretch const& s = dims[d][piece_index[d]];
      position += (s.global + offset[d]) * strides[d];
      box += s.box;
      element += (s.local + offset[d]) * local_strides[d];
    }
    for (stretch const& s : dims[last])
      f(box + s.box, element + s.local * local_strides[last], position + s.global * strides[last],
        s.length * strides[last]);
    std::size_t d = last;
    while (d-- > 0) {
      if (++offset[d] < dims[d][piece_index[d]].length) break;
      offset[d] = 0;
      if (++piece_index[d] < dims[d].size()) break;
      piece_index[d] = 0;
    }
    if (d == static_cast<std::size_t>(-1)) return;
  }
}

}  // namespace detail

// Adds the elements at local rows `rows` (of dimension 0, every index of
// the others) of one rank's shard under layout l on mesh, row-major in
// `piece`, into the sums of the boxes of `boxes` that hold them.
// Precondition: sums has boxes.mesh.size() entries; piece holds those rows.
template <class T>
void add_to_box_checksums(std::span<T const> piece, mesh_shape const& mesh, bound_layout const& l,
                          tensor_index const& global, std::size_t rank, interval rows, box_grid const& boxes,
                          std::vector<box_sum>& sums) {
  if (piece.empty()) return;
  detail::for_each_box_run(mesh, l, global, rank, rows, boxes,
                           [&](std::size_t box, std::size_t element, std::uint64_t position, std::size_t n) {
                             sums[box] += run_checksum(piece.data() + element, n, position * words_per_element<T>);
                           });
}

// The same rows copied into `piece` from `image`, the whole global array
// row-major (a mapped dataset), their sums added as add_to_box_checksums
// adds them in the same pass; only copied when sums is null.
template <class T>
void copy_with_box_checksums(T const* image, std::span<T> piece, mesh_shape const& mesh, bound_layout const& l,
                             tensor_index const& global, std::size_t rank, interval rows, box_grid const& boxes,
                             std::vector<box_sum>* sums) {
  if (piece.empty()) return;
  detail::for_each_box_run(mesh, l, global, rank, rows, boxes,
                           [&](std::size_t box, std::size_t element, std::uint64_t position, std::size_t n) {
                             if (sums != nullptr)
                               (*sums)[box] += run_checksum(image + position, n, position * words_per_element<T>,
                                                            piece.data() + element);
                             else
                               std::memcpy(piece.data() + element, image + position, n * sizeof(T));
                           });
}

}  // namespace shardmesh::io
