#pragma once
// An owned, committed MPI datatype: freed with its owner (unless MPI has
// been finalized). MPI lets a datatype be freed while a communication that
// uses it is pending; that communication completes normally.

#include <mpi.h>

#include <utility>
#include <vector>

namespace shardmesh {

class mpi_datatype {
 public:
  mpi_datatype() = default;
  // Takes ownership of `committed`.
  explicit mpi_datatype(MPI_Datatype committed) : type_(committed) {}
  mpi_datatype(mpi_datatype&& other) noexcept : type_(std::exchange(other.type_, MPI_DATATYPE_NULL)) {}
  mpi_datatype& operator=(mpi_datatype&& other) noexcept {
    if (this != &other) {
      release();
      type_ = std::exchange(other.type_, MPI_DATATYPE_NULL);
    }
    return *this;
  }
  mpi_datatype(mpi_datatype const&) = delete;
  mpi_datatype& operator=(mpi_datatype const&) = delete;
  ~mpi_datatype() { release(); }

  // MPI_DATATYPE_NULL when empty.
  [[nodiscard]] MPI_Datatype get() const { return type_; }

 private:
  void release() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (type_ != MPI_DATATYPE_NULL && finalized == 0) MPI_Type_free(&type_);
    type_ = MPI_DATATYPE_NULL;
  }
  MPI_Datatype type_ = MPI_DATATYPE_NULL;
};

// The handles, for MPI's arrays of datatypes.
[[nodiscard]] inline std::vector<MPI_Datatype> handles_of(std::vector<mpi_datatype> const& types) {
  std::vector<MPI_Datatype> out;
  out.reserve(types.size());
  for (mpi_datatype const& t : types) out.push_back(t.get());
  return out;
}

}  // namespace shardmesh
