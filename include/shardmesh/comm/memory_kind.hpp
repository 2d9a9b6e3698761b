#pragma once
// Where a buffer lives, as the choice of a product's backend and of MPI's
// path to the buffer see it (ops/product_path.hpp, staging.hpp):
// host memory, a CUDA or HIP device's, or another device's (SYCL, OpenMP
// target). memory_kind_of (staging.hpp) names it for a Kokkos space.
//
// Pure; no Kokkos or MPI.

namespace shardmesh {

enum class memory_kind { host, cuda, hip, other_device };

}  // namespace shardmesh
