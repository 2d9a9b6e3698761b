#pragma once
// Reading a checkpoint under any layout, mesh and rank count.
//
//   io::checkpoint_reader in(mesh, "run/state.h5");
//   auto w = in.read<float, 2>("params/w", layout{shard("tp"), replicated});
//   in.read("stage/b", b);          // into an existing tensor, on any submesh
//   auto step = in.value("step");   // run values are checked against their checksum on opening
//
// Each rank reads exactly the elements its layout gives it (replicas read
// their copy, a partial layout's values go to its first rank on the partial
// axes and are spread by the algebra's plan), and the sum of what the
// first replicas read is checked against every saved box's checksum.
// Each rank reads its own pieces independently, so a tensor on a submesh
// (a pipeline stage) reads on its ranks alone.

#include "shardmesh/algebra/notation.hpp"
#include "shardmesh/io/detail/checkpoint_support.hpp"
#include "shardmesh/io/detail/mapped_dataset.hpp"
#include "shardmesh/io/detail/selection.hpp"
#include "shardmesh/tensor/redistribute.hpp"

#include <hdf5.h>
#include <mpi.h>
#include <Kokkos_Core.hpp>

#include <sys/stat.h>

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

namespace shardmesh::io {

struct read_options {
  // Check every box's checksums (a pass over the data as it is read). Off
  // only for storage trusted not to change a byte.
  bool verify = true;
  // Copy a dataset HDF5 stores as one plain extent from the file mapped
  // into memory, checksumming as it copies (detail/mapped_dataset.hpp).
  // Off: every read goes through HDF5, for file systems where mapping a
  // file is slow, or files that may shrink while they are read (a mapped
  // read would stop the process where HDF5 reports a typed error).
  bool map = true;
};

class checkpoint_reader {
 public:
  // Collective: opens the checkpoint at `path` for reading. Every rank
  // holds the same version of the file from here on, even while a save
  // replaces it under its name (commit() renames a new file over it); its
  // run values are read now and checked against their checksum.
  checkpoint_reader(device_mesh const& mesh, std::filesystem::path path, read_options options = {})
      : mesh_(mesh), path_(std::move(path)), options_(options) {
    detail::quiet_errors const quiet;
    std::error_code ignored;
    detail::agree_ok(comm(), std::filesystem::exists(path_, ignored),
                     "checkpoint: " + path_.string() + " does not exist");
    constexpr int attempts = 3;
    bool opened = false;
    for (int attempt = 0; attempt < attempts && !opened; ++attempt) opened = open_one_version();
    detail::agree_ok<replaced_checkpoint_error>(comm(), opened,
                                                "checkpoint: " + path_.string() + " was replaced by another save " +
                                                    "each of the " + std::to_string(attempts) +
                                                    " times it was opened; open it again once the saves stop");
    detail::group_handle const root(H5Gopen2(file_.get(), "/", H5P_DEFAULT));
    detail::agree_ok(comm(), detail::read_text_attribute(root.get(), "shardmesh_version").has_value(),
                     "checkpoint: " + path_.string() + " was not written by shardmesh");
    read_values(root.get());
  }

  [[nodiscard]] std::filesystem::path const& path() const { return path_; }

  // Whether the checkpoint holds a dataset `name`. Not collective.
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
    detail::agree_ok<mismatched_tensor_error>(
        comm(), detail::same_everywhere(comm(), detail::text_hash(name, shardmesh::detail::hash(l))),
        "checkpoint: ranks disagree on reading \"" + name + "\"");
    detail::dataset_handle const dataset = open<T, Rank>(name, comm());
    tensor_index const global = dataset_extents(dataset.get());
    std::string const problem(layout_error<T>("checkpoint", mesh_.shape(), l).view());
    detail::agree_ok<invalid_layout_error>(
        comm(), problem.empty() && l.rank == Rank,
        "checkpoint: reading \"" + name + "\" as layout " + std::string(to_string(l).view()) + ": " +
            (problem.empty() ? "it has " + std::to_string(l.rank) + " dimensions" : problem));
    auto local = shardmesh::detail::allocate<typename tensor::view_type>(
        "shardmesh::checkpoint", local_extents(mesh_.shape(), bind(mesh_.shape(), l), global, mesh_.rank()));
    tensor const x = tensor::adopt(mesh_, l, global, local);
    read_into(name, dataset.get(), x);
    return x;
  }

  // Collective over x's ranks (all the reader's, or a submesh of them): the
  // dataset `name` into x's shard; x's global extents and element type must
  // be the dataset's.
  template <class T, std::size_t Rank, class MemorySpace>
  void read(std::string const& name, dynamic_dtensor<T, Rank, MemorySpace> const& x) const {
    detail::quiet_errors const quiet;
    require_held("checkpoint read", x);
    shardmesh::detail::operation_scope const scope([&] { return "checkpoint read \"" + name + "\" " + x.notation(); });
    MPI_Comm const tensor_comm = x.mesh().comm().get();
    detail::check_ranks(mesh_, x.mesh(), x.notation() + " (\"" + name + "\")");
    detail::agree_ok<mismatched_tensor_error>(tensor_comm,
                                              detail::same_everywhere(tensor_comm, detail::tensor_hash(name, x)),
                                              "checkpoint: ranks disagree on reading \"" + name + "\"");
    detail::dataset_handle const dataset = open<T, Rank>(name, tensor_comm);
    tensor_index const dims = dataset_extents(dataset.get());
    bool same = true;
    for (std::size_t d = 0; d < Rank; ++d) same = same && dims[d] == x.global_extents()[d];
    detail::agree_ok<checkpoint_mismatch_error>(tensor_comm, same,
                                                "checkpoint: the dataset \"" + name + "\" is " +
                                                    shardmesh::detail::tensor_name(element_name<T>(), Rank, dims) +
                                                    ", the tensor " + x.notation());
    read_into(name, dataset.get(), x);
  }

  // A number written by write_value, as the type it was stored as: V is
  // std::int64_t for signed integers, std::uint64_t for unsigned ones,
  // double for floating-point numbers. Collective (verdicts agreed).
  template <class V = std::int64_t>
  [[nodiscard]] V value(std::string const& name) const {
    static_assert(std::is_same_v<V, std::int64_t> || std::is_same_v<V, std::uint64_t> || std::is_same_v<V, double>,
                  "checkpoint: values are read as std::int64_t, std::uint64_t or double");
    detail::run_value const& v = stored_value(name);
    V const* number = std::get_if<V>(&v);
    detail::agree_ok<checkpoint_mismatch_error>(comm(), number != nullptr,
                                                "checkpoint: the value \"" + name + "\" is a " + detail::kind_of(v) +
                                                    ", not a " + detail::kind_of(detail::run_value(V{})));
    return *number;
  }

  // A text written by write_text. Collective (verdicts agreed).
  [[nodiscard]] std::string text(std::string const& name) const {
    detail::run_value const& v = stored_value(name);
    auto const* t = std::get_if<std::string>(&v);
    detail::agree_ok<checkpoint_mismatch_error>(
        comm(), t != nullptr, "checkpoint: the value \"" + name + "\" is a " + detail::kind_of(v) + ", not a text");
    return *t;
  }

 private:
  [[nodiscard]] MPI_Comm comm() const { return mesh_.comm().get(); }

  // Opens the file by descriptor and through HDF5, then checks that both
  // are the file now under the name on every rank, and that every rank
  // holds the same one (its inode, size and modification time: the same
  // on every node of a parallel file system). Collective.
  bool open_one_version() {
    file_.reset();
    fd_ = detail::file_descriptor(path_);
    detail::properties_handle const fapl = detail::file_access(mesh_, false);
    file_ = shardmesh::detail::debugged_collective(comm(), "checkpoint: opening the file (HDF5)", "", [&] {
      return detail::file_handle(H5Fopen(path_.c_str(), H5F_ACC_RDONLY, fapl.get()));
    });
    detail::agree_ok(comm(), file_.valid() && fd_.valid(),
                     "checkpoint: " + path_.string() + " is not a readable HDF5 file (truncated or damaged?)");
    struct stat held{}, named{};
    bool const unchanged = ::fstat(fd_.get(), &held) == 0 && ::stat(path_.c_str(), &named) == 0 &&
                           held.st_dev == named.st_dev && held.st_ino == named.st_ino;
    shardmesh::detail::fnv1a version;
    version.mix(held.st_ino).mix(static_cast<std::uint64_t>(held.st_size));
    version.mix(static_cast<std::uint64_t>(held.st_mtim.tv_sec)).mix(static_cast<std::uint64_t>(held.st_mtim.tv_nsec));
    int everywhere = unchanged ? 1 : 0;
    shardmesh::detail::debugged_collective(comm(), "checkpoint: is the file unchanged", "i32", [&] {
      MPI_Allreduce(MPI_IN_PLACE, &everywhere, 1, MPI_INT, MPI_MIN, comm());
    });
    return detail::same_everywhere(comm(), version.value) && everywhere == 1;
  }

  // Every run value of the root group, checked against their checksum.
  void read_values(hid_t root) {
    struct listing {
      std::map<std::string, detail::run_value>* values;
      bool readable = true;
    } found{&values_};
    H5Aiterate2(
        root, H5_INDEX_NAME, H5_ITER_INC, nullptr,
        [](hid_t object, char const* name, H5A_info_t const*, void* data) -> herr_t {
          auto& l = *static_cast<listing*>(data);
          std::string_view const attribute(name);
          if (!attribute.starts_with(detail::value_prefix)) return 0;
          std::optional<detail::run_value> v = detail::read_value_attribute(object, name);
          if (v)
            l.values->emplace(attribute.substr(detail::value_prefix.size()), std::move(*v));
          else
            l.readable = false;
          return 0;
        },
        &found);
    std::uint64_t sum = 0;
    std::string names;
    for (auto const& [name, v] : values_) {
      sum += detail::value_digest(name, v);
      names += (names.empty() ? "" : ", ") + name;
    }
    std::optional<detail::run_value> const stored =
        detail::read_value_attribute(root, detail::values_checksum_attribute);
    auto const* checksum = stored ? std::get_if<std::uint64_t>(&*stored) : nullptr;
    detail::agree_ok<corrupt_checkpoint_error>(comm(), found.readable && checksum != nullptr && *checksum == sum,
                                               "checkpoint: the run values in " + path_.string() + " (" + names +
                                                   ") do not match their checksum: changed since the save");
  }

  detail::run_value const& stored_value(std::string const& name) const {
    auto const at = values_.find(name);
    detail::agree_ok<missing_dataset_error>(comm(), at != values_.end(),
                                            "checkpoint: " + path_.string() + " holds no value \"" + name + "\"");
    return at->second;
  }

  // The dataset `name`, checked to hold elements of type T in Rank
  // dimensions (verdicts agreed over `over`, the tensor's ranks).
  template <class T, std::size_t Rank>
  detail::dataset_handle open(std::string const& name, MPI_Comm over) const {
    std::string const problem = detail::name_problem(name);
    detail::agree_ok(over, problem.empty(), problem);
    detail::agree_ok<missing_dataset_error>(over, detail::link_exists(file_.get(), name),
                                            "checkpoint: " + path_.string() + " holds no dataset \"" + name + "\"");
    detail::dataset_handle dataset(H5Dopen2(file_.get(), name.c_str(), H5P_DEFAULT));
    detail::agree_ok<missing_dataset_error>(over, dataset.valid(), "checkpoint: \"" + name + "\" is no dataset");
    detail::type_handle const stored(H5Dget_type(dataset.get()));
    detail::type_handle const wanted(detail::native_type<T>());
    std::string const stored_name = detail::read_text_attribute(dataset.get(), "element_type").value_or("another type");
    detail::agree_ok<checkpoint_mismatch_error>(over, H5Tequal(stored.get(), wanted.get()) > 0,
                                                "checkpoint: the dataset \"" + name + "\" holds " + stored_name +
                                                    ", the tensor " + std::string(element_name<T>()));
    detail::space_handle const space(H5Dget_space(dataset.get()));
    int const rank = H5Sget_simple_extent_ndims(space.get());
    detail::agree_ok<checkpoint_mismatch_error>(over, rank == static_cast<int>(Rank),
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
    std::vector<box_sum> sums;
  };

  saved_boxes saved(std::string const& name, hid_t dataset, std::size_t rank, MPI_Comm over) const {
    saved_boxes out;
    auto const l = parse_layout(detail::read_text_attribute(dataset, "layout").value_or("?"));
    auto const m = parse_mesh(detail::read_text_attribute(dataset, "mesh").value_or("?"));
    bool ok = l.ok() && m.ok() && l.value().rank == rank && !l.value().is_partial() &&
              layout_error<float>("checkpoint", m.value(), l.value()).empty() &&
              H5Aexists(dataset, "box_checksums") > 0;
    if (ok) {
      out.grid = {m.value(), bind(m.value(), l.value())};
      out.sums.resize(m.value().size());
      detail::attribute_handle const a(H5Aopen(dataset, "box_checksums", H5P_DEFAULT));
      detail::space_handle const space(H5Aget_space(a.get()));
      ok = H5Sget_simple_extent_npoints(space.get()) == static_cast<hssize_t>(2 * out.sums.size()) &&
           H5Aread(a.get(), H5T_NATIVE_UINT64, out.sums.data()) >= 0;
    }
    detail::agree_ok(over, ok,
                     "checkpoint: the dataset \"" + name + "\" lacks readable layout, mesh or checksum attributes");
    return out;
  }

  template <class T, std::size_t Rank, class MemorySpace>
  void read_into(std::string const& name, hid_t dataset, dynamic_dtensor<T, Rank, MemorySpace> x) const {
    using tensor = dynamic_dtensor<T, Rank, MemorySpace>;
    device_mesh const& mesh = x.mesh();
    MPI_Comm const over = mesh.comm().get();
    saved_boxes const boxes = saved(name, dataset, Rank, over);
    // Read the values under x's layout without its partial axes; spread them
    // over the partial axes afterwards.
    layout values = x.layout();
    values.partial_axes = {};
    bool const partial = values != x.layout();
    bound_layout const b = bind(mesh.shape(), values);
    tensor_index const& global = x.global_extents();
    typename tensor::view_type const local =
        partial ? shardmesh::detail::allocate<typename tensor::view_type>(
                      "shardmesh::checkpoint", local_extents(mesh.shape(), b, global, mesh.rank()))
                : x.local();
    auto const host = Kokkos::create_mirror_view(Kokkos::WithoutInitializing, local);

    std::array<hsize_t, Rank> local_dims{};
    std::size_t dataset_bytes = sizeof(T);
    for (std::size_t d = 0; d < Rank; ++d) {
      local_dims[d] = local.extent(d);
      dataset_bytes *= global[d];
    }
    std::size_t const rows = local_dims[0], row_bytes = detail::row_bytes(sizeof(T), local_dims);
    bool const counts = options_.verify && detail::counts_its_shard(mesh.shape(), b, mesh.rank());
    std::vector<box_sum> sums(boxes.sums.size());
    detail::type_handle const type(detail::native_type<T>());
    bool ok = true;
    std::optional<detail::mapped_dataset> mapped;
    if (options_.map && host.size() > 0) mapped.emplace(fd_, file_.get(), dataset, type.get(), dataset_bytes);
    if (mapped && mapped->data() != nullptr) {
      // Copied from the mapped file, checksummed in the same pass where it counts.
      copy_with_box_checksums(reinterpret_cast<T const*>(mapped->data()), std::span<T>(host.data(), host.size()),
                              mesh.shape(), b, global, mesh.rank(), interval{0, rows}, boxes.grid,
                              counts ? &sums : nullptr);
    } else {
      // Through HDF5, piece by piece: read, then checksummed while in the cache.
      std::size_t const piece_bytes = options_.verify ? detail::checked_piece_bytes : detail::unchecked_piece_bytes;
      std::size_t const pieces = detail::piece_count(rows, row_bytes, piece_bytes);
      detail::space_handle const file_space(H5Dget_space(dataset));
      detail::properties_handle const dxpl = detail::independent_transfer();
      static T nothing{};  // a buffer for pieces of no elements
      for (std::size_t k = 0; k < pieces; ++k) {
        interval const piece = detail::piece_rows(k, rows, row_bytes, piece_bytes);
        std::array<hsize_t, Rank> piece_dims = local_dims;
        piece_dims[0] = piece.size();
        detail::space_handle const memory_space(H5Screate_simple(Rank, piece_dims.data(), nullptr));
        if (detail::select_shard(file_space.get(), mesh.shape(), b, global, mesh.rank(), piece) == 0)
          H5Sselect_none(memory_space.get());
        T* const at =
            host.size() > 0 && piece.size() > 0 ? host.data() + piece.begin * (row_bytes / sizeof(T)) : &nothing;
        ok = H5Dread(dataset, type.get(), memory_space.get(), file_space.get(), dxpl.get(), at) >= 0 && ok;
        if (counts && at != &nothing)
          add_to_box_checksums(std::span<T const>(at, piece.size() * (row_bytes / sizeof(T))), mesh.shape(), b, global,
                               mesh.rank(), piece, boxes.grid, sums);
      }
    }
    detail::agree_ok<corrupt_checkpoint_error>(over, ok, "checkpoint: reading the dataset \"" + name + "\" failed");
    if (options_.verify) detail::sum_up(over, sums);
    std::size_t bad = options_.verify ? 0 : sums.size();
    while (bad < sums.size() && sums[bad] == boxes.sums[bad]) ++bad;
    detail::agree_ok<corrupt_checkpoint_error>(over, bad == sums.size(),
                                               "checkpoint: the dataset \"" + name + "\" in " + path_.string() +
                                                   " is corrupt: the box saved by rank " + std::to_string(bad) +
                                                   " of " + std::string(to_string(boxes.grid.mesh).view()) +
                                                   " does not match its checksum");
    Kokkos::deep_copy(local, host);
    if (partial) redistribute(tensor::adopt(mesh, values, global, local), x);
  }

  device_mesh mesh_;
  std::filesystem::path path_;
  read_options options_;
  detail::file_descriptor fd_;  // the version of the file HDF5 reads, for mapping
  detail::file_handle file_;
  std::map<std::string, detail::run_value> values_;
};

}  // namespace shardmesh::io
