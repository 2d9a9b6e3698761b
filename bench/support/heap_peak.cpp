// malloc and its relatives counted (heap_peak.hpp): each forwards to glibc's
// own allocator (its __libc_ entry points) and adds or removes the block's
// usable size. glibc's internal calls go through these too.
#include "heap_peak.hpp"

#include <malloc.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>

extern "C" {
void* __libc_malloc(std::size_t);
void* __libc_calloc(std::size_t, std::size_t);
void* __libc_realloc(void*, std::size_t);
void* __libc_memalign(std::size_t, std::size_t);
void __libc_free(void*);
}

namespace {

std::atomic<std::int64_t> live{0};
std::atomic<std::int64_t> highest{0};

void* counted(void* p) {
  if (p == nullptr) return p;
  std::int64_t const now = live.fetch_add(static_cast<std::int64_t>(malloc_usable_size(p))) +
                           static_cast<std::int64_t>(malloc_usable_size(p));
  std::int64_t seen = highest.load(std::memory_order_relaxed);
  while (now > seen && !highest.compare_exchange_weak(seen, now, std::memory_order_relaxed)) {
  }
  return p;
}

void uncounted(void* p) {
  if (p != nullptr) live.fetch_sub(static_cast<std::int64_t>(malloc_usable_size(p)));
}

}  // namespace

namespace shardmesh::bench::heap {

std::int64_t in_use() { return live.load(); }
std::int64_t peak() { return highest.load(); }
void reset_peak() { highest.store(live.load()); }

}  // namespace shardmesh::bench::heap

extern "C" {

void* malloc(std::size_t n) noexcept { return counted(__libc_malloc(n)); }
void* calloc(std::size_t count, std::size_t n) noexcept { return counted(__libc_calloc(count, n)); }
void free(void* p) noexcept {
  uncounted(p);
  __libc_free(p);
}
void* realloc(void* p, std::size_t n) noexcept {
  std::int64_t const before = p != nullptr ? static_cast<std::int64_t>(malloc_usable_size(p)) : 0;
  void* const q = __libc_realloc(p, n);
  if (q == nullptr && n != 0) return q;  // p is untouched
  live.fetch_sub(before);                // p moved, or realloc(p, 0) freed it
  return counted(q);
}
void* memalign(std::size_t alignment, std::size_t n) noexcept { return counted(__libc_memalign(alignment, n)); }
void* aligned_alloc(std::size_t alignment, std::size_t n) noexcept { return memalign(alignment, n); }
int posix_memalign(void** out, std::size_t alignment, std::size_t n) noexcept {
  if (alignment % sizeof(void*) != 0 || (alignment & (alignment - 1)) != 0) return EINVAL;
  void* const p = memalign(alignment, n);
  if (p == nullptr && n != 0) return ENOMEM;
  *out = p;
  return 0;
}
void* valloc(std::size_t n) noexcept { return memalign(static_cast<std::size_t>(sysconf(_SC_PAGESIZE)), n); }
void* pvalloc(std::size_t n) noexcept {
  auto const page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  return memalign(page, (n + page - 1) / page * page);
}

}  // extern "C"
