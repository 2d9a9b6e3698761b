#pragma once
// The process's heap in use and its peak, for benchmarks that compare how
// much memory two libraries take for the same work. heap_peak.cpp replaces
// malloc and its relatives (as glibc allows) by wrappers that count the
// usable size of every block: every allocation is counted, ours, a peer
// library's and MPI's alike. Link it only into a benchmark that reports it.

#include <cstdint>

namespace shardmesh::bench::heap {

[[nodiscard]] std::int64_t in_use();  // bytes of live blocks
[[nodiscard]] std::int64_t peak();    // the most in use since reset_peak()
void reset_peak();                    // peak := in_use

}  // namespace shardmesh::bench::heap
