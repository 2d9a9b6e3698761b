// The pack kernel against a serial walk of the same index lists: for every
// pair of layouts of small matrices (block and cyclic) on meshes of 4, every
// pair of ranks, and each way of addressing the two sides, every kernel form
// (a range of segments, used on the host, with or without streaming stores;
// a team per segment, used on devices) must copy every element where the
// lists say. Long rows cut into several segments are included. Then the
// streaming copy alone at every alignment, and the MPI datatypes of the
// same pieces (host memory) against the same walk.
#include "../algebra/layout_enumeration.hpp"
#include "mpi_test.hpp"

#include <shardmesh/tensor/detail/piece_datatypes.hpp>
#include <shardmesh/tensor/detail/pieces.hpp>

#include <catch2/catch_test_macros.hpp>

#include <algorithm>
#include <array>
#include <numeric>
#include <type_traits>
#include <vector>

// Inside a namespace of its own: bundled with other test files into one translation unit.
namespace pieces_test {

using namespace shardmesh;
using namespace shardmesh::detail;

namespace {

using space = Kokkos::DefaultExecutionSpace;
using view = Kokkos::View<double*, space::memory_space>;

// dst after copying the pieces from src, walked on the host.
std::vector<double> serial_transfer(piece_set const& set, std::vector<double> const& src, addressing src_mode,
                                    std::vector<double> dst, addressing dst_mode) {
  for (piece const& p : set.pieces) {
    for (std::size_t e = 0; e < p.count; ++e) {
      std::size_t src_offset = 0;
      std::size_t dst_offset = 0;
      for (std::size_t d = set.rank, k = e; d-- > 0;) {
        std::size_t const i = k % p.box[d];
        k /= p.box[d];
        src_offset += set.src_indices[p.src_list[d] + i] * p.src_stride[d];
        dst_offset += set.dst_indices[p.dst_list[d] + i] * p.dst_stride[d];
      }
      dst[dst_mode == addressing::packed ? p.start + e : dst_offset] =
          src[src_mode == addressing::packed ? p.start + e : src_offset];
    }
  }
  return dst;
}

std::vector<double> on_host(view v) {
  auto const h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace{}, v);
  return {h.data(), h.data() + h.size()};
}

view on_device(std::vector<double> const& v) {
  view out("v", v.size());
  Kokkos::deep_copy(out, Kokkos::View<double const*, Kokkos::HostSpace, Kokkos::MemoryUnmanaged>(v.data(), v.size()));
  return out;
}

// The kernel's forms: a range of segments (the host's), the same with
// streaming stores (the host's out of cache), a team per segment (devices').
enum class form { ranges, streaming, teams };
std::array<form, 3> const forms{form::ranges, form::streaming, form::teams};

void run(form f, segment_copy<double, space::memory_space> const& copy, std::size_t segments) {
  if (f == form::teams) return transfer_in_teams(space{}, copy, segments);
  if constexpr (std::is_same_v<space::memory_space, Kokkos::HostSpace>)
    if (f == form::streaming) return transfer_streaming(space{}, copy, segments);
  transfer_in_ranges(space{}, copy, segments);
}

// Every form of the kernel on the pieces `from` rank q sends `to` rank r, in every addressing.
std::size_t check_pair(mesh_shape const& mesh, layout const& from, layout const& to, tensor_index const& global) {
  bound_layout const before = bind(mesh, from);
  bound_layout const after = bind(mesh, to);
  std::size_t checked = 0;
  for (std::size_t q = 0; q < mesh.size(); ++q) {
    piece_set set;  // rank q's pieces for every rank, one after another
    for (std::size_t r = 0; r < mesh.size(); ++r) set.add(mesh, before, q, after, r, global);
    if (set.total == 0) continue;
    device_pieces<space::memory_space> const uploaded(set, space{});
    std::size_t const src_size = local_size(mesh, before, global, q);
    for (std::size_t r = 0; r < mesh.size(); ++r) {
      piece_set one;  // rank q's pieces for rank r alone, to unpack into r's shard
      one.add(mesh, before, q, after, r, global);
      if (one.total == 0) continue;
      device_pieces<space::memory_space> const unpack(one, space{});
      std::vector<double> packed(one.total);
      std::iota(packed.begin(), packed.end(), 1.0);
      std::vector<double> const shard(local_size(mesh, after, global, r), -1.0);
      auto const expected = serial_transfer(one, packed, addressing::packed, shard, addressing::indexed);
      for (form f : forms) {
        view const out = on_device(shard);
        segment_copy<double, space::memory_space> const copy{
            unpack.pieces, unpack.src_indices, unpack.dst_indices, view(on_device(packed)), out, one.rank - 1, true,
            false};
        run(f, copy, unpack.segments);
        REQUIRE(on_host(out) == expected);
      }
    }
    std::vector<double> source(src_size);
    std::iota(source.begin(), source.end(), 1.0);
    auto const expected =
        serial_transfer(set, source, addressing::indexed, std::vector<double>(set.total, -1.0), addressing::packed);
    for (form f : forms) {
      view const out = on_device(std::vector<double>(set.total, -1.0));
      segment_copy<double, space::memory_space> const copy{uploaded.pieces,
                                                           uploaded.src_indices,
                                                           uploaded.dst_indices,
                                                           view(on_device(source)),
                                                           out,
                                                           set.rank - 1,
                                                           false,
                                                           true};
      run(f, copy, uploaded.segments);
      REQUIRE(on_host(out) == expected);
      ++checked;
    }
  }
  return checked;
}

std::array<mesh_shape, 2> const meshes_of_4{mesh_shape{{"a", 4}}, mesh_shape{{"a", 2}, {"b", 2}}};

// The sum of check(mesh, from, to, global) over every pair of layouts of
// small matrices (block and cyclic) on meshes of 4.
template <class Check>
std::size_t over_matrix_layouts(Check check) {
  std::size_t checked = 0;
  for (mesh_shape const& mesh : meshes_of_4) {
    auto const layouts = test::all_layouts(mesh, 2, {.partial = {}, .cyclic = {1, 3}});
    for (layout const& from : layouts)
      for (layout const& to : layouts)
        for (tensor_index const& global : {tensor_index{6, 10}, tensor_index{7, 5}}) {
          INFO(to_string(from).view() << " -> " << to_string(to).view());
          checked += check(mesh, from, to, global);
        }
  }
  return checked;
}

}  // namespace

TEST_CASE("every form of the pack kernel copies what the index lists say", "[tensor][pieces]") {
  std::size_t checked = over_matrix_layouts(check_pair);
  for (mesh_shape const& mesh : meshes_of_4) {
    // Rows longer than a segment.
    layout const rows{shard("a"), replicated};
    layout const cols{replicated, cyclic(3, "a")};
    checked += check_pair(mesh, rows, cols, tensor_index{3, 2 * segment_length + 5});
    checked += check_pair(mesh, cols, rows, tensor_index{3, 2 * segment_length + 5});
  }
  CHECK(checked > 0);
}

// Streaming stores write whole aligned lines: every alignment of either
// side, lengths around one and several lines, must copy exactly its bytes.
TEST_CASE("a streaming copy copies its bytes and nothing else, at every alignment", "[tensor][pieces]") {
  constexpr std::size_t most = 5 * cache_line + 7;
  std::vector<unsigned char> from(most + 2 * cache_line);
  std::iota(from.begin(), from.end(), static_cast<unsigned char>(1));
  alignas(cache_line) std::array<unsigned char, most + 3 * cache_line> to{};
  for (std::size_t to_at = 0; to_at < cache_line; ++to_at)
    for (std::size_t from_at : {std::size_t{0}, std::size_t{3}, cache_line - 1})
      for (std::size_t bytes = 0; bytes <= most; ++bytes) {
        to.fill(0);
        stream_copy(to.data() + to_at, from.data() + from_at, bytes);
        stream_fence();
        auto expected = decltype(to){};
        std::copy_n(from.begin() + static_cast<std::ptrdiff_t>(from_at), bytes, expected.begin() + to_at);
        REQUIRE(to == expected);
      }
}

namespace {

// What MPI reads or writes through piece 0's datatype on one side: packs
// `shard` by it, or unpacks `packed` into `shard` by it.
std::vector<double> through_datatype(piece_set const& one, bool source, std::vector<double> const& data,
                                     std::vector<double> shard) {
  mpi_datatype const type = piece_datatype(one, 0, source, sizeof(double));
  int size = 0;
  MPI_Pack_size(1, type.get(), MPI_COMM_SELF, &size);
  REQUIRE(static_cast<std::size_t>(size) == one.total * sizeof(double));
  std::vector<double> packed = source ? std::vector<double>(one.total) : data;
  int position = 0;
  if (source) {
    MPI_Pack(data.data(), 1, type.get(), packed.data(), size, &position, MPI_COMM_SELF);
    return packed;
  }
  MPI_Unpack(packed.data(), size, &position, shard.data(), 1, type.get(), MPI_COMM_SELF);
  return shard;
}

// Every piece `from` rank q sends `to` rank r: its datatype on each side
// against the serial walk of its index lists.
std::size_t check_datatypes(mesh_shape const& mesh, layout const& from, layout const& to, tensor_index const& global) {
  bound_layout const before = bind(mesh, from);
  bound_layout const after = bind(mesh, to);
  std::size_t checked = 0;
  for (std::size_t q = 0; q < mesh.size(); ++q)
    for (std::size_t r = 0; r < mesh.size(); ++r) {
      piece_set one;
      one.add(mesh, before, q, after, r, global);
      if (one.total == 0) continue;
      std::vector<double> source(local_size(mesh, before, global, q));
      std::iota(source.begin(), source.end(), 1.0);
      REQUIRE(through_datatype(one, true, source, {}) ==
              serial_transfer(one, source, addressing::indexed, std::vector<double>(one.total), addressing::packed));
      std::vector<double> packed(one.total);
      std::iota(packed.begin(), packed.end(), 1.0);
      std::vector<double> const shard(local_size(mesh, after, global, r), -1.0);
      REQUIRE(through_datatype(one, false, packed, shard) ==
              serial_transfer(one, packed, addressing::packed, shard, addressing::indexed));
      ++checked;
    }
  return checked;
}

}  // namespace

TEST_CASE("a piece's MPI datatype lists its elements where the index lists say, in packing order", "[tensor][pieces]") {
  std::size_t checked = over_matrix_layouts(check_datatypes);
  mesh_shape const grid{{"a", 2}, {"b", 2}};
  auto const layouts = test::all_layouts(grid, 3, {.partial = {}, .cyclic = {2}});
  for (layout const& from : layouts)
    for (layout const& to : layouts) {
      INFO(to_string(from).view() << " -> " << to_string(to).view());
      checked += check_datatypes(grid, from, to, tensor_index{3, 5, 4});
    }
  CHECK(checked > 0);
}

}  // namespace pieces_test
