// A checkpoint for a client that is not shardmesh: read_with_h5py.py opens
// it with h5py and checks every dataset against what shardmesh::gather
// returns for the same tensor, written here beside it as raw little-endian
// arrays. Run only by io.h5py_client.*:
//
//   mpiexec -n 4 export_for_python DIR
//
// writes DIR/checkpoint.h5, one DIR/<dataset>.raw per dataset and
// DIR/manifest.json (the mesh, the values and texts written, and for each
// dataset its name, element type, shape, layout and raw file). The tensors
// cover block sharding on two axes with uneven and empty shards, cyclic
// sharding, replication over a mesh axis, and partial tensors (distributed
// and made of real contributions); the mesh is a=ranks/2,b=2 on an even rank
// count, a=ranks,b=1 otherwise (no partial tensors then).
#include <shardmesh/io/checkpoint.hpp>
#include <shardmesh/tensor/distribute.hpp>
#include <shardmesh/tensor/gather.hpp>
#include <shardmesh/version.hpp>

#include <mpi.h>
#include <Kokkos_Core.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

using namespace shardmesh;

namespace {

template <class T>
using host_view = Kokkos::View<T, Kokkos::LayoutRight, Kokkos::HostSpace>;

std::string json_string(std::string const& text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char escaped[8];
      std::snprintf(escaped, sizeof escaped, "\\u%04x", static_cast<unsigned>(c));
      out += escaped;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

template <class T>
char const* numpy_type() {
  if constexpr (std::is_same_v<T, float>)
    return "<f4";
  else if constexpr (std::is_same_v<T, double>)
    return "<f8";
  else
    return "<i8";
}

// Writes the datasets into the checkpoint and, on rank 0, their gathered
// values into raw files and their entries into the manifest.
class exporter {
 public:
  exporter(device_mesh const& mesh, std::filesystem::path dir)
      : mesh_(mesh), dir_(std::move(dir)), out_(mesh, dir_ / "checkpoint.h5") {}

  // Saves x as `name`; its gathered values must equal `expected` bit for bit.
  template <class T, std::size_t Rank, class View>
  void save(std::string const& name, dynamic_dtensor<T, Rank> const& x, View const& expected) {
    out_.write(name, x);
    auto const all = gather(x, 0);
    if (mesh_.rank() != 0) return;
    if (all.size() != expected.size() || std::memcmp(all.data(), expected.data(), all.size() * sizeof(T)) != 0) {
      std::fprintf(stderr, "export_for_python: gather(%s) differs from the values distributed\n", name.c_str());
      ok_ = false;
    }
    std::string raw = name;
    std::replace(raw.begin(), raw.end(), '/', '.');
    raw += ".raw";
    std::ofstream file(dir_ / raw, std::ios::binary);
    for (std::size_t i = 0; i < all.size(); ++i) {
      T value = all.data()[i];
      if constexpr (std::endian::native == std::endian::big) {
        auto* bytes = reinterpret_cast<unsigned char*>(&value);
        std::reverse(bytes, bytes + sizeof(T));
      }
      file.write(reinterpret_cast<char const*>(&value), sizeof(T));
    }
    ok_ = ok_ && static_cast<bool>(file);
    std::ostringstream entry;
    entry << "    {\"name\": " << json_string(name) << ", \"dtype\": \"" << numpy_type<T>()
          << "\", \"element_type\": \"" << element_name<T>() << "\", \"shape\": [";
    for (std::size_t d = 0; d < Rank; ++d) entry << (d == 0 ? "" : ", ") << x.global_extents()[d];
    entry << "], \"layout\": " << json_string(std::string(to_string(x.layout()).view()))
          << ", \"raw\": " << json_string(raw) << "}";
    datasets_.push_back(entry.str());
  }

  void value(std::string const& name, std::int64_t v) {
    out_.write_value(name, v);
    values_.push_back(json_string(name) + ": " + std::to_string(v));
  }

  void text(std::string const& name, std::string const& t) {
    out_.write_text(name, t);
    texts_.push_back(json_string(name) + ": " + json_string(t));
  }

  // Commits the checkpoint, then writes the manifest. True if all went well on every rank.
  bool finish() {
    out_.commit();
    if (mesh_.rank() == 0) {
      std::ofstream manifest(dir_ / "manifest.json");
      auto list = [&](std::vector<std::string> const& items, char const* sep) {
        for (std::size_t i = 0; i < items.size(); ++i) manifest << (i == 0 ? "" : sep) << items[i];
      };
      manifest << "{\n  \"checkpoint\": \"checkpoint.h5\",\n  \"ranks\": " << mesh_.size()
               << ",\n  \"mesh\": " << json_string(std::string(to_string(mesh_.shape()).view()))
               << ",\n  \"shardmesh_version\": " << json_string(SHARDMESH_VERSION_STRING) << ",\n  \"values\": {";
      list(values_, ", ");
      manifest << "},\n  \"texts\": {";
      list(texts_, ", ");
      manifest << "},\n  \"datasets\": [\n";
      list(datasets_, ",\n");
      manifest << "\n  ]\n}\n";
      ok_ = ok_ && static_cast<bool>(manifest);
    }
    int ok = ok_ ? 1 : 0;
    MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, mesh_.comm().get());
    return ok == 1;
  }

 private:
  device_mesh mesh_;
  std::filesystem::path dir_;
  io::checkpoint_writer out_;
  bool ok_ = true;
  std::vector<std::string> datasets_;
  std::vector<std::string> values_;
  std::vector<std::string> texts_;
};

bool export_all(std::filesystem::path const& dir) {
  int world = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  std::size_t const ranks = static_cast<std::size_t>(world);
  std::size_t const b = ranks % 2 == 0 ? 2 : 1;
  device_mesh const mesh(MPI_COMM_WORLD, mesh_shape{{"a", ranks / b}, {"b", b}});
  exporter out(mesh, dir);

  // Rows split on a, then on b: shards of uneven lengths.
  host_view<float**> w("w", 3 * ranks + 1, 5);
  for (std::size_t i = 0; i < w.size(); ++i) w.data()[i] = 0.25f * static_cast<float>(i) - 3.0f;
  out.save("model/w", distribute(mesh, layout{shard("a", "b"), replicated}, w), w);

  // Fewer elements than shards: the last shard is empty.
  host_view<float*> tail("tail", std::max<std::size_t>(ranks - 1, 1));
  for (std::size_t i = 0; i < tail.size(); ++i) tail.data()[i] = -1.5f * static_cast<float>(i + 1);
  out.save("edge/tail", distribute(mesh, layout{shard("a", "b")}, tail), tail);

  // Blocks of 2 dealt round-robin on a, the last dimension split on b; bits
  // that only a bitwise comparison tells apart (-0.0, NaN, infinities).
  host_view<double***> blocks("blocks", 3, 2 * ranks + 3, 5);
  for (std::size_t i = 0; i < blocks.size(); ++i) blocks.data()[i] = static_cast<double>((i * 37) % 101) / 7.0 - 5.0;
  blocks.data()[1] = -0.0;
  blocks.data()[7] = std::numeric_limits<double>::quiet_NaN();
  blocks.data()[8] = std::numeric_limits<double>::infinity();
  blocks.data()[blocks.size() - 1] = -std::numeric_limits<double>::infinity();
  out.save("model/blocks", distribute(mesh, layout{replicated, cyclic(2, "a"), shard("b")}, blocks), blocks);

  // Replicated on a: one writer of each box, the other ranks of a write nothing.
  host_view<std::int64_t*> counts("counts", 5 * ranks + 2);
  for (std::size_t i = 0; i < counts.size(); ++i) {
    auto const k = static_cast<std::int64_t>(i);
    counts.data()[i] = (k % 2 == 0 ? 1 : -1) * ((k << 40) + k);
  }
  counts.data()[0] = std::numeric_limits<std::int64_t>::min();
  counts.data()[counts.size() - 1] = std::numeric_limits<std::int64_t>::max();
  out.save("counts", distribute(mesh, layout{shard("b")}, counts), counts);

  if (b > 1) {
    // Partial on b as distribute makes it: the values at b = 0, zeros elsewhere.
    host_view<double**> momentum("momentum", 5, 2 * ranks + 1);
    for (std::size_t i = 0; i < momentum.extent(0); ++i)
      for (std::size_t j = 0; j < momentum.extent(1); ++j)
        momentum(i, j) = static_cast<double>(i) - 0.5 * static_cast<double>(j);
    layout const partial = layout{replicated, shard("a")}.partial(reduce_op::sum, "b");
    out.save("opt/momentum", distribute(mesh, partial, momentum), momentum);

    // Partial on b with a contribution from every rank: k * (i + 1) at b = k
    // > 0, the rest at b = 0. Every term is a multiple of 1/2: exact sums.
    host_view<double**> summed("summed", 4, 3 * ranks);
    for (std::size_t i = 0; i < summed.extent(0); ++i)
      for (std::size_t j = 0; j < summed.extent(1); ++j)
        summed(i, j) = 10.0 * static_cast<double>(i) + 0.5 * static_cast<double>(j) - 7.0;
    layout const rows = layout{shard("a"), replicated}.partial(reduce_op::sum, "b");
    bound_layout const bound = bind(mesh.shape(), rows);
    tensor_index const global{summed.extent(0), summed.extent(1)};
    tensor_index const local = local_extents(mesh.shape(), bound, global, mesh.rank());
    std::size_t const k = coordinates_of(mesh.shape(), mesh.rank())[1];
    dynamic_dtensor<double, 2>::view_type contribution("contribution", local[0], local[1]);
    auto host = Kokkos::create_mirror_view(contribution);
    for (std::size_t i = 0; i < local[0]; ++i)
      for (std::size_t j = 0; j < local[1]; ++j) {
        tensor_index const g = local_to_global(mesh.shape(), bound, global, mesh.rank(), {i, j});
        double const others = 0.5 * static_cast<double>(b * (b - 1)) * static_cast<double>(g[0] + 1);
        host(i, j) = k == 0 ? summed(g[0], g[1]) - others : static_cast<double>(k * (g[0] + 1));
      }
    Kokkos::deep_copy(contribution, host);
    out.save("opt/summed", dynamic_dtensor<double, 2>(mesh, rows, {global[0], global[1]}, contribution), summed);
  }

  out.value("step", -1234567890123);
  out.value("epoch", 7);
  out.text("config", "{\"lr\": 0.001, \"name\": \"h5py client\", \"ranks\": " + std::to_string(ranks) + "}");
  return out.finish();
}

}  // namespace

int main(int argc, char* argv[]) {
  MPI_Init(&argc, &argv);
  int status = 0;
  {
    Kokkos::ScopeGuard kokkos(argc, argv);
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (argc != 2) {
      if (rank == 0) std::fprintf(stderr, "usage: export_for_python DIR\n");
      status = 2;
    } else {
      try {
        std::filesystem::path const dir = argv[1];
        if (rank == 0) std::filesystem::create_directories(dir);
        MPI_Barrier(MPI_COMM_WORLD);
        status = export_all(dir) ? 0 : 1;
        if (rank == 0) std::printf("export_for_python: %s written%s\n", dir.c_str(), status == 0 ? "" : " (FAILED)");
      } catch (std::exception const& e) {
        std::fprintf(stderr, "export_for_python: rank %d: %s\n", rank, e.what());
        MPI_Abort(MPI_COMM_WORLD, 1);
      }
    }
  }
  MPI_Finalize();
  return status;
}
