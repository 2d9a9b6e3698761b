#pragma once
// A piece where it lies in its shard, as an MPI datatype: MPI then reads
// the piece from the old shard and writes it into the new one in place,
// with no pack or unpack kernel and no buffer between (what a hand-written
// MPI_Alltoallw on subarray types does). Used for host memory where both
// sides would pack (prepared_step.hpp: packs_both_sides); device memory
// always packs with kernels.

#include "shardmesh/comm/datatype.hpp"
#include "shardmesh/comm/detail/collective_support.hpp"
#include "shardmesh/tensor/detail/pieces.hpp"

#include <mpi.h>

#include <cstddef>
#include <vector>

namespace shardmesh::detail {

// `bytes` contiguous bytes, in elements of element_bytes (MPI counts are ints).
inline MPI_Datatype contiguous_bytes(std::size_t bytes, std::size_t element_bytes) {
  MPI_Datatype element = MPI_DATATYPE_NULL, run = MPI_DATATYPE_NULL;
  MPI_Type_contiguous(mpi_count(element_bytes), MPI_BYTE, &element);
  MPI_Type_contiguous(mpi_count(bytes / element_bytes), element, &run);
  MPI_Type_free(&element);
  return run;
}

// Piece i of set on its source side (the old shard) or its destination side
// (the new one): its elements in the order the piece packs them (its box,
// row-major), each at its byte offset from the shard's first element.
// Dimensions whose indices step evenly become strided vectors, and runs
// that stay contiguous merge into one block; others (block-cyclic) become
// indexed blocks. Precondition: the piece is not empty.
inline mpi_datatype piece_datatype(piece_set const& set, std::size_t i, bool source, std::size_t element_bytes) {
  piece const& p = set.pieces[i];
  std::vector<std::size_t> const& lists = source ? set.src_indices : set.dst_indices;
  std::size_t run = element_bytes;         // the contiguous bytes built so far, until a dimension breaks the run
  MPI_Datatype inner = MPI_DATATYPE_NULL;  // the type built so far, once the run is broken
  MPI_Aint base = 0;                       // the first element's offset
  for (std::size_t d = set.rank; d-- > 0;) {
    std::size_t const from = source ? p.src_list[d] : p.dst_list[d];
    std::size_t const n = p.box[d];
    auto const stride = static_cast<MPI_Aint>((source ? p.src_stride[d] : p.dst_stride[d]) * element_bytes);
    base += static_cast<MPI_Aint>(lists[from]) * stride;
    if (n == 1) continue;
    std::size_t first = 0, step = 0;
    bool const even = progression(lists, from, n, first, step);
    if (inner == MPI_DATATYPE_NULL && even && step == 1 && static_cast<MPI_Aint>(run) == stride) {
      run *= n;
      continue;
    }
    if (inner == MPI_DATATYPE_NULL) inner = contiguous_bytes(run, element_bytes);
    MPI_Datatype outer = MPI_DATATYPE_NULL;
    if (even) {
      MPI_Type_create_hvector(mpi_count(n), 1, static_cast<MPI_Aint>(step) * stride, inner, &outer);
    } else {
      std::vector<MPI_Aint> displacements(n);
      for (std::size_t k = 0; k < n; ++k)
        displacements[k] = (static_cast<MPI_Aint>(lists[from + k]) - static_cast<MPI_Aint>(first)) * stride;
      MPI_Type_create_hindexed_block(mpi_count(n), 1, displacements.data(), inner, &outer);
    }
    MPI_Type_free(&inner);
    inner = outer;
  }
  if (inner == MPI_DATATYPE_NULL) inner = contiguous_bytes(run, element_bytes);
  MPI_Datatype placed = MPI_DATATYPE_NULL;
  MPI_Type_create_hindexed_block(1, 1, &base, inner, &placed);
  MPI_Type_free(&inner);
  MPI_Type_commit(&placed);
  return mpi_datatype(placed);
}

// One datatype per group member: its piece of set (piece_of[member], npos
// where it has none), empty where nothing moves.
inline std::vector<mpi_datatype> member_datatypes(piece_set const& set, std::vector<std::size_t> const& piece_of,
                                                  bool source, std::size_t element_bytes) {
  std::vector<mpi_datatype> out;
  out.reserve(piece_of.size());
  for (std::size_t piece_index : piece_of)
    out.push_back(piece_index == npos || set.pieces[piece_index].count == 0
                      ? mpi_datatype()
                      : piece_datatype(set, piece_index, source, element_bytes));
  return out;
}

}  // namespace shardmesh::detail
