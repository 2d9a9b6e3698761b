#pragma once
// Copies whose stores bypass the cache (non-temporal stores), for
// destinations too large to stay in it. A plain copy first reads every
// destination line it overwrites (to own it in the cache), so a copy out of
// cache moves three lines per line copied; streaming stores write whole
// lines to memory without reading them: two (a strided transpose's copies
// out of cache, docs/10). Only whole-line stores gained on an AVX-512 core
// (the 16-byte stores every x86-64 has were no faster), so the lines go by
// AVX-512 or AVX, whichever the CPU has (checked once at run time); other
// CPUs and compilers copy plainly.
//
// Streaming stores are not ordered with the thread's later stores or with
// other threads: a thread calls stream_fence() after its last one, before
// anything tells another thread that the data is there.

#include <cstddef>
#include <cstdint>
#include <cstring>

// Host code: a CUDA or HIP device pass also defines __x86_64__ (the host's),
// but has neither the intrinsics nor the CPU checks. Every host pass, of
// every compiler, defines these functions alike.
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(__CUDA_ARCH__) && \
    !defined(__HIP_DEVICE_COMPILE__) && !defined(__SYCL_DEVICE_ONLY__)
#define SHARDMESH_STREAMING_STORES 1
#include <immintrin.h>
#else
#define SHARDMESH_STREAMING_STORES 0
#endif

namespace shardmesh::detail {

inline constexpr std::size_t cache_line = 64;

#if SHARDMESH_STREAMING_STORES

__attribute__((target("avx512f"))) inline void stream_lines_avx512(std::byte* to, std::byte const* from,
                                                                   std::size_t lines) {
  for (std::size_t i = 0; i < lines; ++i)
    _mm512_stream_si512(reinterpret_cast<__m512i*>(to + i * cache_line), _mm512_loadu_si512(from + i * cache_line));
}

__attribute__((target("avx"))) inline void stream_lines_avx(std::byte* to, std::byte const* from, std::size_t lines) {
  for (std::size_t i = 0; i < 2 * lines; ++i)
    _mm256_stream_si256(reinterpret_cast<__m256i*>(to + i * 32),
                        _mm256_loadu_si256(reinterpret_cast<__m256i const*>(from + i * 32)));
}

using line_copy = void (*)(std::byte*, std::byte const*, std::size_t);

// The line copy this CPU streams with, or null.
[[nodiscard]] inline line_copy streaming_lines() {
  static line_copy const chosen = __builtin_cpu_supports("avx512f") ? stream_lines_avx512
                                  : __builtin_cpu_supports("avx")   ? stream_lines_avx
                                                                    : nullptr;
  return chosen;
}

// Whether stream_copy streams on this CPU (else it copies plainly).
[[nodiscard]] inline bool streams() { return streaming_lines() != nullptr; }

// Copies `bytes` from `from` to `to` (not overlapping): the destination's
// whole lines by streaming stores, the partial lines at either end plainly.
inline void stream_copy(void* to, void const* from, std::size_t bytes) {
  auto* t = static_cast<std::byte*>(to);
  auto const* f = static_cast<std::byte const*>(from);
  std::size_t const head = (cache_line - reinterpret_cast<std::uintptr_t>(t) % cache_line) % cache_line;
  line_copy const lines = streaming_lines();
  if (lines == nullptr || bytes < head + cache_line) {
    std::memcpy(t, f, bytes);
    return;
  }
  std::memcpy(t, f, head);
  std::size_t const whole = (bytes - head) / cache_line;
  lines(t + head, f + head, whole);
  std::size_t const done = head + whole * cache_line;
  std::memcpy(t + done, f + done, bytes - done);
}

// Orders this thread's streaming stores before its later stores.
inline void stream_fence() { _mm_sfence(); }

#else

[[nodiscard]] inline bool streams() { return false; }
inline void stream_copy(void* to, void const* from, std::size_t bytes) { std::memcpy(to, from, bytes); }
inline void stream_fence() {}

#endif

}  // namespace shardmesh::detail
