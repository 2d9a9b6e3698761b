#pragma once
// Many blocks copied between one flat buffer and their own places in one
// kernel: a gradient bucket's pack and unpack, a fused gather's. One
// launch per buffer, not one deep copy per member (on a GPU, each is a
// launch of its own). A block's place holds elements of Wide or of Narrow
// (a gradient kept in float or in the model's type); values convert where
// the buffer's type differs, through the wider type of the two.
//
//   block_copy<float, bf16, Space> blocks;
//   blocks.add(at, size, wide_pointer, nullptr);   // buffer[at, at + size)
//   blocks.pack(exec, buffer);                     // buffer <- places
//   blocks.unpack(exec, buffer);                   // places <- buffer
//
// The places' memory must stay allocated until the kernel is done (fence
// exec first where an owner may free it).

#include "shardmesh/comm/memory_kind.hpp"
#include "shardmesh/comm/reduced_precision.hpp"

#include <Kokkos_Core.hpp>

#include <algorithm>
#include <cstddef>
#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

namespace shardmesh::parallel::detail {

// x as To, through the wider of the two types where they differ (float for 16 bits).
template <class To, class From>
KOKKOS_INLINE_FUNCTION To block_element(From x) {
  if constexpr (std::is_same_v<To, From>)
    return x;
  else if constexpr (sizeof(To) > sizeof(From))
    return static_cast<To>(static_cast<accumulation_t<From>>(x));
  else
    return static_cast<To>(static_cast<accumulation_t<To>>(x));
}

template <class Wide, class Narrow, class MemorySpace>
class block_copy {
 public:
  using exec_type = execution_space_of<MemorySpace>;

  struct block {
    std::size_t at = 0, size = 0;  // the buffer's elements [at, at + size)
    Wide* wide = nullptr;          // the place: one of these two
    Narrow* narrow = nullptr;
  };

  void clear() { blocks_.clear(); }
  void add(std::size_t at, std::size_t size, Wide* wide, Narrow* narrow) {
    if (size > 0) blocks_.push_back({at, size, wide, narrow});
  }

  template <class Buffer>
  void pack(exec_type const& exec, Kokkos::View<Buffer*, MemorySpace> const& buffer) {
    if (auto const table = upload(exec); table.size() > 0)
      for_each_element(
          exec, "shardmesh::pack_blocks", table, KOKKOS_LAMBDA(block const& b, std::size_t j) {
            buffer(b.at + j) = b.wide ? block_element<Buffer>(b.wide[j]) : block_element<Buffer>(b.narrow[j]);
          });
  }
  template <class Buffer>
  void unpack(exec_type const& exec, Kokkos::View<Buffer*, MemorySpace> const& buffer) {
    if (auto const table = upload(exec); table.size() > 0)
      for_each_element(
          exec, "shardmesh::unpack_blocks", table, KOKKOS_LAMBDA(block const& b, std::size_t j) {
            if (b.wide)
              b.wide[j] = block_element<Wide>(buffer(b.at + j));
            else
              b.narrow[j] = block_element<Narrow>(buffer(b.at + j));
          });
  }

  using table_view = Kokkos::View<block const*, Kokkos::SharedHostPinnedSpace>;

  // element(b, j) for every element j of every block b: one team per block.
  template <class Element>
  static void for_each_element(exec_type const& exec, char const* name, table_view const& table,
                               Element const& element) {
    using policy = Kokkos::TeamPolicy<exec_type>;
    Kokkos::parallel_for(
        name, policy(exec, static_cast<int>(table.size()), Kokkos::AUTO),
        KOKKOS_LAMBDA(typename policy::member_type const& team) {
          block const b = table(team.league_rank());
          Kokkos::parallel_for(Kokkos::TeamThreadRange(team, b.size), [&](std::size_t j) { element(b, j); });
        });
  }

 private:
  // The blocks where the kernel reads them: host memory the device reads
  // (pinned on a GPU), so no copy; rewritten only once the last kernel
  // that read it is done.
  table_view upload(exec_type const& exec) {
    if (last_) last_->fence("shardmesh::block_copy: the table's last reader");
    if (table_.extent(0) < blocks_.size())
      table_ = Kokkos::View<block*, Kokkos::SharedHostPinnedSpace>(
          Kokkos::view_alloc("shardmesh::block_table", Kokkos::WithoutInitializing), blocks_.size());
    std::copy(blocks_.begin(), blocks_.end(), table_.data());
    last_ = exec;
    return Kokkos::subview(table_, std::pair(std::size_t{0}, blocks_.size()));
  }

  std::vector<block> blocks_;
  Kokkos::View<block*, Kokkos::SharedHostPinnedSpace> table_;
  std::optional<exec_type> last_;
};

}  // namespace shardmesh::parallel::detail
