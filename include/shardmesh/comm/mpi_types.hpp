#pragma once
// MPI datatypes of element types and MPI ops of reductions.

#include "shardmesh/algebra/layout.hpp"
#include "shardmesh/algebra/validation.hpp"

#include <mpi.h>

#include <complex>
#include <cstdint>
#include <type_traits>

namespace shardmesh {

// Element types shardmesh moves: arithmetic types, 16-bit floats (bf16,
// fp16: float16_element) and complex numbers of float or double
// (std::complex, Kokkos::complex: complex_number).
template <class T>
inline constexpr bool has_mpi_type_v = std::is_arithmetic_v<T> || float16_element<T> || complex_number<T>;

// The datatype MPI moves T as. Precondition: has_mpi_type_v<T>. A 16-bit
// float moves as its bits (MPI_UINT16_T), which only moves may use:
// reductions take mpi_reduction_type.
template <class T>
MPI_Datatype mpi_type() {
  static_assert(has_mpi_type_v<T>,
                "shardmesh: no MPI datatype for this element type; supported are bool, char, the integer types, "
                "float, double, long double, bf16 and fp16, and std::complex or Kokkos::complex of float or double");
  if constexpr (float16_element<T>)
    return MPI_UINT16_T;
  else if constexpr (std::is_same_v<T, float>)
    return MPI_FLOAT;
  else if constexpr (std::is_same_v<T, double>)
    return MPI_DOUBLE;
  else if constexpr (std::is_same_v<T, long double>)
    return MPI_LONG_DOUBLE;
  else if constexpr (std::is_same_v<T, bool>)
    return MPI_CXX_BOOL;
  else if constexpr (complex_number<T>)
    return sizeof(T) == 8 ? MPI_CXX_FLOAT_COMPLEX : MPI_CXX_DOUBLE_COMPLEX;
  else if constexpr (std::is_same_v<T, char>)
    return MPI_CHAR;
  else if constexpr (std::is_signed_v<T>) {
    if constexpr (sizeof(T) == 1)
      return MPI_INT8_T;
    else if constexpr (sizeof(T) == 2)
      return MPI_INT16_T;
    else if constexpr (sizeof(T) == 4)
      return MPI_INT32_T;
    else
      return MPI_INT64_T;
  } else {
    if constexpr (sizeof(T) == 1)
      return MPI_UINT8_T;
    else if constexpr (sizeof(T) == 2)
      return MPI_UINT16_T;
    else if constexpr (sizeof(T) == 4)
      return MPI_UINT32_T;
    else
      return MPI_UINT64_T;
  }
}

// The datatype MPI reduces T as: mpi_type, except that MPI has no 16-bit
// float, and summing their bits as integers would be silently wrong.
template <class T>
MPI_Datatype mpi_reduction_type() {
  static_assert(!float16_element<T>,
                "shardmesh: MPI cannot reduce 16-bit floats; the collectives reduce them widened to float "
                "(comm/reduced_precision.hpp)");
  return mpi_type<T>();
}

inline MPI_Op mpi_op(reduce_op op) {
  switch (op) {
    case reduce_op::sum: return MPI_SUM;
    case reduce_op::max: return MPI_MAX;
    case reduce_op::min: return MPI_MIN;
    case reduce_op::prod: return MPI_PROD;
  }
  return MPI_SUM;
}

}  // namespace shardmesh
