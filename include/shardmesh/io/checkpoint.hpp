#pragma once
// Checkpoints: dtensors saved as global arrays in one parallel HDF5 file,
// loaded under any layout, mesh and rank count.
//
//   io::checkpoint_writer out(mesh, "run/state.h5");
//   out.write("params/w", w);              // any layout; partial ones are reduced first
//   out.write_value("step", 100);
//   out.commit();                          // only now does run/state.h5 appear
//
//   io::checkpoint_reader in(mesh, "run/state.h5");
//   auto w = in.read<float, 2>("params/w", layout{shard("tp"), replicated});
//
// A dataset is the tensor's global array with its element type; its
// attributes name the layout and mesh it was saved under, the library
// version, and one checksum per written box (io/box_checksum.hpp). Each box
// is written once, by the first rank of its replica group, collectively
// through hyperslab selections; a reader reads exactly the boxes its own
// layout gives it and checks every saved box's checksum on the way. Every
// call is collective over the mesh; every failure is the same typed
// exception on every rank (errors.hpp: checkpoint_error and its kinds).
// docs/08-checkpoints.md has the file layout and the guarantees.

#include "shardmesh/algebra/axis_groups.hpp"
#include "shardmesh/algebra/hash.hpp"
#include "shardmesh/algebra/notation.hpp"
#include "shardmesh/algebra/plan_traffic.hpp"
#include "shardmesh/io/box_checksum.hpp"
#include "shardmesh/io/detail/hdf5.hpp"
#include "shardmesh/io/detail/selection.hpp"
#include "shardmesh/tensor/redistribute.hpp"
#include "shardmesh/version.hpp"

#include <hdf5.h>
#include <mpi.h>
#include <Kokkos_Core.hpp>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <system_error>
#include <vector>

namespace shardmesh::io {

// Where a checkpoint is written until commit() moves it to its name.
[[nodiscard]] inline std::filesystem::path temporary_path(std::filesystem::path const& path) {
  return std::filesystem::path(path) += ".partial";
}

namespace detail {

// Both sides open the file on the mesh's communicator with collective metadata.
inline properties_handle file_access(device_mesh const& mesh) {
  properties_handle fapl(H5Pcreate(H5P_FILE_ACCESS));
  H5Pset_fapl_mpio(fapl.get(), mesh.comm().get(), MPI_INFO_NULL);
  H5Pset_all_coll_metadata_ops(fapl.get(), true);
  H5Pset_coll_metadata_write(fapl.get(), true);
  return fapl;
}

inline properties_handle collective_transfer() {
  properties_handle dxpl(H5Pcreate(H5P_DATASET_XFER));
  H5Pset_dxpl_mpio(dxpl.get(), H5FD_MPIO_COLLECTIVE);
  return dxpl;
}

inline void write_text_attribute(hid_t object, char const* name, std::string const& text) {
  type_handle type(H5Tcopy(H5T_C_S1));
  H5Tset_size(type.get(), text.empty() ? 1 : text.size());
  space_handle space(H5Screate(H5S_SCALAR));
  attribute_handle a(H5Acreate2(object, name, type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT));
  H5Awrite(a.get(), type.get(), text.c_str());
}

// The text of an attribute, or nothing if there is none.
inline std::optional<std::string> read_text_attribute(hid_t object, char const* name) {
  if (H5Aexists(object, name) <= 0) return std::nullopt;
  attribute_handle a(H5Aopen(object, name, H5P_DEFAULT));
  type_handle stored(H5Aget_type(a.get()));
  if (H5Tget_class(stored.get()) != H5T_STRING || H5Tis_variable_str(stored.get()) > 0) return std::nullopt;
  std::string text(H5Tget_size(stored.get()), '\0');
  type_handle type(H5Tcopy(H5T_C_S1));
  H5Tset_size(type.get(), text.size());
  if (H5Aread(a.get(), type.get(), text.data()) < 0) return std::nullopt;
  text.resize(text.find('\0') == std::string::npos ? text.size() : text.find('\0'));
  return text;
}

// "params/w" names a dataset: components separated by '/', none empty.
// A value's name is one component.
inline std::string name_problem(std::string const& name, bool value = false) {
  if (value && name.find('/') != std::string::npos) return "checkpoint: a value's name has no '/': \"" + name + "\"";
  if (name.empty() || name.front() == '/' || name.back() == '/' || name.find("//") != std::string::npos)
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

// The checksums of every box of a tensor's values, summed over all ranks:
// only the first rank of each replica group adds, so every element counts once.
template <class T>
std::vector<std::uint64_t> box_checksums(device_mesh const& mesh, bound_layout const& l, tensor_index const& global,
                                         std::span<T const> local, box_grid const& boxes) {
  std::vector<std::uint64_t> sums(boxes.mesh.size(), 0);
  axis_set const replica_axes = axis_set::all(mesh.shape().ndim) - sharding_axes(l);
  if (group_position(mesh.shape(), replica_axes, mesh.rank()) == 0)
    add_to_box_checksums(local, mesh.shape(), l, global, mesh.rank(), boxes, sums);
  MPI_Allreduce(MPI_IN_PLACE, sums.data(), static_cast<int>(sums.size()), MPI_UINT64_T, MPI_SUM, mesh.comm().get());
  return sums;
}

template <class T, std::size_t Rank, class MemorySpace>
std::uint64_t tensor_hash(std::string const& name, dynamic_dtensor<T, Rank, MemorySpace> const& x) {
  shardmesh::detail::fnv1a h;
  for (char c : name) h = h.mix(static_cast<std::uint64_t>(c));
  h = h.mix(shardmesh::detail::hash(x.layout())).mix(sizeof(T)).mix(Rank);
  for (std::size_t d = 0; d < Rank; ++d) h = h.mix(x.global_extents()[d]);
  return h.value;
}

// A tensor's mesh must be the checkpoint's: every rank takes part in every dataset.
inline bool same_ranks(device_mesh const& file_mesh, device_mesh const& tensor_mesh) {
  int result = MPI_UNEQUAL;
  MPI_Comm_compare(file_mesh.comm().get(), tensor_mesh.comm().get(), &result);
  return result == MPI_IDENT || result == MPI_CONGRUENT;
}

}  // namespace detail

class checkpoint_writer {
 public:
  // Collective: creates the temporary file temporary_path(path), replacing
  // one left over from an interrupted save. The file at `path`, if any,
  // stays as it is until commit().
  checkpoint_writer(device_mesh const& mesh, std::filesystem::path path) : mesh_(mesh), path_(std::move(path)) {
    detail::quiet_errors const quiet;
    detail::properties_handle const fapl = detail::file_access(mesh_);
    file_ = detail::file_handle(H5Fcreate(temporary_path(path_).c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.get()));
    detail::agree_ok(comm(), file_.valid(), "checkpoint: cannot create " + temporary_path(path_).string());
    detail::group_handle const root(H5Gopen2(file_.get(), "/", H5P_DEFAULT));
    detail::write_text_attribute(root.get(), "shardmesh_version", SHARDMESH_VERSION_STRING);
  }

  checkpoint_writer(checkpoint_writer const&) = delete;
  checkpoint_writer& operator=(checkpoint_writer const&) = delete;

  // Not committed: the temporary file goes, the previous checkpoint stays.
  // Collective, like closing the file (HDF5 closes it collectively).
  ~checkpoint_writer() {
    if (!file_.valid()) return;
    detail::quiet_errors const quiet;
    file_.reset();
    if (mesh_.rank() == 0) {
      std::error_code ignored;
      std::filesystem::remove(temporary_path(path_), ignored);
    }
    MPI_Barrier(comm());
  }

  // Collective: x as the dataset `name` ("params/w"; groups are created).
  template <class T, std::size_t Rank, class MemorySpace>
  void write(std::string const& name, dynamic_dtensor<T, Rank, MemorySpace> const& x) {
    detail::quiet_errors const quiet;
    check_name(name);
    detail::agree_ok<invalid_mesh_error>(
        comm(), detail::same_ranks(mesh_, x.mesh()),
        "checkpoint: " + x.notation() + " (\"" + name + "\") is not on the checkpoint's ranks");
    detail::agree_ok<mismatched_tensor_error>(
        comm(), detail::same_everywhere(comm(), detail::tensor_hash(name, x)),
        "checkpoint: ranks disagree on the dataset \"" + name + "\" (its name, layout, element type or extents)");
    // A partial tensor is written as its reduced values.
    layout values = x.layout();
    values.partial_axes = {};
    dynamic_dtensor<T, Rank, MemorySpace> const y = values == x.layout() ? x : redistribute(x, values);
    mesh_shape const& shape = y.mesh().shape();
    bound_layout const b = y.bound();
    tensor_index const& global = y.global_extents();
    auto const host = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace{}, y.local());
    std::span<T const> const local(host.data(), host.size());
    std::vector<std::uint64_t> const sums = detail::box_checksums(y.mesh(), b, global, local, box_grid{shape, b});

    std::array<hsize_t, Rank> dims{};
    std::array<hsize_t, Rank> local_dims{};
    for (std::size_t d = 0; d < Rank; ++d) {
      dims[d] = global[d];
      local_dims[d] = y.local().extent(d);
    }
    detail::space_handle const file_space(H5Screate_simple(Rank, dims.data(), nullptr));
    detail::type_handle const type(detail::native_type<T>());
    detail::properties_handle const lcpl(H5Pcreate(H5P_LINK_CREATE));
    H5Pset_create_intermediate_group(lcpl.get(), 1);
    detail::properties_handle const dcpl(H5Pcreate(H5P_DATASET_CREATE));
    H5Pset_fill_time(dcpl.get(), H5D_FILL_TIME_NEVER);  // every element is written
    detail::dataset_handle const dataset(
        H5Dcreate2(file_.get(), name.c_str(), type.get(), file_space.get(), lcpl.get(), dcpl.get(), H5P_DEFAULT));
    detail::agree_ok(comm(), dataset.valid(), "checkpoint: cannot create the dataset \"" + name + "\"");

    // One writer per replica group.
    axis_set const replica_axes = axis_set::all(shape.ndim) - sharding_axes(b);
    bool const writes = group_position(shape, replica_axes, mesh_.rank()) == 0;
    detail::space_handle const memory_space(H5Screate_simple(Rank, local_dims.data(), nullptr));
    if (!writes || detail::select_shard(file_space.get(), shape, b, global, mesh_.rank()) == 0) {
      H5Sselect_none(file_space.get());
      H5Sselect_none(memory_space.get());
    }
    detail::properties_handle const dxpl = detail::collective_transfer();
    herr_t const status =
        H5Dwrite(dataset.get(), type.get(), memory_space.get(), file_space.get(), dxpl.get(), host.data());
    detail::agree_ok(comm(), status >= 0, "checkpoint: writing the dataset \"" + name + "\" failed");

    detail::write_text_attribute(dataset.get(), "layout", std::string(to_string(values).view()));
    detail::write_text_attribute(dataset.get(), "mesh", std::string(to_string(shape).view()));
    detail::write_text_attribute(dataset.get(), "element_type", std::string(element_name<T>()));
    hsize_t const boxes = sums.size();
    detail::space_handle const sums_space(H5Screate_simple(1, &boxes, nullptr));
    detail::attribute_handle const a(
        H5Acreate2(dataset.get(), "box_checksums", H5T_STD_U64LE, sums_space.get(), H5P_DEFAULT, H5P_DEFAULT));
    detail::agree_ok(comm(), H5Awrite(a.get(), H5T_NATIVE_UINT64, sums.data()) >= 0,
                     "checkpoint: writing the attributes of \"" + name + "\" failed");
  }

  // Collective: a value the same on every rank (a step count, a seed).
  void write_value(std::string const& name, std::int64_t value) { write_text(name, std::to_string(value)); }

  // Collective: a text the same on every rank (a configuration).
  void write_text(std::string const& name, std::string const& text) {
    detail::quiet_errors const quiet;
    check_name(name, true);
    shardmesh::detail::fnv1a h;
    for (char c : name + '\0' + text) h = h.mix(static_cast<std::uint64_t>(c));
    detail::agree_ok<mismatched_tensor_error>(comm(), detail::same_everywhere(comm(), h.value),
                                              "checkpoint: ranks disagree on the value \"" + name + "\"");
    detail::group_handle const root(H5Gopen2(file_.get(), "/", H5P_DEFAULT));
    detail::write_text_attribute(root.get(), ("value:" + name).c_str(), text);
  }

  // Collective: closes the file and moves it to its name, replacing the
  // previous checkpoint there. Only after every rank has written and the
  // file is closed does the name change.
  void commit() {
    detail::quiet_errors const quiet;
    detail::agree_ok(comm(), file_.reset(), "checkpoint: closing " + temporary_path(path_).string() + " failed");
    std::error_code moved;
    if (mesh_.rank() == 0) std::filesystem::rename(temporary_path(path_), path_, moved);
    detail::agree_ok(comm(), !moved,
                     "checkpoint: cannot rename " + temporary_path(path_).string() + " to " + path_.string() + ": " +
                         moved.message());
  }

 private:
  [[nodiscard]] MPI_Comm comm() const { return mesh_.comm().get(); }

  void check_name(std::string const& name, bool value = false) const {
    detail::agree_ok(comm(), file_.valid(), "checkpoint: " + path_.string() + " is already committed");
    std::string const problem = detail::name_problem(name, value);
    detail::agree_ok(comm(), problem.empty(), problem);
  }

  device_mesh mesh_;
  std::filesystem::path path_;
  detail::file_handle file_;
};

class checkpoint_reader {
 public:
  // Collective: opens the checkpoint at `path` for reading.
  checkpoint_reader(device_mesh const& mesh, std::filesystem::path path) : mesh_(mesh), path_(std::move(path)) {
    detail::quiet_errors const quiet;
    std::error_code ignored;
    detail::agree_ok(comm(), std::filesystem::exists(path_, ignored),
                     "checkpoint: " + path_.string() + " does not exist");
    detail::properties_handle const fapl = detail::file_access(mesh_);
    file_ = detail::file_handle(H5Fopen(path_.c_str(), H5F_ACC_RDONLY, fapl.get()));
    detail::agree_ok(comm(), file_.valid(),
                     "checkpoint: " + path_.string() + " is not a readable HDF5 file (truncated or damaged?)");
    detail::group_handle const root(H5Gopen2(file_.get(), "/", H5P_DEFAULT));
    detail::agree_ok(comm(), detail::read_text_attribute(root.get(), "shardmesh_version").has_value(),
                     "checkpoint: " + path_.string() + " was not written by shardmesh");
  }

  [[nodiscard]] std::filesystem::path const& path() const { return path_; }

  // Whether the checkpoint holds a dataset `name`. Collective.
  [[nodiscard]] bool contains(std::string const& name) const {
    detail::quiet_errors const quiet;
    return detail::name_problem(name).empty() && detail::link_exists(file_.get(), name);
  }

  // Collective: the dataset `name` as a new tensor of layout l on the
  // reader's mesh (global extents from the file).
  template <class T, std::size_t Rank, class MemorySpace = Kokkos::DefaultExecutionSpace::memory_space>
  [[nodiscard]] dynamic_dtensor<T, Rank, MemorySpace> read(std::string const& name, layout const& l) const {
    using tensor = dynamic_dtensor<T, Rank, MemorySpace>;
    detail::quiet_errors const quiet;
    shardmesh::detail::fnv1a h;
    for (char c : name) h = h.mix(static_cast<std::uint64_t>(c));
    h = h.mix(shardmesh::detail::hash(l)).mix(sizeof(T)).mix(Rank);
    detail::agree_ok<mismatched_tensor_error>(comm(), detail::same_everywhere(comm(), h.value),
                                              "checkpoint: ranks disagree on reading \"" + name + "\"");
    detail::dataset_handle const dataset = open<T, Rank>(name);
    std::array<std::size_t, Rank> global{};
    tensor_index const dims = dataset_extents(dataset.get());
    for (std::size_t d = 0; d < Rank; ++d) global[d] = dims[d];
    std::string const problem(layout_error<T>("checkpoint", mesh_.shape(), l).view());
    detail::agree_ok<invalid_layout_error>(comm(), problem.empty() && l.rank == Rank,
                                           "checkpoint: reading \"" + name + "\" as layout " +
                                               std::string(to_string(l).view()) + ": " +
                                               (problem.empty() ? "the rank differs" : problem));
    tensor_index padded{};
    for (std::size_t d = 0; d < Rank; ++d) padded[d] = global[d];
    auto local = shardmesh::detail::allocate<typename tensor::view_type>(
        "shardmesh::checkpoint", local_extents(mesh_.shape(), bind(mesh_.shape(), l), padded, mesh_.rank()));
    tensor x = tensor::adopt(mesh_, l, padded, local);
    read_into(name, dataset.get(), x);
    return x;
  }

  // Collective: the dataset `name` into x, whose global extents and element
  // type must be the dataset's.
  template <class T, std::size_t Rank, class MemorySpace>
  void read(std::string const& name, dynamic_dtensor<T, Rank, MemorySpace>& x) const {
    detail::quiet_errors const quiet;
    detail::agree_ok<invalid_mesh_error>(
        comm(), detail::same_ranks(mesh_, x.mesh()),
        "checkpoint: " + x.notation() + " (\"" + name + "\") is not on the checkpoint's ranks");
    detail::agree_ok<mismatched_tensor_error>(comm(), detail::same_everywhere(comm(), detail::tensor_hash(name, x)),
                                              "checkpoint: ranks disagree on reading \"" + name + "\"");
    detail::dataset_handle const dataset = open<T, Rank>(name);
    tensor_index const dims = dataset_extents(dataset.get());
    bool same = true;
    for (std::size_t d = 0; d < Rank; ++d) same = same && dims[d] == x.global_extents()[d];
    detail::agree_ok<checkpoint_mismatch_error>(comm(), same,
                                                "checkpoint: the dataset \"" + name + "\" is " +
                                                    shardmesh::detail::tensor_name(element_name<T>(), Rank, dims) +
                                                    ", the tensor " + x.notation());
    read_into(name, dataset.get(), x);
  }

  // Collective: a value written by write_value.
  [[nodiscard]] std::int64_t value(std::string const& name) const {
    std::string const t = text(name);
    std::size_t used = 0;
    std::int64_t v = 0;
    bool ok = true;
    try {
      v = std::stoll(t, &used);
    } catch (std::exception const&) {
      ok = false;
    }
    detail::agree_ok(comm(), ok && used == t.size(), "checkpoint: the value \"" + name + "\" is not an integer");
    return v;
  }

  // Collective: a text written by write_text.
  [[nodiscard]] std::string text(std::string const& name) const {
    detail::quiet_errors const quiet;
    detail::group_handle const root(H5Gopen2(file_.get(), "/", H5P_DEFAULT));
    std::optional<std::string> const t = detail::read_text_attribute(root.get(), ("value:" + name).c_str());
    detail::agree_ok<missing_dataset_error>(comm(), t.has_value(),
                                            "checkpoint: " + path_.string() + " holds no value \"" + name + "\"");
    return *t;
  }

 private:
  [[nodiscard]] MPI_Comm comm() const { return mesh_.comm().get(); }

  // The dataset `name`, checked to hold elements of type T in Rank dimensions.
  template <class T, std::size_t Rank>
  detail::dataset_handle open(std::string const& name) const {
    std::string const problem = detail::name_problem(name);
    detail::agree_ok(comm(), problem.empty(), problem);
    detail::agree_ok<missing_dataset_error>(comm(), detail::link_exists(file_.get(), name),
                                            "checkpoint: " + path_.string() + " holds no dataset \"" + name + "\"");
    detail::dataset_handle dataset(H5Dopen2(file_.get(), name.c_str(), H5P_DEFAULT));
    detail::agree_ok<missing_dataset_error>(comm(), dataset.valid(), "checkpoint: \"" + name + "\" is no dataset");
    detail::type_handle const stored(H5Dget_type(dataset.get()));
    detail::type_handle const wanted(detail::native_type<T>());
    std::string const stored_name = detail::read_text_attribute(dataset.get(), "element_type").value_or("another type");
    detail::agree_ok<checkpoint_mismatch_error>(comm(), H5Tequal(stored.get(), wanted.get()) > 0,
                                                "checkpoint: the dataset \"" + name + "\" holds " + stored_name +
                                                    ", the tensor " + std::string(element_name<T>()));
    detail::space_handle const space(H5Dget_space(dataset.get()));
    int const rank = H5Sget_simple_extent_ndims(space.get());
    detail::agree_ok<checkpoint_mismatch_error>(comm(), rank == static_cast<int>(Rank),
                                                "checkpoint: the dataset \"" + name + "\" has " + std::to_string(rank) +
                                                    " dimensions, the tensor " + std::to_string(Rank));
    return dataset;
  }

  static tensor_index dataset_extents(hid_t dataset) {
    detail::space_handle const space(H5Dget_space(dataset));
    std::array<hsize_t, max_tensor_rank> dims{};
    H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr);
    tensor_index out{};
    for (std::size_t d = 0; d < max_tensor_rank; ++d) out[d] = dims[d];
    return out;
  }

  // The layout and mesh a dataset was saved under, and its box checksums.
  struct saved_boxes {
    box_grid grid;
    std::vector<std::uint64_t> sums;
  };

  saved_boxes saved(std::string const& name, hid_t dataset, std::size_t rank) const {
    saved_boxes out;
    std::optional<std::string> const l = detail::read_text_attribute(dataset, "layout");
    std::optional<std::string> const m = detail::read_text_attribute(dataset, "mesh");
    auto const parsed_layout = parse_layout(l.value_or("?"));
    auto const parsed_mesh = parse_mesh(m.value_or("?"));
    bool ok = parsed_layout.ok() && parsed_mesh.ok() && parsed_layout.value.rank == rank &&
              layout_error<float>("checkpoint", parsed_mesh.value, parsed_layout.value).empty() &&
              H5Aexists(dataset, "box_checksums") > 0;
    if (ok) {
      out.grid = {parsed_mesh.value, bind(parsed_mesh.value, parsed_layout.value)};
      out.sums.resize(parsed_mesh.value.size());
      detail::attribute_handle const a(H5Aopen(dataset, "box_checksums", H5P_DEFAULT));
      detail::space_handle const space(H5Aget_space(a.get()));
      ok = H5Sget_simple_extent_npoints(space.get()) == static_cast<hssize_t>(out.sums.size()) &&
           H5Aread(a.get(), H5T_NATIVE_UINT64, out.sums.data()) >= 0;
    }
    detail::agree_ok(comm(), ok,
                     "checkpoint: the dataset \"" + name + "\" lacks readable layout, mesh or checksum attributes");
    return out;
  }

  template <class T, std::size_t Rank, class MemorySpace>
  void read_into(std::string const& name, hid_t dataset, dynamic_dtensor<T, Rank, MemorySpace>& x) const {
    using tensor = dynamic_dtensor<T, Rank, MemorySpace>;
    saved_boxes const boxes = saved(name, dataset, Rank);
    // Read the values under x's layout without its partial axes; spread them
    // over the partial axes afterwards.
    layout values = x.layout();
    values.partial_axes = {};
    bool const partial = values != x.layout();
    mesh_shape const& shape = mesh_.shape();
    bound_layout const b = bind(shape, values);
    tensor_index const& global = x.global_extents();
    typename tensor::view_type local = partial
                                           ? shardmesh::detail::allocate<typename tensor::view_type>(
                                                 "shardmesh::checkpoint", local_extents(shape, b, global, mesh_.rank()))
                                           : x.local();
    auto host = Kokkos::create_mirror_view(Kokkos::WithoutInitializing, local);

    std::array<hsize_t, Rank> local_dims{};
    for (std::size_t d = 0; d < Rank; ++d) local_dims[d] = local.extent(d);
    detail::space_handle const file_space(H5Dget_space(dataset));
    detail::space_handle const memory_space(H5Screate_simple(Rank, local_dims.data(), nullptr));
    if (detail::select_shard(file_space.get(), shape, b, global, mesh_.rank()) == 0) H5Sselect_none(memory_space.get());
    detail::type_handle const type(detail::native_type<T>());
    detail::properties_handle const dxpl = detail::collective_transfer();
    herr_t const status = H5Dread(dataset, type.get(), memory_space.get(), file_space.get(), dxpl.get(), host.data());
    detail::agree_ok<corrupt_checkpoint_error>(comm(), status >= 0,
                                               "checkpoint: reading the dataset \"" + name + "\" failed");

    std::vector<std::uint64_t> const sums =
        detail::box_checksums(mesh_, b, global, std::span<T const>(host.data(), host.size()), boxes.grid);
    std::size_t bad = 0;
    while (bad < sums.size() && sums[bad] == boxes.sums[bad]) ++bad;
    detail::agree_ok<corrupt_checkpoint_error>(comm(), bad == sums.size(),
                                               "checkpoint: the dataset \"" + name + "\" in " + path_.string() +
                                                   " is corrupt: the box saved by rank " + std::to_string(bad) +
                                                   " of " + std::string(to_string(boxes.grid.mesh).view()) +
                                                   " does not match its checksum");
    Kokkos::deep_copy(local, host);
    if (partial) redistribute(tensor::adopt(mesh_, values, global, local), x);
  }

  device_mesh mesh_;
  std::filesystem::path path_;
  detail::file_handle file_;
};

}  // namespace shardmesh::io
