#pragma once
// Writing a checkpoint: dtensors as global arrays in one parallel HDF5
// file that appears under its name only when complete.
//
//   io::checkpoint_writer out(mesh, "run/state.h5");
//   out.write("params/w", w);      // collective over the checkpoint's ranks
//   out.add("stage/b", b);         // b on a submesh (a pipeline stage): queued ...
//   out.flush();                   // ... and written with every rank's queue
//   out.write_value("step", 100);
//   out.commit();                  // only now does run/state.h5 appear
//
// A dataset is the tensor's global array in its element type, with
// attributes: "layout" and "mesh" (what it was saved under, in the
// library's notation), "element_type", and "box_checksums" (one per rank of
// that mesh, io/box_checksum.hpp). A partial tensor is reduced first (by the
// planner's cheapest plan); each box is then written once, by the first
// rank of its replica group, collectively through hyperslab selections.

#include "shardmesh/algebra/notation.hpp"
#include "shardmesh/io/detail/checkpoint_support.hpp"
#include "shardmesh/io/detail/selection.hpp"
#include "shardmesh/tensor/redistribute.hpp"
#include "shardmesh/version.hpp"

#include <hdf5.h>
#include <mpi.h>
#include <Kokkos_Core.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <sstream>
#include <string>
#include <system_error>
#include <type_traits>
#include <vector>

namespace shardmesh::io {

namespace detail {

// Flushes a file's or a folder's data from the page cache to the storage
// (fsync); false if that fails.
[[nodiscard]] inline bool sync_to_storage(std::filesystem::path const& path, bool folder) {
  int const fd = ::open(path.c_str(), O_RDONLY | (folder ? O_DIRECTORY : 0));
  if (fd < 0) return false;
  bool const synced = ::fsync(fd) == 0;
  return ::close(fd) == 0 && synced;
}

// What every rank of the checkpoint learns of a queued dataset.
struct dataset_description {
  std::string name, element, layout, mesh;
  std::vector<std::uint64_t> extents;
  std::size_t boxes = 0;  // ranks of its mesh: one checksum each
  int owner = 0;          // the checkpoint rank of the tensor mesh's rank 0: tells apart tensors of one name

  [[nodiscard]] std::string line() const {
    std::ostringstream out;
    out << name << '\t' << element << '\t' << layout << '\t' << mesh << '\t' << boxes << '\t' << owner << '\t';
    for (std::size_t i = 0; i < extents.size(); ++i) out << (i ? "," : "") << extents[i];
    return out.str();
  }
  static dataset_description parse(std::string const& line) {
    std::istringstream in(line);
    dataset_description d;
    std::string boxes, owner, extents;
    std::getline(in, d.name, '\t');
    std::getline(in, d.element, '\t');
    std::getline(in, d.layout, '\t');
    std::getline(in, d.mesh, '\t');
    std::getline(in, boxes, '\t');
    std::getline(in, owner, '\t');
    std::getline(in, extents, '\t');
    d.boxes = std::stoull(boxes);
    d.owner = std::stoi(owner);
    std::istringstream items(extents);
    for (std::string item; std::getline(items, item, ',');) d.extents.push_back(std::stoull(item));
    return d;
  }
};

// This rank's part of a queued dataset: its shard, written in pieces of rows
// (detail::piece_rows) by the first rank of its replica group.
struct dataset_part {
  dataset_description description;
  std::vector<hsize_t> local_extents;  // of the shard
  bool writes = false;
  std::function<std::size_t(hid_t, interval)> select;             // rows of the shard in the file space
  std::function<void(interval, std::vector<box_sum>&)> checksum;  // adds rows into the box sums
  std::shared_ptr<unsigned char const> data;                      // the shard on the host, until written
};

// Every rank's text, concatenated in rank order, on every rank.
inline std::string all_gathered(MPI_Comm comm, std::string const& mine) {
  int size = 0;
  MPI_Comm_size(comm, &size);
  int const length = static_cast<int>(mine.size());
  std::vector<int> lengths(static_cast<std::size_t>(size)), offsets(static_cast<std::size_t>(size));
  shardmesh::detail::debugged_collective(comm, "checkpoint: gathering names", "i32",
                                         [&] { MPI_Allgather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, comm); });
  int total = 0;
  for (int r = 0; r < size; ++r) {
    offsets[static_cast<std::size_t>(r)] = total;
    total += lengths[static_cast<std::size_t>(r)];
  }
  std::string all(static_cast<std::size_t>(total), '\0');
  shardmesh::detail::debugged_collective(comm, "checkpoint: gathering names", "char", [&] {
    MPI_Allgatherv(mine.data(), length, MPI_CHAR, all.data(), lengths.data(), offsets.data(), MPI_CHAR, comm);
  });
  return all;
}

}  // namespace detail

struct write_options {
  // commit() also flushes the file to the storage before its rename, and
  // the folder after it (fsync), so that a machine losing power keeps
  // either the previous checkpoint or the new one whole. Off by default: it
  // waits for the disk (a crash of the program is covered without it).
  bool durable = false;
  // Asked on rank 0 just before the rename: true abandons the save (the
  // previous checkpoint stays, the temporary file goes) with a
  // checkpoint_error on every rank. An application passes whether its job
  // is being torn down (its launcher gone), so that no save completes after.
  std::function<bool()> abandon = {};
};

class checkpoint_writer {
 public:
  // Collective: creates the temporary file temporary_path(path), replacing
  // one left over from an interrupted save. The file at `path`, if any,
  // stays as it is until commit().
  checkpoint_writer(device_mesh const& mesh, std::filesystem::path path, write_options options = {})
      : mesh_(mesh), path_(std::move(path)), options_(options) {
    detail::quiet_errors const quiet;
    detail::properties_handle const fapl = detail::file_access(mesh_, true);
    file_ = shardmesh::detail::debugged_collective(comm(), "checkpoint: creating the file (HDF5)", "", [&] {
      return detail::file_handle(H5Fcreate(temporary_path(path_).c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.get()));
    });
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
    shardmesh::detail::debugged_collective(comm(), "checkpoint: abandoning a file", "", [&] { MPI_Barrier(comm()); });
  }

  // Collective over the checkpoint's ranks: x (on all of them) as the
  // dataset `name` ("params/w"; groups are created), with anything queued.
  template <class T, std::size_t Rank, class MemorySpace>
  void write(std::string const& name, dynamic_dtensor<T, Rank, MemorySpace> const& x) {
    add(name, x);
    flush();
  }

  // Collective over x's ranks, which may be any of the checkpoint's (a
  // pipeline stage's submesh): queues x as the dataset `name` for the next
  // flush(). Partial tensors are reduced now.
  template <class T, std::size_t Rank, class MemorySpace>
  void add(std::string const& name, dynamic_dtensor<T, Rank, MemorySpace> const& x) {
    static_assert(detail::is_storable_v<T>, "checkpoint: elements are floating-point or integer numbers");
    require_held("checkpoint write", x);
    shardmesh::detail::operation_scope const scope([&] { return "checkpoint write \"" + name + "\" " + x.notation(); });
    MPI_Comm const tensor_comm = x.mesh().comm().get();
    std::string const problem = file_.valid() ? detail::name_problem(name) : "checkpoint: already committed";
    detail::agree_ok(tensor_comm, problem.empty(), problem);
    detail::check_ranks(mesh_, x.mesh(), x.notation() + " (\"" + name + "\")");
    detail::agree_ok<mismatched_tensor_error>(
        tensor_comm, detail::same_everywhere(tensor_comm, detail::tensor_hash(name, x)),
        "checkpoint: ranks disagree on the dataset \"" + name + "\" (its name, layout, element type or extents)");
    layout values = x.layout();
    values.partial_axes = {};
    dynamic_dtensor<T, Rank, MemorySpace> const y = values == x.layout() ? x : redistribute(x, values);
    mesh_shape const shape = y.mesh().shape();
    bound_layout const b = y.bound();
    tensor_index const global = y.global_extents();
    auto const host = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace{}, y.local());
    std::size_t const rank = y.mesh().rank();

    detail::dataset_part part;
    part.description = {name,
                        std::string(element_name<T>()),
                        std::string(to_string(values).view()),
                        std::string(to_string(shape).view()),
                        std::vector<std::uint64_t>(global.begin(), global.begin() + Rank),
                        shape.size(),
                        detail::ranks_within(comm(), tensor_comm).front()};
    for (std::size_t d = 0; d < Rank; ++d) part.local_extents.push_back(host.extent(d));
    part.writes = detail::counts_its_shard(shape, b, rank);  // one writer per replica group
    part.select = [shape, b, global, rank](hid_t space, interval rows) {
      return detail::select_shard(space, shape, b, global, rank, rows);
    };
    std::size_t const row = detail::row_bytes(1, part.local_extents);  // elements
    part.checksum = [host, shape, b, global, rank, row](interval rows, std::vector<box_sum>& sums) {
      std::span<T const> const piece(host.data() + rows.begin * row, rows.size() * row);
      add_to_box_checksums(piece, shape, b, global, rank, rows, box_grid{shape, b}, sums);
    };
    part.data = std::shared_ptr<unsigned char const>(reinterpret_cast<unsigned char const*>(host.data()),
                                                     [keep = host](unsigned char const*) {});
    queued_.push_back(std::move(part));
  }

  // Collective over the checkpoint's ranks: writes every dataset any rank
  // queued, in the order of their names.
  void flush() {
    detail::quiet_errors const quiet;
    detail::agree_ok(comm(), file_.valid(), "checkpoint: " + path_.string() + " is already committed");
    std::string mine;
    for (detail::dataset_part const& p : queued_) mine += p.description.line() + '\n';
    std::map<std::string, detail::dataset_description> all;
    std::string conflict;
    std::istringstream lines(detail::all_gathered(comm(), mine));
    for (std::string line; std::getline(lines, line);) {
      detail::dataset_description d = detail::dataset_description::parse(line);
      auto const [at, added] = all.emplace(d.name, d);
      if (!added && at->second.line() != line) conflict = d.name;
    }
    detail::agree_ok<mismatched_tensor_error>(comm(), conflict.empty(),
                                              "checkpoint: two different tensors were queued as \"" + conflict + "\"");
    // Every dataset created and written, then one reduction of all their
    // box sums and one verdict: a checkpoint of many small tensors pays a
    // few collectives per flush, not a few per tensor.
    std::vector<detail::dataset_handle> datasets;
    std::vector<box_sum> sums;
    std::string failed;  // this rank's first failure
    for (auto const& [name, d] : all) datasets.push_back(create_and_write(d, sums, failed));
    detail::agree_ok(comm(), failed.empty(), failed);
    detail::sum_up(comm(), sums);
    std::size_t first_box = 0;
    auto dataset = datasets.begin();
    for (auto const& [name, d] : all) {
      write_attributes(*dataset++, d, std::span<box_sum const>(sums).subspan(first_box, d.boxes), failed);
      first_box += d.boxes;
    }
    detail::agree_ok(comm(), failed.empty(), failed);
    queued_.clear();
  }

  // Collective: a number the same on every rank (a step count, a seed, a
  // learning rate), stored as a 64-bit signed or unsigned integer or a double.
  template <class V>
    requires std::is_arithmetic_v<V> && (!std::is_same_v<V, bool>)
  void write_value(std::string const& name, V value) {
    if constexpr (std::is_floating_point_v<V>)
      write_run_value(name, static_cast<double>(value));
    else if constexpr (std::is_signed_v<V>)
      write_run_value(name, static_cast<std::int64_t>(value));
    else
      write_run_value(name, static_cast<std::uint64_t>(value));
  }

  // Collective: a text the same on every rank (a configuration).
  void write_text(std::string const& name, std::string const& text) { write_run_value(name, text); }

  // Collective: writes what is queued, closes the file and moves it to its
  // name, replacing the previous checkpoint there. Only after every rank
  // has written and the file is closed does the name change.
  void commit() {
    shardmesh::detail::operation_scope const scope([&] { return "checkpoint commit " + path_.string(); });
    flush();
    detail::quiet_errors const quiet;
    {
      detail::group_handle const root(H5Gopen2(file_.get(), "/", H5P_DEFAULT));
      detail::agree_ok(comm(),
                       detail::write_value_attribute(root.get(), detail::values_checksum_attribute, values_checksum_),
                       "checkpoint: writing the run values' checksum failed");
    }
    bool const closed = shardmesh::detail::debugged_collective(comm(), "checkpoint: closing the file (HDF5)", "",
                                                               [&] { return file_.reset(); });
    detail::agree_ok(comm(), closed, "checkpoint: closing " + temporary_path(path_).string() + " failed");
    // Every rank: on a parallel file system each node flushes what it wrote.
    if (options_.durable)
      detail::agree_ok(comm(), detail::sync_to_storage(temporary_path(path_), false),
                       "checkpoint: cannot flush " + temporary_path(path_).string() + " to the storage");
    bool const abandoned = mesh_.rank() == 0 && options_.abandon && options_.abandon();
    if (abandoned) {
      std::error_code ignored;
      std::filesystem::remove(temporary_path(path_), ignored);
    }
    detail::agree_ok(comm(), !abandoned, "checkpoint: the save to " + path_.string() + " was abandoned");
    std::error_code moved;
    if (mesh_.rank() == 0) std::filesystem::rename(temporary_path(path_), path_, moved);
    detail::agree_ok(comm(), !moved,
                     "checkpoint: cannot rename " + temporary_path(path_).string() + " to " + path_.string() + ": " +
                         moved.message());
    if (options_.durable) {
      std::filesystem::path const folder = path_.has_parent_path() ? path_.parent_path() : ".";
      detail::agree_ok(comm(), mesh_.rank() != 0 || detail::sync_to_storage(folder, true),
                       "checkpoint: cannot flush the folder " + folder.string() + " to the storage");
    }
  }

 private:
  [[nodiscard]] MPI_Comm comm() const { return mesh_.comm().get(); }

  void write_run_value(std::string const& name, detail::run_value const& value) {
    detail::quiet_errors const quiet;
    detail::agree_ok(comm(), file_.valid(), "checkpoint: " + path_.string() + " is already committed");
    std::string const problem = detail::name_problem(name, true);
    detail::agree_ok(comm(), problem.empty(), problem);
    std::uint64_t const digest = detail::value_digest(name, value);
    detail::agree_ok<mismatched_tensor_error>(comm(), detail::same_everywhere(comm(), digest),
                                              "checkpoint: ranks disagree on the value \"" + name + "\"");
    std::string const attribute = std::string(detail::value_prefix) + name;
    detail::group_handle const root(H5Gopen2(file_.get(), "/", H5P_DEFAULT));
    detail::agree_ok(comm(), H5Aexists(root.get(), attribute.c_str()) == 0,
                     "checkpoint: the value \"" + name + "\" is written twice");
    detail::agree_ok(comm(), detail::write_value_attribute(root.get(), attribute, value),
                     "checkpoint: writing the value \"" + name + "\" failed");
    values_checksum_ += digest;
  }

  // Collective: creates the dataset d and writes this rank's part of it (if
  // it holds one), adding its box sums to `sums`; the first failure goes to `failed`.
  detail::dataset_handle create_and_write(detail::dataset_description const& d, std::vector<box_sum>& sums,
                                          std::string& failed) {
    detail::dataset_part const* part = nullptr;
    for (detail::dataset_part const& p : queued_)
      if (p.description.name == d.name) part = &p;
    std::vector<hsize_t> const dims(d.extents.begin(), d.extents.end());
    int const rank = static_cast<int>(dims.size());
    detail::space_handle const file_space(H5Screate_simple(rank, dims.data(), nullptr));
    detail::type_handle const type(detail::type_named(d.element));
    detail::properties_handle const lcpl(H5Pcreate(H5P_LINK_CREATE));
    H5Pset_create_intermediate_group(lcpl.get(), 1);
    detail::properties_handle const dcpl(H5Pcreate(H5P_DATASET_CREATE));
    H5Pset_fill_time(dcpl.get(), H5D_FILL_TIME_NEVER);  // every element is written
    detail::dataset_handle dataset =
        shardmesh::detail::debugged_collective(comm(), "checkpoint: creating a dataset (HDF5)", d.element, [&] {
          return detail::dataset_handle(H5Dcreate2(file_.get(), d.name.c_str(), type.get(), file_space.get(),
                                                   lcpl.get(), dcpl.get(), H5P_DEFAULT));
        });
    std::size_t const first_box = sums.size();
    sums.resize(first_box + d.boxes);
    auto const fail = [&](std::string const& why) {
      if (failed.empty()) failed = why;
    };
    if (!dataset.valid()) {
      fail("checkpoint: cannot create the dataset \"" + d.name + "\"");
      return dataset;
    }
    if (part == nullptr || !part->writes) return dataset;
    // Piece by piece: checksummed, then written while it is in the cache.
    std::vector<box_sum> mine(d.boxes);
    std::vector<hsize_t> local = part->local_extents;
    std::size_t const rows = local[0], row_bytes = detail::row_bytes(H5Tget_size(type.get()), local);
    detail::properties_handle const dxpl = detail::independent_transfer();
    std::size_t const pieces = detail::piece_count(rows, row_bytes, detail::checked_piece_bytes);
    for (std::size_t k = 0; k < pieces; ++k) {
      interval const piece = detail::piece_rows(k, rows, row_bytes, detail::checked_piece_bytes);
      local[0] = piece.size();
      if (row_bytes == 0 || part->select(file_space.get(), piece) == 0) continue;
      detail::space_handle const memory_space(H5Screate_simple(rank, local.data(), nullptr));
      part->checksum(piece, mine);
      if (H5Dwrite(dataset.get(), type.get(), memory_space.get(), file_space.get(), dxpl.get(),
                   part->data.get() + piece.begin * row_bytes) < 0)
        fail("checkpoint: writing the dataset \"" + d.name + "\" failed");
    }
    std::copy(mine.begin(), mine.end(), sums.begin() + static_cast<std::ptrdiff_t>(first_box));
    return dataset;
  }

  // Collective: d's attributes, its box sums reduced over the ranks.
  static void write_attributes(detail::dataset_handle const& dataset, detail::dataset_description const& d,
                               std::span<box_sum const> sums, std::string& failed) {
    detail::write_text_attribute(dataset.get(), "layout", d.layout);
    detail::write_text_attribute(dataset.get(), "mesh", d.mesh);
    detail::write_text_attribute(dataset.get(), "element_type", d.element);
    hsize_t const boxes[2] = {sums.size(), 2};  // per box: words, weighted
    detail::space_handle const sums_space(H5Screate_simple(2, boxes, nullptr));
    detail::attribute_handle const a(
        H5Acreate2(dataset.get(), "box_checksums", H5T_STD_U64LE, sums_space.get(), H5P_DEFAULT, H5P_DEFAULT));
    if (H5Awrite(a.get(), H5T_NATIVE_UINT64, sums.data()) < 0 && failed.empty())
      failed = "checkpoint: writing the attributes of \"" + d.name + "\" failed";
  }

  device_mesh mesh_;
  std::filesystem::path path_;
  write_options options_;
  detail::file_handle file_;
  std::vector<detail::dataset_part> queued_;
  std::uint64_t values_checksum_ = 0;  // the sum of the values' digests
};

}  // namespace shardmesh::io
