#pragma once
// What the checkpoint writer and reader share: how they open the file, the
// text attributes, dataset names, and the checks on the ranks a tensor is on.

#include "shardmesh/algebra/axis_groups.hpp"
#include "shardmesh/algebra/hash.hpp"
#include "shardmesh/comm/collective_debug.hpp"
#include "shardmesh/io/box_checksum.hpp"
#include "shardmesh/io/detail/hdf5.hpp"
#include "shardmesh/strategy/counter_random.hpp"
#include "shardmesh/tensor/dtensor.hpp"

#include <hdf5.h>
#include <mpi.h>

#include <bit>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

namespace shardmesh::io {

// Where a checkpoint is written until commit() moves it to its name.
[[nodiscard]] inline std::filesystem::path temporary_path(std::filesystem::path const& path) {
  return std::filesystem::path(path) += ".partial";
}

namespace detail {

// The file on the mesh's communicator. Metadata operations are collective
// for the writer (HDF5 requires it for changes); the reader's are
// independent, so that a stage submesh can read its tensors alone.
inline properties_handle file_access(device_mesh const& mesh, bool collective_metadata) {
  properties_handle fapl(H5Pcreate(H5P_FILE_ACCESS));
  // Collective: HDF5 duplicates the communicator.
  shardmesh::detail::debugged_collective(mesh.comm().get(), "checkpoint: file access (HDF5)", "",
                                         [&] { H5Pset_fapl_mpio(fapl.get(), mesh.comm().get(), MPI_INFO_NULL); });
  if (collective_metadata) {
    H5Pset_all_coll_metadata_ops(fapl.get(), true);
    H5Pset_coll_metadata_write(fapl.get(), true);
  }
  return fapl;
}

// Raw data moves with independent I/O: each rank reads or writes its own
// pieces without waiting for the others (collective calls, one per piece,
// made every rank wait for the slowest, and measured slower here; the
// metadata, datasets and attributes, stays collective).
inline properties_handle independent_transfer() {
  properties_handle dxpl(H5Pcreate(H5P_DATASET_XFER));
  H5Pset_dxpl_mpio(dxpl.get(), H5FD_MPIO_INDEPENDENT);
  return dxpl;
}

inline void write_text_attribute(hid_t object, char const* name, std::string const& text) {
  type_handle type(H5Tcopy(H5T_C_S1));
  H5Tset_size(type.get(), text.empty() ? 1 : text.size());
  space_handle space(H5Screate(H5S_SCALAR));
  attribute_handle a(H5Acreate2(object, name, type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT));
  H5Awrite(a.get(), type.get(), text.c_str());
}

// The text of a scalar string attribute, or nothing if there is none. Every
// form HDF5 stores text in is read whole: fixed-size strings however padded
// (shardmesh's are null-terminated, h5py's `bytes` null-padded with no room
// for a terminator) and variable-length ones (h5py's `str`), in their own
// character set.
inline std::optional<std::string> read_text_attribute(hid_t object, char const* name) {
  if (H5Aexists(object, name) <= 0) return std::nullopt;
  attribute_handle a(H5Aopen(object, name, H5P_DEFAULT));
  type_handle stored(H5Aget_type(a.get()));
  space_handle space(H5Aget_space(a.get()));
  if (H5Tget_class(stored.get()) != H5T_STRING || H5Sget_simple_extent_npoints(space.get()) != 1) return std::nullopt;
  type_handle type(H5Tcopy(H5T_C_S1));
  H5Tset_cset(type.get(), H5Tget_cset(stored.get()));
  if (H5Tis_variable_str(stored.get()) > 0) {
    H5Tset_size(type.get(), H5T_VARIABLE);
    char* held = nullptr;
    if (H5Aread(a.get(), type.get(), static_cast<void*>(&held)) < 0) return std::nullopt;
    std::string text = held != nullptr ? held : "";
    H5free_memory(held);
    return text;
  }
  std::string text(H5Tget_size(stored.get()) + 1, '\0');  // every stored character, and the terminator
  H5Tset_size(type.get(), text.size());
  if (H5Aread(a.get(), type.get(), text.data()) < 0) return std::nullopt;
  text.resize(std::min(text.size(), text.find('\0')));
  return text;
}

// A run value (a step, a seed, a learning rate, a configuration): stored
// as the root attribute "value:<name>", a number as a number.
using run_value = std::variant<std::string, std::int64_t, std::uint64_t, double>;

[[nodiscard]] inline char const* kind_of(run_value const& v) {
  constexpr char const* kinds[] = {"text", "signed integer", "unsigned integer", "number"};
  return kinds[v.index()];
}

inline bool write_value_attribute(hid_t object, std::string const& attribute, run_value const& v) {
  if (auto const* text = std::get_if<std::string>(&v)) {
    write_text_attribute(object, attribute.c_str(), *text);
    return H5Aexists(object, attribute.c_str()) > 0;
  }
  hid_t const stored = v.index() == 1 ? H5T_STD_I64LE : v.index() == 2 ? H5T_STD_U64LE : H5T_IEEE_F64LE;
  hid_t const native = v.index() == 1 ? H5T_NATIVE_INT64 : v.index() == 2 ? H5T_NATIVE_UINT64 : H5T_NATIVE_DOUBLE;
  space_handle const space(H5Screate(H5S_SCALAR));
  attribute_handle const a(H5Acreate2(object, attribute.c_str(), stored, space.get(), H5P_DEFAULT, H5P_DEFAULT));
  return a.valid() && std::visit([&](auto const& x) { return H5Awrite(a.get(), native, &x) >= 0; }, v);
}

// The run value of a scalar attribute, by what it stores; nothing if it is none.
inline std::optional<run_value> read_value_attribute(hid_t object, char const* attribute) {
  if (H5Aexists(object, attribute) <= 0) return std::nullopt;
  attribute_handle const a(H5Aopen(object, attribute, H5P_DEFAULT));
  type_handle const stored(H5Aget_type(a.get()));
  space_handle const space(H5Aget_space(a.get()));
  if (H5Sget_simple_extent_npoints(space.get()) != 1) return std::nullopt;
  auto const number = [&](auto x, hid_t native) -> std::optional<run_value> {
    if (H5Aread(a.get(), native, &x) < 0) return std::nullopt;
    return run_value(x);
  };
  switch (H5Tget_class(stored.get())) {
    case H5T_STRING: {
      std::optional<std::string> text = read_text_attribute(object, attribute);
      return text ? std::optional<run_value>(std::move(*text)) : std::nullopt;
    }
    case H5T_INTEGER:
      return H5Tget_sign(stored.get()) == H5T_SGN_NONE ? number(std::uint64_t{}, H5T_NATIVE_UINT64)
                                                       : number(std::int64_t{}, H5T_NATIVE_INT64);
    case H5T_FLOAT: return number(0.0, H5T_NATIVE_DOUBLE);
    default: return std::nullopt;
  }
}

// A value's share of the checksum over a checkpoint's run values: a hash of
// its name, kind and content; the checksum is their sum, so the order the
// values are written or listed in does not matter.
[[nodiscard]] inline std::uint64_t value_digest(std::string const& name, run_value const& v) {
  shardmesh::detail::fnv1a h;
  for (char c : name) h.mix(static_cast<unsigned char>(c));
  h.mix(v.index());
  std::visit(
      [&](auto const& x) {
        if constexpr (std::is_same_v<std::decay_t<decltype(x)>, std::string>) {
          for (char c : x) h.mix(static_cast<unsigned char>(c));
          h.mix(x.size());
        } else {
          h.mix(std::bit_cast<std::uint64_t>(x));
        }
      },
      v);
  return parallel::mix64(h.value);
}

// The root attributes that hold run values are "value:<name>"; the checksum over them, "values_checksum".
inline constexpr std::string_view value_prefix = "value:";
inline constexpr char const* values_checksum_attribute = "values_checksum";

// "params/w" names a dataset: components separated by '/', none empty, no
// control characters. A value's name is one component.
inline std::string name_problem(std::string const& name, bool value = false) {
  bool control = false;
  for (char c : name) control = control || static_cast<unsigned char>(c) < 0x20;
  if (value && name.find('/') != std::string::npos) return "checkpoint: a value's name has no '/': \"" + name + "\"";
  if (control || name.empty() || name.front() == '/' || name.back() == '/' || name.find("//") != std::string::npos)
    return "checkpoint: \"" + name + "\" is no dataset name (components separated by '/', none empty)";
  return {};
}

// Whether the link `name` exists, its groups included (H5Lexists wants each
// group on the way to exist).
inline bool link_exists(hid_t file, std::string const& name) {
  for (std::size_t slash = name.find('/'); slash != std::string::npos; slash = name.find('/', slash + 1))
    if (H5Lexists(file, name.substr(0, slash).c_str(), H5P_DEFAULT) <= 0) return false;
  return H5Lexists(file, name.c_str(), H5P_DEFAULT) > 0;
}

// Whether this rank counts its shard's elements into the box checksums:
// the first rank of each replica group does, so every element counts once.
inline bool counts_its_shard(mesh_shape const& mesh, bound_layout const& l, std::size_t rank) {
  return group_position(mesh, axis_set::all(mesh.ndim) - sharding_axes(l), rank) == 0;
}

// Bytes of one index of dimension 0 in a shard of these local extents.
inline std::size_t row_bytes(std::size_t element_bytes, std::span<hsize_t const> local) {
  std::size_t n = element_bytes;
  for (std::size_t d = 1; d < local.size(); ++d) n *= local[d];
  return n;
}

inline void sum_up(MPI_Comm comm, std::vector<box_sum>& sums) {
  static_assert(sizeof(box_sum) == 2 * sizeof(std::uint64_t));
  shardmesh::detail::debugged_collective(comm, "checkpoint: box checksums", "u64", [&] {
    MPI_Allreduce(MPI_IN_PLACE, sums.data(), static_cast<int>(2 * sums.size()), MPI_UINT64_T, MPI_SUM, comm);
  });
}

inline std::uint64_t text_hash(std::string_view text, std::uint64_t more = 0) {
  shardmesh::detail::fnv1a h;
  for (char c : text) h.mix(static_cast<unsigned char>(c));
  return h.mix(more).value;
}

template <class T, std::size_t Rank, class MemorySpace>
std::uint64_t tensor_hash(std::string const& name, dynamic_dtensor<T, Rank, MemorySpace> const& x) {
  shardmesh::detail::fnv1a h;
  h.mix(text_hash(name)).mix(shardmesh::detail::hash(x.layout())).mix(sizeof(T)).mix(Rank);
  for (std::size_t d = 0; d < Rank; ++d) h.mix(x.global_extents()[d]);
  return h.value;
}

// The rank in `file` of each rank of `part`; empty if some rank of part is
// not in file. Local (no communication).
inline std::vector<int> ranks_within(MPI_Comm file, MPI_Comm part) {
  MPI_Group file_group = MPI_GROUP_NULL, part_group = MPI_GROUP_NULL;
  MPI_Comm_group(file, &file_group);
  MPI_Comm_group(part, &part_group);
  int n = 0;
  MPI_Group_size(part_group, &n);
  std::vector<int> mine(static_cast<std::size_t>(n)), theirs(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) mine[static_cast<std::size_t>(i)] = i;
  MPI_Group_translate_ranks(part_group, n, mine.data(), file_group, theirs.data());
  MPI_Group_free(&file_group);
  MPI_Group_free(&part_group);
  for (int r : theirs)
    if (r == MPI_UNDEFINED) return {};
  return theirs;
}

// Checked on the tensor's ranks: the tensor lives on ranks of the checkpoint.
inline void check_ranks(device_mesh const& file, device_mesh const& part, std::string const& what) {
  agree_ok<invalid_mesh_error>(part.comm().get(), !ranks_within(file.comm().get(), part.comm().get()).empty(),
                               "checkpoint: " + what + " is on ranks outside the checkpoint's");
}

}  // namespace detail
}  // namespace shardmesh::io
