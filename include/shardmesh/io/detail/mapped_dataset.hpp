#pragma once
// A dataset's bytes mapped read-only from its file, for readers that copy
// their shard straight from the page cache and checksum it in the same pass
// (copy_with_box_checksums): read through HDF5, the shard crosses memory
// twice (into the tensor, then through the checksum) and each piece small
// enough to be checksummed in the cache costs an HDF5 call.
//
// Only a dataset HDF5 stores as one contiguous, unfiltered extent of the
// element type's native representation, at an offset that is a multiple
// of the element's size (HDF5 aligns nothing unless asked: a dataset after
// one of an odd number of bytes may start anywhere), in a file without a
// user block (whose addresses HDF5 counts from its end), and wholly inside
// the file as it is now. Otherwise nothing is mapped and the reader goes
// through H5Dread. The file is mapped through the descriptor the reader
// holds (file_descriptor), never reopened by name: a save that replaces
// the file meanwhile leaves the reader its own version. A file that shrinks while mapped, or a storage error
// while a page is loaded, stops the process (SIGBUS) instead of failing
// as a typed error: read_options{.map = false} avoids both.

#include "shardmesh/io/detail/hdf5.hpp"

#include <hdf5.h>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstddef>
#include <filesystem>
#include <utility>

namespace shardmesh::io::detail {

// A read-only POSIX descriptor of a file, closed when it goes.
class file_descriptor {
 public:
  file_descriptor() = default;
  explicit file_descriptor(std::filesystem::path const& path) : fd_(::open(path.c_str(), O_RDONLY | O_CLOEXEC)) {}
  file_descriptor(file_descriptor&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  file_descriptor& operator=(file_descriptor&& other) noexcept {
    if (this != &other) {
      if (fd_ >= 0) ::close(fd_);
      fd_ = std::exchange(other.fd_, -1);
    }
    return *this;
  }
  file_descriptor(file_descriptor const&) = delete;
  file_descriptor& operator=(file_descriptor const&) = delete;
  ~file_descriptor() {
    if (fd_ >= 0) ::close(fd_);
  }
  [[nodiscard]] int get() const { return fd_; }
  [[nodiscard]] bool valid() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

class mapped_dataset {
 public:
  // `dataset` of `file` (whose bytes `fd` reads), holding `bytes` bytes of
  // elements of `memory_type`.
  mapped_dataset(file_descriptor const& fd, hid_t file, hid_t dataset, hid_t memory_type, std::size_t bytes) {
    haddr_t const offset = bytes > 0 && mappable(file, dataset, memory_type) ? H5Dget_offset(dataset) : HADDR_UNDEF;
    if (!fd.valid() || offset == HADDR_UNDEF || offset % H5Tget_size(memory_type) != 0) return;
    struct stat status{};
    auto const page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
    std::size_t const start = offset / page * page;  // mappings begin on a page
    if (::fstat(fd.get(), &status) == 0 && static_cast<std::size_t>(status.st_size) >= offset + bytes) {
      length_ = offset + bytes - start;
      map_ = ::mmap(nullptr, length_, PROT_READ, MAP_SHARED, fd.get(), static_cast<off_t>(start));
      if (map_ != MAP_FAILED) data_ = static_cast<std::byte const*>(map_) + (offset - start);
    }
  }
  mapped_dataset(mapped_dataset const&) = delete;
  mapped_dataset& operator=(mapped_dataset const&) = delete;
  ~mapped_dataset() {
    if (map_ != MAP_FAILED) ::munmap(map_, length_);
  }

  // The dataset's first byte, or nullptr when it is not mapped.
  [[nodiscard]] std::byte const* data() const { return data_; }

 private:
  static bool mappable(hid_t file, hid_t dataset, hid_t memory_type) {
    properties_handle const creation(H5Dget_create_plist(dataset));
    properties_handle const file_creation(H5Fget_create_plist(file));
    type_handle const stored(H5Dget_type(dataset));
    hsize_t user_block = 1;
    return creation.valid() && file_creation.valid() && stored.valid() &&
           H5Pget_layout(creation.get()) == H5D_CONTIGUOUS && H5Pget_nfilters(creation.get()) == 0 &&
           H5Pget_external_count(creation.get()) == 0 && H5Tequal(stored.get(), memory_type) > 0 &&
           H5Pget_userblock(file_creation.get(), &user_block) >= 0 && user_block == 0;
  }

  void* map_ = MAP_FAILED;
  std::size_t length_ = 0;
  std::byte const* data_ = nullptr;
};

}  // namespace shardmesh::io::detail
