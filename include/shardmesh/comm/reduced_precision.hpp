#pragma once
// The 16-bit floating-point element types, what they compute in, and how
// collectives reduce them.
//
// bf16 and fp16 are Kokkos's bhalf_t and half_t where the build has them
// (CUDA, HIP and SYCL builds); a host-only Kokkos aliases both to float, so
// there they are detail/float16.hpp's storage types, two bytes each,
// converted to and from float with round to nearest even. Either way,
// shardmesh computes with them in float: accumulation_t<T> is the type
// every sum over elements of T runs in.
//
// MPI has no 16-bit float. Moves (gathers, all-to-alls, sends) carry their
// bits as MPI_UINT16_T; a reduction of a 16-bit buffer widens it to float
// on the execution-space instance, reduces in float (MPI_FLOAT), and rounds
// the result back once: a sum over n ranks is the float sum rounded once,
// not n - 1 roundings to 16 bits. The widened buffers are what MPI moves, so
// the counters record 4 bytes per element for these reductions.

#include "shardmesh/algebra/validation.hpp"
#include "shardmesh/comm/request.hpp"
#include "shardmesh/comm/staging.hpp"
#include "shardmesh/detail/float16.hpp"

#include <Kokkos_Core.hpp>

#include <string>
#include <type_traits>
#include <utility>

namespace shardmesh {

#if KOKKOS_BHALF_T_IS_FLOAT
using bf16 = detail::host_bf16;
#else
using bf16 = Kokkos::Experimental::bhalf_t;
#endif
#if KOKKOS_HALF_T_IS_FLOAT
using fp16 = detail::host_fp16;
#else
using fp16 = Kokkos::Experimental::half_t;
#endif

static_assert(float16_element<bf16> && float16_element<fp16>);

// The type sums over elements of T accumulate in: float for 16-bit floats, T otherwise.
template <class T>
using accumulation_t = std::conditional_t<float16_element<T>, float, T>;

namespace detail {

// v's elements converted to U, on exec (asynchronous).
template <class U, class T, class Space>
Kokkos::View<U*, Space> converted(Kokkos::View<T*, Space> const& v, execution_space_of<Space> const& exec) {
  Kokkos::View<U*, Space> out(Kokkos::view_alloc(Kokkos::WithoutInitializing, std::string(v.label()) + " (widened)"),
                              v.extent(0));
  Kokkos::parallel_for(
      "shardmesh::convert", Kokkos::RangePolicy<execution_space_of<Space>>(exec, 0, v.extent(0)),
      KOKKOS_LAMBDA(std::size_t i) { out(i) = static_cast<U>(v(i)); });
  return out;
}

// to = from, converted, on exec (asynchronous). Precondition: equal extents.
template <class U, class T, class Space>
void convert_into(Kokkos::View<U*, Space> const& to, Kokkos::View<T*, Space> const& from,
                  execution_space_of<Space> const& exec) {
  Kokkos::parallel_for(
      "shardmesh::convert", Kokkos::RangePolicy<execution_space_of<Space>>(exec, 0, from.extent(0)),
      KOKKOS_LAMBDA(std::size_t i) { to(i) = static_cast<U>(from(i)); });
}

// A reduction of 16-bit send into recv run in float: reduce(wide_send,
// wide_recv) posts it on float copies (wide_send is empty when send is),
// and the returned request rounds the result into recv once it completes.
// With send empty the reduction is in place: recv holds the contribution.
template <class T, class Space, class Reduce>
request widened_reduction(Kokkos::View<T*, Space> send, Kokkos::View<T*, Space> recv,
                          execution_space_of<Space> const& exec, Reduce&& reduce) {
  Kokkos::View<float*, Space> wide_send;
  if (send.data() != nullptr) wide_send = converted<float>(send, exec);
  Kokkos::View<float*, Space> const wide_recv =
      send.data() != nullptr ? Kokkos::View<float*, Space>(Kokkos::view_alloc(Kokkos::WithoutInitializing,
                                                                              std::string(recv.label()) + " (widened)"),
                                                           recv.extent(0))
                             : converted<float>(recv, exec);
  exec.fence("shardmesh::widened_reduction: widen before MPI reads");
  return reduce(wide_send, wide_recv).then([recv, wide_recv, exec] {
    convert_into(recv, wide_recv, exec);
    exec.fence("shardmesh::widened_reduction: round the result");
  });
}

}  // namespace detail

}  // namespace shardmesh
