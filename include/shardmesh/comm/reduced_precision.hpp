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
// the counters record 4 bytes per element for these reductions. A caller
// that trades that for half the bytes asks for sixteen_bit_sum::per_message
// (gradients reduced in bf16, say): MPI then sums the 16-bit buffers with
// an operation that adds each pair in float and rounds the sum, so a sum
// over n ranks rounds up to n - 1 times, in an order MPI chooses.

#include "shardmesh/algebra/validation.hpp"
#include "shardmesh/comm/mpi_types.hpp"
#include "shardmesh/comm/request.hpp"
#include "shardmesh/comm/staging.hpp"
#include "shardmesh/detail/float16.hpp"
#include "shardmesh/errors.hpp"

#include <mpi.h>
#include <Kokkos_Core.hpp>

#include <stdexcept>
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

// How a reduction of 16-bit floats sums (see above): widened to float and
// rounded once, or in 16 bits, each message's sums rounded.
enum class sixteen_bit_sum { widened, per_message };

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

// inout[i] = in[i] + inout[i], the pair added in float and rounded to T:
// MPI's user-defined sum of 16-bit floats (an MPI_User_function).
template <class T>
void rounded_sum(void* in, void* inout, int* length, MPI_Datatype*) {
  auto const* a = static_cast<T const*>(in);
  auto* b = static_cast<T*>(inout);
  for (int i = 0; i < *length; ++i) b[i] = static_cast<T>(static_cast<float>(a[i]) + static_cast<float>(b[i]));
}

// The MPI operation of rounded_sum<T>, made on first use (after MPI_Init) and kept.
template <class T>
MPI_Op rounded_sum_op() {
  static MPI_Op const op = [] {
    MPI_Op made = MPI_OP_NULL;
    MPI_Op_create(&rounded_sum<T>, 1, &made);
    return made;
  }();
  return op;
}

// The MPI operation for a per-message reduction `op` of 16-bit floats: only sums round.
template <class T>
MPI_Op per_message_op(reduce_op op) {
  if (op != reduce_op::sum)
    throw invalid_option_error(std::string("shardmesh: a reduction of 16-bit floats per message sums; ") +
                               std::string(to_string(op)) + " runs widened");
  return rounded_sum_op<T>();
}

// The datatype and operation MPI reduces T with by `op`: its own, or for
// 16-bit floats summed per message, their bits and rounded_sum.
template <class T>
std::pair<MPI_Datatype, MPI_Op> reduction_of(reduce_op op, sixteen_bit_sum how) {
  if constexpr (float16_element<T>) {
    if (how != sixteen_bit_sum::per_message)
      throw std::logic_error("shardmesh: widened 16-bit reductions reduce their float copies");
    return {mpi_type<T>(), per_message_op<T>(op)};
  } else {
    return {mpi_reduction_type<T>(), mpi_op(op)};
  }
}

}  // namespace detail

}  // namespace shardmesh
