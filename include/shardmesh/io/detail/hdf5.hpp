#pragma once
// Small owning handles over the HDF5 C API, the element types it knows,
// and a verdict agreed by every rank for each call that can fail on one:
// an HDF5 failure becomes the same typed exception on every rank.

#include "shardmesh/algebra/validation.hpp"
#include "shardmesh/comm/collective_debug.hpp"
#include "shardmesh/errors.hpp"

#include <hdf5.h>
#include <mpi.h>

#include <climits>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

namespace shardmesh::io::detail {

// An HDF5 identifier closed by Close when the handle goes.
template <herr_t (*Close)(hid_t)>
class handle {
 public:
  handle() = default;
  explicit handle(hid_t id) : id_(id) {}
  handle(handle&& other) noexcept : id_(std::exchange(other.id_, H5I_INVALID_HID)) {}
  handle& operator=(handle&& other) noexcept {
    if (this != &other) {
      reset();
      id_ = std::exchange(other.id_, H5I_INVALID_HID);
    }
    return *this;
  }
  handle(handle const&) = delete;
  handle& operator=(handle const&) = delete;
  ~handle() { reset(); }

  [[nodiscard]] hid_t get() const { return id_; }
  [[nodiscard]] bool valid() const { return id_ >= 0; }
  // Closes now; returns whether closing succeeded.
  bool reset() {
    bool ok = true;
    if (id_ >= 0) ok = Close(id_) >= 0;
    id_ = H5I_INVALID_HID;
    return ok;
  }

 private:
  hid_t id_ = H5I_INVALID_HID;
};

using file_handle = handle<H5Fclose>;
using dataset_handle = handle<H5Dclose>;
using space_handle = handle<H5Sclose>;
using properties_handle = handle<H5Pclose>;
using attribute_handle = handle<H5Aclose>;
using type_handle = handle<H5Tclose>;
using group_handle = handle<H5Gclose>;

// HDF5 prints its error stack on every failing call; shardmesh reports
// failures itself, once, as exceptions. Quiet while this lives.
class quiet_errors {
 public:
  quiet_errors() {
    H5Eget_auto2(H5E_DEFAULT, &function_, &data_);
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  }
  quiet_errors(quiet_errors const&) = delete;
  quiet_errors& operator=(quiet_errors const&) = delete;
  ~quiet_errors() { H5Eset_auto2(H5E_DEFAULT, function_, data_); }

 private:
  H5E_auto2_t function_ = nullptr;
  void* data_ = nullptr;
};

// The HDF5 type of an element named by element_name (a copy; the caller
// owns it), or H5I_INVALID_HID.
inline hid_t type_named(std::string_view element) {
  if (element == "f32") return H5Tcopy(H5T_NATIVE_FLOAT);
  if (element == "f64") return H5Tcopy(H5T_NATIVE_DOUBLE);
  if (element == "i8") return H5Tcopy(H5T_NATIVE_INT8);
  if (element == "u8") return H5Tcopy(H5T_NATIVE_UINT8);
  if (element == "i16") return H5Tcopy(H5T_NATIVE_INT16);
  if (element == "u16") return H5Tcopy(H5T_NATIVE_UINT16);
  if (element == "i32") return H5Tcopy(H5T_NATIVE_INT32);
  if (element == "u32") return H5Tcopy(H5T_NATIVE_UINT32);
  if (element == "i64") return H5Tcopy(H5T_NATIVE_INT64);
  if (element == "u64") return H5Tcopy(H5T_NATIVE_UINT64);
  return H5I_INVALID_HID;
}

// Element types a checkpoint holds: floating-point and integer numbers.
template <class T>
inline constexpr bool is_storable_v = std::is_arithmetic_v<T> && !std::is_same_v<T, bool>;

template <class T>
[[nodiscard]] hid_t native_type() {
  static_assert(is_storable_v<T>, "checkpoint: elements are floating-point or integer numbers");
  return type_named(element_name<T>());
}

// Every rank learns whether each rank's `ok` holds; if one does not, every
// rank throws Error with the message of the lowest such rank.
template <class Error = checkpoint_error>
void agree_ok(MPI_Comm comm, bool ok, std::string const& why) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  int first_failing = ok ? INT_MAX : rank;
  shardmesh::detail::debugged_collective(comm, "checkpoint: agreeing on failures", "i32", [&] {
    MPI_Allreduce(MPI_IN_PLACE, &first_failing, 1, MPI_INT, MPI_MIN, comm);
  });
  if (first_failing == INT_MAX) return;
  std::uint64_t length = rank == first_failing ? why.size() : 0;
  std::string message;
  shardmesh::detail::debugged_collective(comm, "checkpoint: the failure's message", "char", [&] {
    MPI_Bcast(&length, 1, MPI_UINT64_T, first_failing, comm);
    message = rank == first_failing ? why : std::string(length, ' ');
    MPI_Bcast(message.data(), static_cast<int>(length), MPI_CHAR, first_failing, comm);
  });
  throw Error(message);
}

// Whether every rank passed the same value (by its 64-bit hash).
[[nodiscard]] inline bool same_everywhere(MPI_Comm comm, std::uint64_t value) {
  std::uint64_t range[2] = {value, ~value};  // max of value and of its complement: min and max at once
  shardmesh::detail::debugged_collective(comm, "checkpoint: agreeing on a value", "u64",
                                         [&] { MPI_Allreduce(MPI_IN_PLACE, range, 2, MPI_UINT64_T, MPI_MAX, comm); });
  return range[0] == ~range[1];
}

}  // namespace shardmesh::io::detail
