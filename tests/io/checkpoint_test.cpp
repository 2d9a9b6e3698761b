// Checkpoints against the global array they were made from: saved under one
// layout, mesh and rank count, loaded under another, gathered, compared
// element by element; and every way a checkpoint can be wrong, caught.
#include "../tensor/redistribution_check.hpp"
#include "scratch_dir.hpp"

#include <shardmesh/io/checkpoint.hpp>

#include <catch2/catch_test_macros.hpp>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <numeric>
#include <vector>

using namespace shardmesh;

namespace {

using matrix = Kokkos::View<double**, Kokkos::LayoutRight, Kokkos::HostSpace>;

matrix numbered(tensor_index const& e, double first = 1.0) {
  matrix m("global", e[0], e[1]);
  std::iota(m.data(), m.data() + m.size(), first);
  return m;
}

bool equal(matrix const& a, matrix const& b) {
  return a.extent(0) == b.extent(0) && a.extent(1) == b.extent(1) &&
         std::equal(a.data(), a.data() + a.size(), b.data());
}

// The layouts of the exhaustive redistribution tests.
std::vector<layout> matrix_layouts(mesh_shape const& shape) {
  return test::all_layouts(shape, 2, {.partial = {reduce_op::sum}, .cyclic = {2}});
}

std::string dataset(std::size_t layout_index, std::size_t extents_index) {
  return "layout" + std::to_string(layout_index) + "/extents" + std::to_string(extents_index);
}

// Saves every matrix layout of mesh at every test extent into path.
void save_all(device_mesh const& mesh, std::filesystem::path const& path) {
  auto const extents = test::extents_for<2>(static_cast<std::size_t>(test::world_size()));
  io::checkpoint_writer out(mesh, path);
  auto const layouts = matrix_layouts(mesh.shape());
  for (std::size_t f = 0; f < layouts.size(); ++f)
    for (std::size_t k = 0; k < extents.size(); ++k)
      out.write(dataset(f, k), distribute(mesh, layouts[f], numbered(extents[k])));
  out.write_value("layouts", static_cast<std::int64_t>(layouts.size()));
  out.commit();
}

// Loads every dataset of path under every `stride`-th layout of mesh and
// checks it against the array it was made from. Returns the loads checked.
std::size_t load_all(device_mesh const& mesh, std::filesystem::path const& path, std::size_t stride) {
  auto const extents = test::extents_for<2>(static_cast<std::size_t>(test::world_size()));
  io::checkpoint_reader in(mesh, path);
  auto const layouts = matrix_layouts(mesh.shape());
  std::size_t const saved = static_cast<std::size_t>(in.value("layouts"));
  std::size_t checked = 0, index = 0;
  for (std::size_t f = 0; f < saved; ++f)
    for (std::size_t k = 0; k < extents.size(); ++k)
      for (layout const& to : layouts) {
        if (index++ % stride != 0) continue;
        INFO(path.filename().string() << " " << dataset(f, k) << " as " << to_string(to).view() << " on "
                                      << to_string(mesh.shape()).view());
        auto const y = in.read<double, 2>(dataset(f, k), to);
        REQUIRE(y.layout() == to);
        REQUIRE(equal(gather(y), numbered(extents[k])));
        ++checked;
      }
  return checked;
}

// A communicator of the first `ranks` ranks of the world (MPI_COMM_NULL on the others).
MPI_Comm first_ranks(int ranks) {
  MPI_Comm sub = MPI_COMM_NULL;
  MPI_Comm_split(MPI_COMM_WORLD, test::world_rank() < ranks ? 0 : MPI_UNDEFINED, test::world_rank(), &sub);
  return sub;
}

// Every rank throws an Error (the same on every rank, or the test would hang).
template <class Error, class F>
void require_throws(F&& f, std::string const& contains) {
  bool thrown = false;
  try {
    f();
  } catch (Error const& e) {
    thrown = true;
    INFO(e.what());
    CHECK(std::string(e.what()).find(contains) != std::string::npos);
  }
  REQUIRE(thrown);
}

}  // namespace

TEST_CASE("every word-sum kernel this processor runs gives the checksum's formula, copying or not", "[io]") {
  // Lengths across the kernels' lanes (16) and blocks (256 steps of 16
  // words), and around the length from which copies stream their stores
  // (to every alignment of the destination), of words from a generator and
  // of words with every bit set (the largest 32-bit block sums).
  constexpr std::size_t streamed = io::detail::stream_words;
  std::vector<std::uint32_t> words(streamed + 3 * 4096 + 40);
  std::uint64_t state = 7;
  for (std::uint32_t& w : words) w = static_cast<std::uint32_t>((state = state * 6364136223846793005U + 1) >> 32);
  std::vector<std::uint32_t> const ones(words.size(), 0xFFFFFFFFU);
  std::vector<std::size_t> lengths;
  for (std::size_t n = 0; n < 40; ++n) lengths.push_back(n);
  for (std::size_t n :
       {std::size_t{4095}, std::size_t{4096}, std::size_t{4097}, std::size_t{4111}, std::size_t{8192},
        std::size_t{8209}, 3 * std::size_t{4096} + 39, streamed - 1, streamed, streamed + 17, streamed + 3 * 4096 + 39})
    lengths.push_back(n);
  for (io::detail::word_sums_kernel const kernel : io::detail::word_sums_kernels())
    for (std::vector<std::uint32_t> const* data : std::array<std::vector<std::uint32_t> const*, 2>{&words, &ones})
      for (std::size_t const n : lengths) {
        io::box_sum expected;
        for (std::size_t i = 0; i < n; ++i) {
          expected.words += (*data)[i];
          expected.weighted += i * std::uint64_t{(*data)[i]};
        }
        CAPTURE(n, data == &ones);
        CHECK(kernel(data->data(), nullptr, n) == expected);
        // Copying as it adds: the same sums, and the words where they go,
        // none before or after them.
        for (std::size_t offset = 0; offset <= (n + 1 >= streamed ? 16 : 1); ++offset) {
          CAPTURE(offset);
          std::vector<std::uint32_t> copy(offset + n + 1, 0);
          CHECK(kernel(data->data(), copy.data() + offset, n) == expected);
          CHECK(std::equal(data->begin(), data->begin() + static_cast<std::ptrdiff_t>(n),
                           copy.begin() + static_cast<std::ptrdiff_t>(offset)));
          CHECK(std::all_of(copy.begin(), copy.begin() + static_cast<std::ptrdiff_t>(offset),
                            [](std::uint32_t w) { return w == 0; }));
          CHECK(copy.back() == 0);
        }
      }
}

TEST_CASE("every layout pair of a matrix survives a checkpoint on 1-D and 2-D meshes", "[io]") {
  test::scratch_dir const dir("shardmesh-io-pairs");
  std::size_t const ranks = static_cast<std::size_t>(test::world_size());
  auto const meshes = test::meshes_of(ranks);
  for (std::size_t i = 0; i < meshes.size(); ++i)
    save_all(device_mesh(MPI_COMM_WORLD, meshes[i]), dir / ("m" + std::to_string(i) + ".h5"));
  std::size_t checked = 0;
  // Every pair on the mesh it was saved on; a sample of pairs across meshes.
  for (std::size_t i = 0; i < meshes.size(); ++i)
    for (std::size_t j = 0; j < meshes.size(); ++j)
      checked +=
          load_all(device_mesh(MPI_COMM_WORLD, meshes[j]), dir / ("m" + std::to_string(i) + ".h5"), i == j ? 1 : 11);
  if (test::world_rank() == 0) std::printf("%zu checkpoint loads checked on %zu ranks\n", checked, ranks);
  CHECK(checked > 0);
}

TEST_CASE("a checkpoint saved on fewer ranks loads on more, and back", "[io]") {
  test::scratch_dir const dir("shardmesh-io-ranks");
  int const ranks = test::world_size();
  device_mesh const world(MPI_COMM_WORLD, mesh_shape{{"a", static_cast<std::size_t>(ranks)}});
  for (int fewer = 1; fewer < ranks; ++fewer) {
    std::filesystem::path const small = dir / ("on" + std::to_string(fewer) + ".h5");
    std::filesystem::path const large = dir / ("from" + std::to_string(fewer) + ".h5");
    MPI_Comm const sub = first_ranks(fewer);
    if (sub != MPI_COMM_NULL) {
      device_mesh const mesh(sub, mesh_shape{{"a", static_cast<std::size_t>(fewer)}});
      save_all(mesh, small);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    CHECK(load_all(world, small, 5) > 0);
    save_all(world, large);
    if (sub != MPI_COMM_NULL) {
      device_mesh const mesh(sub, mesh_shape{{"a", static_cast<std::size_t>(fewer)}});
      CHECK(load_all(mesh, large, 5) > 0);
      MPI_Comm copy = sub;
      MPI_Comm_free(&copy);
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }
}

TEST_CASE("a durable save is flushed to the storage and committed like any other", "[io]") {
  test::scratch_dir const dir("shardmesh-io-durable");
  std::size_t const ranks = static_cast<std::size_t>(test::world_size());
  device_mesh const mesh(MPI_COMM_WORLD, mesh_shape{{"a", ranks}});
  for (std::filesystem::path const& path : {dir / "state.h5", dir / "deeper" / "state.h5"}) {
    if (test::world_rank() == 0) std::filesystem::create_directories(path.parent_path());
    MPI_Barrier(MPI_COMM_WORLD);
    {
      io::checkpoint_writer out(mesh, path, {.durable = true});
      out.write("m", distribute(mesh, layout{shard("a"), replicated}, numbered({ranks + 3, 5})));
      out.commit();
    }
    CHECK_FALSE(std::filesystem::exists(io::temporary_path(path)));
    CHECK(equal(gather(io::checkpoint_reader(mesh, path).read<double, 2>("m", layout{replicated, shard("a")})),
                numbered({ranks + 3, 5})));
  }
}

TEST_CASE("values, element types and a tensor read into an existing one", "[io]") {
  test::scratch_dir const dir("shardmesh-io-values");
  std::size_t const ranks = static_cast<std::size_t>(test::world_size());
  device_mesh const mesh(MPI_COMM_WORLD, mesh_shape{{"a", ranks}});
  Kokkos::View<float*, Kokkos::HostSpace> v("v", 2 * ranks + 1);
  Kokkos::View<std::int64_t***, Kokkos::LayoutRight, Kokkos::HostSpace> c("c", 3, ranks + 2, 2);
  for (std::size_t i = 0; i < v.size(); ++i) v.data()[i] = 0.5f * static_cast<float>(i) - 3.0f;
  for (std::size_t i = 0; i < c.size(); ++i) c.data()[i] = static_cast<std::int64_t>(i * i) - 40;
  {
    io::checkpoint_writer out(mesh, dir / "state.h5");
    out.write("v", distribute(mesh, layout{cyclic(2, "a")}, v));
    out.write("deep/group/c", distribute(mesh, layout{replicated, shard("a"), replicated}, c));
    out.write_value("step", -12345678901234);
    out.write_text("config", "{\"layers\": 2}");
    out.commit();
  }
  io::checkpoint_reader const in(mesh, dir / "state.h5");
  CHECK(in.contains("v"));
  CHECK(in.contains("deep/group/c"));
  CHECK_FALSE(in.contains("deep/c"));
  CHECK(in.value("step") == -12345678901234);
  CHECK(in.text("config") == "{\"layers\": 2}");
  auto into = distribute(mesh, layout{shard("a")}, Kokkos::View<float*, Kokkos::HostSpace>("zero", v.size()));
  in.read("v", into);
  auto const back = gather(into);
  CHECK(std::equal(back.data(), back.data() + back.size(), v.data()));
  auto const deep = gather(in.read<std::int64_t, 3>("deep/group/c", layout{shard("a"), replicated, replicated}));
  CHECK(std::equal(deep.data(), deep.data() + deep.size(), c.data()));
}

namespace {

// On rank 0 only, with no other rank: HDF5 without MPI-IO.
void on_rank_zero(auto&& f) {
  if (test::world_rank() == 0) f();
  MPI_Barrier(MPI_COMM_WORLD);
}

// The file offset of a contiguous dataset's first element.
std::size_t data_offset(std::filesystem::path const& path, char const* name) {
  hid_t const file = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  hid_t const set = H5Dopen2(file, name, H5P_DEFAULT);
  haddr_t const offset = H5Dget_offset(set);
  H5Dclose(set);
  H5Fclose(file);
  return static_cast<std::size_t>(offset);
}

}  // namespace

TEST_CASE("numbers are stored as numbers and every run value is covered by a checksum", "[io]") {
  test::scratch_dir const dir("shardmesh-io-run-values");
  device_mesh const mesh(MPI_COMM_WORLD, mesh_shape{{"a", dynamic_extent}});
  std::filesystem::path const path = dir / "state.h5";
  {
    io::checkpoint_writer out(mesh, path);
    out.write_value("step", 4);
    out.write_value("seed", std::uint64_t{18446744073709551557ULL});
    out.write_value("lr", 0.003);
    out.write_text("configuration", "lr=0.003");
    require_throws<checkpoint_error>([&] { out.write_value("step", 5); }, "the value \"step\" is written twice");
    out.commit();
  }
  {
    io::checkpoint_reader const in(mesh, path);
    CHECK(in.value("step") == 4);
    CHECK(in.value<std::uint64_t>("seed") == 18446744073709551557ULL);
    CHECK(in.value<double>("lr") == 0.003);
    CHECK(in.text("configuration") == "lr=0.003");
    require_throws<checkpoint_mismatch_error>([&] { (void)in.value<double>("step"); },
                                              "the value \"step\" is a signed integer, not a number");
    require_throws<checkpoint_mismatch_error>([&] { (void)in.text("lr"); }, "is a number, not a text");
  }
  // Each value changed after the save, as a flipped bit or an edit would: refused on opening, on every rank.
  auto const edited = [&](char const* attribute, auto const& write) {
    std::filesystem::path const copy = dir / "edited.h5";
    on_rank_zero([&] {
      std::filesystem::copy_file(path, copy, std::filesystem::copy_options::overwrite_existing);
      hid_t const file = H5Fopen(copy.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
      hid_t const a = H5Aopen_by_name(file, "/", attribute, H5P_DEFAULT, H5P_DEFAULT);
      write(a);
      H5Aclose(a);
      H5Fclose(file);
    });
    INFO(attribute);
    require_throws<corrupt_checkpoint_error>([&] { io::checkpoint_reader(mesh, copy); }, "do not match their checksum");
  };
  edited("value:step", [](hid_t a) {
    std::int64_t const one = 1;
    H5Awrite(a, H5T_NATIVE_INT64, &one);
  });
  edited("value:seed", [](hid_t a) {
    std::uint64_t const other = 18446744073709551556ULL;
    H5Awrite(a, H5T_NATIVE_UINT64, &other);
  });
  edited("value:lr", [](hid_t a) {
    double const other = 0.007;
    H5Awrite(a, H5T_NATIVE_DOUBLE, &other);
  });
  edited("value:configuration", [](hid_t a) {
    hid_t const type = H5Aget_type(a);
    H5Awrite(a, type, "lr=0.007");
    H5Tclose(type);
  });
}

TEST_CASE("a reader keeps the version it opened while a save renames another over it", "[io]") {
  test::scratch_dir const dir("shardmesh-io-replaced");
  device_mesh const mesh(MPI_COMM_WORLD, mesh_shape{{"a", dynamic_extent}});
  layout const rows{shard("a"), replicated};
  std::filesystem::path const path = dir / "state.h5", next = dir / "next.h5";
  tensor_index const extents{40, 6};
  auto const save = [&](std::filesystem::path const& to, double first, std::int64_t step) {
    io::checkpoint_writer out(mesh, to);
    out.write("m", distribute(mesh, rows, numbered(extents, first)));
    out.write("n", distribute(mesh, layout{replicated, replicated}, numbered(extents, 2 * first)));
    out.write_value("step", step);
    out.commit();
  };
  for (bool map : {true, false}) {
    INFO((map ? "mapped" : "through HDF5"));
    save(path, 1, 1);
    save(next, 1000, 2);
    io::checkpoint_reader const in(mesh, path, {.map = map});
    on_rank_zero([&] { std::filesystem::rename(next, path); });  // a save committing meanwhile
    CHECK(equal(gather(in.read<double, 2>("m", rows)), numbered(extents, 1)));
    CHECK(equal(gather(in.read<double, 2>("n", layout{shard("a"), replicated})), numbered(extents, 2)));
    CHECK(in.value("step") == 1);
    io::checkpoint_reader const after(mesh, path, {.map = map});  // opened after the rename: the new version
    CHECK(equal(gather(after.read<double, 2>("m", rows)), numbered(extents, 1000)));
    CHECK(after.value("step") == 2);
  }
}

TEST_CASE("shards of several pieces are moved, checksummed and checked piece by piece", "[io]") {
  // Rows of 40 x 30 doubles (9600 bytes): a shard of whole rows is at least
  // two checksummed pieces, and its trailing dimensions join each run. Read
  // both ways: copied from the mapped file, and through HDF5.
  test::scratch_dir const dir("shardmesh-io-pieces");
  std::size_t const ranks = static_cast<std::size_t>(test::world_size());
  device_mesh const mesh(MPI_COMM_WORLD, mesh_shape{{"a", ranks}});
  tensor_index const extents{ranks * 150 + 7, 40, 30};
  REQUIRE(150 * 40 * 30 * sizeof(double) > io::detail::checked_piece_bytes);
  Kokkos::View<double***, Kokkos::LayoutRight, Kokkos::HostSpace> values("values", extents[0], extents[1], extents[2]);
  std::iota(values.data(), values.data() + values.size(), -1000.25);
  std::vector<layout> const layouts{
      layout{shard("a"), replicated, replicated}, layout{replicated, shard("a"), replicated},
      layout{replicated, replicated, cyclic(2, "a")}, layout{cyclic(3, "a"), replicated, replicated}};
  auto const equals_values = [&](auto const& x) {
    auto const back = gather(x);
    return std::equal(back.data(), back.data() + back.size(), values.data());
  };
  for (std::size_t f = 0; f < layouts.size(); ++f) {
    INFO("saved as " << to_string(layouts[f]).view());
    std::filesystem::path const path = dir / ("saved" + std::to_string(f) + ".h5");
    {
      io::checkpoint_writer out(mesh, path);
      out.write("x", distribute(mesh, layouts[f], values));
      out.commit();
    }
    for (layout const& to : layouts)
      for (bool const map : {true, false}) {
        INFO("read as " << to_string(to).view() << (map ? ", mapped" : ", through HDF5"));
        CHECK(equals_values(io::checkpoint_reader(mesh, path, {.map = map}).read<double, 3>("x", to)));
        CHECK(equals_values(io::checkpoint_reader(mesh, path, {.verify = false, .map = map}).read<double, 3>("x", to)));
      }
  }
  // A byte changed in the last row, past the first piece of any shard.
  std::filesystem::path const path = dir / "saved0.h5";
  on_rank_zero([&] {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    std::size_t const at = data_offset(path, "x") + (values.size() - 5) * sizeof(double) + 6;
    f.seekg(static_cast<std::streamoff>(at));
    char byte = 0;
    f.get(byte);
    f.seekp(static_cast<std::streamoff>(at));
    f.put(static_cast<char>(byte ^ 0x01));
  });
  for (layout const& to : layouts)
    for (bool const map : {true, false})
      require_throws<corrupt_checkpoint_error>(
          [&] { (void)io::checkpoint_reader(mesh, path, {.map = map}).read<double, 3>("x", to); },
          "the box saved by rank " + std::to_string(ranks - 1));
}

// The reader copies a dataset it can map from the file; any other goes
// through HDF5 (the test above reads both ways).
TEST_CASE("a dataset is mapped only where its bytes lie as in memory", "[io]") {
  test::scratch_dir const dir("shardmesh-io-mapped");
  device_mesh const mesh(MPI_COMM_WORLD, mesh_shape{{"a", dynamic_extent}});
  matrix const values = numbered({7, 3});
  std::size_t const bytes = values.size() * sizeof(double);
  std::filesystem::path const path = dir / "m.h5";
  {
    io::checkpoint_writer out(mesh, path);
    out.write("m", distribute(mesh, layout{shard("a"), replicated}, values));
    out.commit();
  }
  on_rank_zero([&] {
    hid_t const file = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    hid_t const set = H5Dopen2(file, "m", H5P_DEFAULT);
    io::detail::file_descriptor const fd(path);
    {
      io::detail::mapped_dataset const mapped(fd, file, set, H5T_NATIVE_DOUBLE, bytes);
      CHECK(mapped.data() != nullptr);  // CHECK, not REQUIRE: the other ranks wait at the barrier
      CHECK((mapped.data() != nullptr && std::memcmp(mapped.data(), values.data(), bytes) == 0));
    }
    // Another element type, or more bytes than the file holds past the offset.
    CHECK(io::detail::mapped_dataset(fd, file, set, H5T_NATIVE_INT64, bytes).data() == nullptr);
    CHECK(io::detail::mapped_dataset(fd, file, set, H5T_NATIVE_DOUBLE, std::filesystem::file_size(path)).data() ==
          nullptr);
    H5Dclose(set);
    H5Fclose(file);

    // An extent at an offset that is no multiple of the element's size
    // (HDF5 places raw data wherever there is room: here after 3 bytes).
    std::filesystem::path const odd = dir / "odd.h5";
    hid_t const o = H5Fcreate(odd.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    std::array<hsize_t, 1> const three{3};
    std::array<std::int8_t, 3> const bytes3{1, 2, 3};
    hid_t const small = H5Screate_simple(1, three.data(), nullptr);
    hid_t const first = H5Dcreate2(o, "first", H5T_NATIVE_INT8, small, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5Dwrite(first, H5T_NATIVE_INT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, bytes3.data());
    std::array<hsize_t, 2> const matrix_dims{7, 3};
    hid_t const matrix_space = H5Screate_simple(2, matrix_dims.data(), nullptr);
    hid_t const second = H5Dcreate2(o, "m", H5T_NATIVE_DOUBLE, matrix_space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5Dwrite(second, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data());
    H5Fflush(o, H5F_SCOPE_GLOBAL);
    haddr_t const at = H5Dget_offset(second);
    io::detail::mapped_dataset const unaligned(io::detail::file_descriptor(odd), o, second, H5T_NATIVE_DOUBLE, bytes);
    CHECK((unaligned.data() == nullptr) == (at % sizeof(double) != 0));
    CHECK((unaligned.data() == nullptr || std::memcmp(unaligned.data(), values.data(), bytes) == 0));
    H5Dclose(second);
    H5Dclose(first);
    H5Sclose(matrix_space);
    H5Sclose(small);
    H5Fclose(o);

    // Chunked storage has no single extent to map.
    std::filesystem::path const chunked = dir / "chunked.h5";
    hid_t const out = H5Fcreate(chunked.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    std::array<hsize_t, 2> const dims{7, 3}, chunk{2, 3};
    hid_t const space = H5Screate_simple(2, dims.data(), nullptr);
    hid_t const creation = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_chunk(creation, 2, chunk.data());
    hid_t const c = H5Dcreate2(out, "m", H5T_NATIVE_DOUBLE, space, H5P_DEFAULT, creation, H5P_DEFAULT);
    H5Dwrite(c, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data());
    CHECK(io::detail::mapped_dataset(io::detail::file_descriptor(chunked), out, c, H5T_NATIVE_DOUBLE, bytes).data() ==
          nullptr);
    H5Dclose(c);
    H5Pclose(creation);
    H5Sclose(space);
    H5Fclose(out);
  });
}

TEST_CASE("a bad checkpoint or a bad request is the same typed error on every rank", "[io]") {
  test::scratch_dir const dir("shardmesh-io-errors");
  std::size_t const ranks = static_cast<std::size_t>(test::world_size());
  device_mesh const mesh(MPI_COMM_WORLD, mesh_shape{{"a", ranks}});
  matrix const values = numbered({ranks + 3, 5});
  std::filesystem::path const good = dir / "good.h5";
  {
    io::checkpoint_writer out(mesh, good);
    out.write("m", distribute(mesh, layout{shard("a"), replicated}, values));
    out.commit();
  }
  layout const rows{shard("a"), replicated};

  SECTION("files that are not checkpoints") {
    require_throws<checkpoint_error>([&] { io::checkpoint_reader(mesh, dir / "none.h5"); }, "does not exist");
    on_rank_zero([&] { std::ofstream(dir / "text.h5") << "not HDF5 at all\n"; });
    require_throws<checkpoint_error>([&] { io::checkpoint_reader(mesh, dir / "text.h5"); }, "not a readable HDF5");
    on_rank_zero([&] {
      std::filesystem::copy_file(good, dir / "short.h5");
      std::filesystem::resize_file(dir / "short.h5", std::filesystem::file_size(good) / 2);
    });
    require_throws<checkpoint_error>([&] { io::checkpoint_reader(mesh, dir / "short.h5"); }, "truncated");
    on_rank_zero([&] { H5Fclose(H5Fcreate((dir / "plain.h5").c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT)); });
    require_throws<checkpoint_error>([&] { io::checkpoint_reader(mesh, dir / "plain.h5"); },
                                     "not written by shardmesh");
  }

  SECTION("datasets and values that are not there, or not what is asked for") {
    io::checkpoint_reader const in(mesh, good);
    require_throws<missing_dataset_error>([&] { (void)in.read<double, 2>("w", rows); }, "holds no dataset \"w\"");
    require_throws<missing_dataset_error>([&] { (void)in.read<double, 2>("m/w", rows); }, "holds no dataset \"m/w\"");
    require_throws<missing_dataset_error>([&] { (void)in.value("step"); }, "holds no value \"step\"");
    require_throws<checkpoint_mismatch_error>([&] { (void)in.read<float, 2>("m", rows); }, "holds f64, the tensor f32");
    require_throws<checkpoint_mismatch_error>([&] { (void)in.read<double, 1>("m", layout{shard("a")}); },
                                              "has 2 dimensions, the tensor 1");
    auto other = distribute(mesh, rows, numbered({ranks + 3, 4}));
    require_throws<checkpoint_mismatch_error>([&] { in.read("m", other); },
                                              "is f64[" + std::to_string(ranks + 3) + ",5]");
    require_throws<invalid_layout_error>([&] { (void)in.read<double, 2>("m", layout{shard("x"), replicated}); },
                                         "\"x\"");
    require_throws<checkpoint_error>([&] { (void)in.read<double, 2>("/m", rows); }, "is no dataset name");
    if (ranks > 1)
      require_throws<mismatched_tensor_error>(
          [&] { (void)in.read<double, 2>(test::world_rank() == 0 ? "m" : "n", rows); }, "ranks disagree");
  }

  SECTION("a flipped byte is caught by the checksum of the box that holds it, under any layout") {
    std::size_t const offset = data_offset(good, "m");
    // The element at row 1, column 2: saved by the rank that held row 1.
    on_rank_zero([&] {
      std::fstream f(good, std::ios::in | std::ios::out | std::ios::binary);
      std::size_t const at = offset + (1 * 5 + 2) * sizeof(double) + 3;
      f.seekg(static_cast<std::streamoff>(at));
      char byte = 0;
      f.get(byte);
      f.seekp(static_cast<std::streamoff>(at));
      f.put(static_cast<char>(byte ^ 0x10));
    });
    io::checkpoint_reader const in(mesh, good);
    std::string const box = "the box saved by rank " +
                            std::to_string(owner(mesh.shape(), bind(mesh.shape(), rows), {ranks + 3, 5}, {1, 2}).rank);
    for (layout const& l : matrix_layouts(mesh.shape()))
      require_throws<corrupt_checkpoint_error>([&] { (void)in.read<double, 2>("m", l); }, box);
    // Unless the reader was told not to look: then the changed value comes through.
    matrix const unchecked = gather(io::checkpoint_reader(mesh, good, {.verify = false}).read<double, 2>("m", rows));
    CHECK(unchecked(1, 2) != values(1, 2));
    unchecked(1, 2) = values(1, 2);
    CHECK(equal(unchecked, values));
  }

  SECTION("a save that does not commit leaves the previous checkpoint and no other file") {
    {
      io::checkpoint_writer out(mesh, good);
      out.write("m", distribute(mesh, rows, numbered({ranks + 3, 5}, 100.0)));
      CHECK(std::filesystem::exists(io::temporary_path(good)));
    }
    CHECK_FALSE(std::filesystem::exists(io::temporary_path(good)));
    CHECK(equal(gather(io::checkpoint_reader(mesh, good).read<double, 2>("m", rows)), values));
    require_throws<checkpoint_error>([&] { io::checkpoint_writer(mesh, dir / "no/such/folder.h5"); }, "cannot create");
    io::checkpoint_writer out(mesh, good);
    out.write("m", distribute(mesh, rows, numbered({ranks + 3, 5}, 100.0)));
    out.commit();
    CHECK_FALSE(std::filesystem::exists(io::temporary_path(good)));
    CHECK(equal(gather(io::checkpoint_reader(mesh, good).read<double, 2>("m", rows)), numbered({ranks + 3, 5}, 100.0)));
    require_throws<checkpoint_error>([&] { out.write_value("late", 1); }, "already committed");
    require_throws<checkpoint_error>([&] { out.write_value("a/b", 1); }, "already committed");
  }
}

TEST_CASE("tensors on submeshes (pipeline stages) are saved together and read by any ranks", "[io]") {
  std::size_t const ranks = static_cast<std::size_t>(test::world_size());
  if (ranks < 2 || ranks % 2 != 0) return;
  test::scratch_dir const dir("shardmesh-io-stages");
  device_mesh const mesh(MPI_COMM_WORLD, mesh_shape{{"pp", 2}, {"dp", ranks / 2}});
  device_mesh const stage = mesh.submesh({"dp"});
  std::size_t const s = mesh.coordinates()[0];
  layout const rows{shard("dp"), replicated};
  // Stage s holds layer s, with values of its own.
  auto const layer = [&](std::size_t k) { return numbered({ranks + 1, 3}, 1000.0 * static_cast<double>(k)); };
  {
    io::checkpoint_writer out(mesh, dir / "stages.h5");
    out.add("layer" + std::to_string(s), distribute(stage, layout{cyclic(2, "dp"), replicated}, layer(s)));
    out.write("shared", distribute(mesh, layout{shard("pp", "dp"), replicated}, layer(7)));
    out.commit();
  }
  io::checkpoint_reader const in(mesh, dir / "stages.h5");
  // On the whole mesh, under another layout.
  for (std::size_t k = 0; k < 2; ++k)
    CHECK(equal(gather(in.read<double, 2>("layer" + std::to_string(k), layout{replicated, shard("dp")})), layer(k)));
  // Stage s reads the other stage's layer into its own tensor, alone.
  auto mine = distribute(stage, rows, numbered({ranks + 1, 3}, -1.0));
  in.read("layer" + std::to_string(1 - s), mine);
  CHECK(equal(gather(mine), layer(1 - s)));
  // Two different tensors under one name: refused on every rank.
  io::checkpoint_writer out(mesh, dir / "clash.h5");
  out.add("layer", distribute(stage, rows, layer(s)));
  require_throws<mismatched_tensor_error>([&] { out.flush(); }, "two different tensors were queued as \"layer\"");
}

// Run with SHARDMESH_DEBUG_COLLECTIVES=1 (io.debug_collectives): the
// checkpoint's own collectives (its agreements, HDF5's file and dataset
// calls) are fingerprinted like the rest.
TEST_CASE("in the debug mode a checkpoint agrees on every fingerprint, and a rank elsewhere is named",
          "[.][fingerprints]") {
  REQUIRE(detail::collectives_debugged());
  test::scratch_dir const dir("shardmesh-io-fingerprints");
  std::size_t const ranks = static_cast<std::size_t>(test::world_size());
  device_mesh const mesh(MPI_COMM_WORLD, mesh_shape{{"a", ranks}});
  auto const m = distribute(mesh, layout{shard("a"), replicated}, numbered({ranks + 3, 5}));
  {
    io::checkpoint_writer out(mesh, dir / "state.h5");
    out.write("m", m);
    out.commit();
  }
  CHECK(
      equal(gather(io::checkpoint_reader(mesh, dir / "state.h5").read<double, 2>("m", layout{replicated, shard("a")})),
            numbered({ranks + 3, 5})));
  // Rank 0 saves while the others gather: every rank is told what each runs.
  auto const run = [&] {
    if (mesh.rank() == 0) {
      io::checkpoint_writer out(mesh, dir / "other.h5");
      out.write("m", m);
      out.commit();
    } else {
      (void)gather(m);
    }
  };
  CHECK_THROWS_AS(run(), mismatched_collective_error);
  MPI_Barrier(MPI_COMM_WORLD);
}
