#pragma once
// The memory a layer's saved state holds, named by its Views' data
// pointers: what a trainer keeps between a forward and its backward is
// counted as activations by the mesh's result pool (result_pool.hpp,
// classify). A tensor shared by several layers (one input to three
// projections) is one pointer, listed as often as it is saved.

#include "shardmesh/algebra/layout.hpp"
#include "shardmesh/nn/detail/experts_saved.hpp"
#include "shardmesh/ops/context_attention.hpp"
#include "shardmesh/ops/cross_entropy.hpp"
#include "shardmesh/ops/layer_norm.hpp"
#include "shardmesh/tensor/dtensor.hpp"

#include <Kokkos_Core.hpp>

#include <cstddef>
#include <optional>
#include <type_traits>
#include <vector>

namespace shardmesh::parallel::detail {

template <class View>
  requires Kokkos::is_view_v<View>
void add_saved_data(std::vector<void const*>& out, View const& v) {
  if (v.data() != nullptr) out.push_back(v.data());
}

template <class T, std::size_t Rank, class MemorySpace>
void add_saved_data(std::vector<void const*>& out, dynamic_dtensor<T, Rank, MemorySpace> const& x) {
  add_saved_data(out, x.local());
}

inline void add_saved_data(std::vector<void const*>&, bound_layout const&) {}  // no memory
inline void add_saved_data(std::vector<void const*>&, double) {}               // no memory

template <class T, std::size_t Rank, class MemorySpace>
void add_saved_data(std::vector<void const*>& out, ops::layer_norm_saved<T, Rank, MemorySpace> const& s) {
  add_saved_data(out, s.x);
  add_saved_data(out, s.mean);
  add_saved_data(out, s.rstd);
}

template <class T, std::size_t Rank, class MemorySpace>
void add_saved_data(std::vector<void const*>& out, ops::cross_entropy_result<T, Rank, MemorySpace> const& s) {
  add_saved_data(out, s.logits);
  add_saved_data(out, s.max);
  add_saved_data(out, s.sum_exp);
  add_saved_data(out, s.targets);
}

template <class T, class MemorySpace>
void add_saved_data(std::vector<void const*>& out, ops::context_attention_state<T, MemorySpace> const& s) {
  add_saved_data(out, s.q);
  add_saved_data(out, s.k);
  add_saved_data(out, s.v);
  add_saved_data(out, s.out);
  add_saved_data(out, s.lse);
}

template <class T, class MemorySpace>
void add_saved_data(std::vector<void const*>& out, experts_saved<T, MemorySpace> const& s) {
  add_saved_data(out, s.x);
  add_saved_data(out, s.gates);
  add_saved_data(out, s.rows_in);
  add_saved_data(out, s.hidden);
  add_saved_data(out, s.slots);
}

template <class X>
void add_saved_data(std::vector<void const*>& out, std::optional<X> const& x) {
  if (x) add_saved_data(out, *x);
}

}  // namespace shardmesh::parallel::detail
