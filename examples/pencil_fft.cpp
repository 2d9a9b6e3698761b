// A spectral code's pencil pipeline: a 3-D complex field on a p1 x p2 mesh,
// transformed along X while whole in X (X pencils), moved to Y pencils,
// transformed along Y, moved to Z pencils, transformed along Z, and back
// with the inverse transforms. The field is made and filled through the
// blocks each rank owns, in global indices; every transpose prints the bytes
// its plan moves against the lower bound; the round trip must return the
// field, and the forward transform must match the direct 3-D DFT at a few
// frequencies.
//
//   mpiexec -n 4 build/release/examples/pencil_fft [n]      (n^3 points, default 32)
//
// The 1-D transforms are plain O(n^2) DFTs along each pencil: a real code
// calls its FFT library on the same local lines.
#include <shardmesh/shardmesh.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <numbers>
#include <string>
#include <vector>

using namespace shardmesh;

namespace {

using complex = Kokkos::complex<double>;
using field = dynamic_dtensor<complex, 3, Kokkos::HostSpace>;

complex initial(std::size_t x, std::size_t y, std::size_t z) {
  return {std::sin(0.3 * static_cast<double>(x) + 0.1 * static_cast<double>(y)),
          std::cos(0.2 * static_cast<double>(z) - 0.05 * static_cast<double>(x * y))};
}

// The 1-D DFT (sign -1) or its inverse (sign +1, scaled by 1/n) along
// dimension d, which the layout keeps whole on every rank.
void transform(field const& f, std::size_t d, int sign) {
  auto const v = f.local();
  std::size_t const n = v.extent(d);
  std::size_t const lines = v.size() / (n == 0 ? 1 : n);
  double const scale = sign > 0 ? 1.0 / static_cast<double>(n) : 1.0;
  Kokkos::parallel_for(
      "pencil_dft", Kokkos::RangePolicy<Kokkos::DefaultHostExecutionSpace>(0, lines), [&](std::size_t line) {
        std::size_t idx[3] = {0, 0, 0};
        std::size_t rest = line;
        for (std::size_t e = 3; e-- > 0;) {
          if (e == d) continue;
          idx[e] = rest % v.extent(e);
          rest /= v.extent(e);
        }
        std::vector<complex> in(n), out(n);
        for (std::size_t i = 0; i < n; ++i) {
          idx[d] = i;
          in[i] = v(idx[0], idx[1], idx[2]);
        }
        for (std::size_t k = 0; k < n; ++k) {
          complex sum(0, 0);
          for (std::size_t i = 0; i < n; ++i) {
            double const angle =
                sign * 2 * std::numbers::pi * static_cast<double>((k * i) % n) / static_cast<double>(n);
            sum += in[i] * complex(std::cos(angle), std::sin(angle));
          }
          out[k] = sum * scale;
        }
        for (std::size_t i = 0; i < n; ++i) {
          idx[d] = i;
          v(idx[0], idx[1], idx[2]) = out[i];
        }
      });
  Kokkos::fence("pencil_dft");
}

// Moves f to `to`, printing what the plan receives against the lower bound.
field transpose(field const& f, layout const& to, char const* name, double& seconds) {
  transition_bytes const bytes = predicted_bytes(f, to);
  MPI_Barrier(f.mesh().comm().get());
  auto const start = std::chrono::steady_clock::now();
  field g = redistribute(f, to);
  seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::size_t most = 0;
  for (std::size_t b : bytes.received) most = b > most ? b : most;
  if (f.mesh().rank() == 0)
    std::printf("  %-14s %s: %zu step(s), the busiest rank receives %zu B (lower bound %zu B)\n", name,
                std::string(to_string(to).view()).c_str(), bytes.steps, most, bytes.lower_bound);
  return g;
}

}  // namespace

int main(int argc, char* argv[]) {
  MPI_Init(&argc, &argv);
  int status = 0;
  {
    Kokkos::ScopeGuard kokkos(argc, argv);
    try {
      std::size_t const n = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 32;
      device_mesh const mesh(MPI_COMM_WORLD, mesh_shape{{"p1", 2}, {"p2"}});
      layout const x_pencils{replicated, shard("p1"), shard("p2")};
      layout const y_pencils{shard("p1"), replicated, shard("p2")};
      layout const z_pencils{shard("p1"), shard("p2"), replicated};
      if (mesh.rank() == 0) std::printf("%zu^3 complex points on mesh %s\n", n, to_string(mesh.shape()).chars);

      // The field, filled in global indices through the blocks this rank owns.
      field f = empty<complex, Kokkos::HostSpace>(mesh, x_pencils, {n, n, n});
      for (owned_block const& b : owned_blocks(f))
        for (std::size_t i = 0; i < b.extents[0]; ++i)
          for (std::size_t j = 0; j < b.extents[1]; ++j)
            for (std::size_t k = 0; k < b.extents[2]; ++k)
              f.local()(b.local_offset[0] + i, b.local_offset[1] + j, b.local_offset[2] + k) =
                  initial(b.global_offset[0] + i, b.global_offset[1] + j, b.global_offset[2] + k);
      field const original = redistribute(f, x_pencils);  // a copy: redistribute never aliases

      double moving = 0;
      transform(f, 0, -1);
      f = transpose(f, y_pencils, "X to Y", moving);
      transform(f, 1, -1);
      f = transpose(f, z_pencils, "Y to Z", moving);
      transform(f, 2, -1);
      // The spectrum against the direct 3-D DFT at a few frequencies.
      auto const spectrum = gather(f, 0);
      double spectral_error = 0;
      if (mesh.rank() == 0)
        for (std::size_t const kx : {std::size_t{0}, std::size_t{1}, n / 2})
          for (std::size_t const ky : {std::size_t{0}, n - 1}) {
            std::size_t const kz = (kx + 2 * ky + 3) % n;
            complex direct(0, 0);
            for (std::size_t x = 0; x < n; ++x)
              for (std::size_t y = 0; y < n; ++y)
                for (std::size_t z = 0; z < n; ++z) {
                  double const angle = -2 * std::numbers::pi * static_cast<double>((kx * x + ky * y + kz * z) % n) /
                                       static_cast<double>(n);
                  direct += initial(x, y, z) * complex(std::cos(angle), std::sin(angle));
                }
            spectral_error = std::max(spectral_error, Kokkos::abs(spectrum(kx, ky, kz) - direct));
          }
      transform(f, 2, +1);
      f = transpose(f, y_pencils, "Z to Y", moving);
      transform(f, 1, +1);
      f = transpose(f, x_pencils, "Y to X", moving);
      transform(f, 0, +1);

      auto const back = gather(f);
      auto const want = gather(original);
      double round_trip = 0;
      for (std::size_t i = 0; i < back.size(); ++i)
        round_trip = std::max(round_trip, Kokkos::abs(back.data()[i] - want.data()[i]));
      // O(n^2) DFTs in double: errors grow like n * 1e-16 per transform.
      double const tolerance = 1e-9 * static_cast<double>(n * n);
      bool const ok = round_trip < tolerance && spectral_error < tolerance * static_cast<double>(n);
      if (mesh.rank() == 0)
        std::printf("four transposes: %.3f s; round trip: max error %.2e; spectrum against the direct DFT: %.2e: %s\n",
                    moving, round_trip, spectral_error, ok ? "passed" : "FAILED");
      int bad = ok ? 0 : 1;
      MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
      status = bad;
    } catch (shardmesh::error const& e) {
      std::fprintf(stderr, "pencil_fft: %s\n", e.what());
      status = 1;
    }
  }
  MPI_Finalize();
  return status;
}
