#pragma once
// Transfers written by hand the way a careful user would: Kokkos pack loops
// over whole blocks (no division per element), the raw MPI collective on
// communicators split by hand, and unpack loops. Each transfer is a list of
// phases, so that a benchmark can run all of them (the baseline), only the
// collectives (the MPI ceiling), or time each kind apart.

#include <mpi.h>
#include <Kokkos_Core.hpp>

#include <cstddef>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

namespace shardmesh::bench {

using matrix = Kokkos::View<float**, Kokkos::LayoutRight>;
using buffer = Kokkos::View<float*>;

struct phase {
  enum class kind { pack, collective, unpack } what;
  std::function<void()> run;
};

// One hand-written transfer: its phases, the communicators they use, and
// the bytes of its buffers beyond input and output.
struct hand_written {
  std::vector<phase> phases;
  std::vector<std::shared_ptr<MPI_Comm>> comms;
  std::size_t extra_bytes = 0;

  MPI_Comm split(int color, int key) {
    auto c = std::shared_ptr<MPI_Comm>(new MPI_Comm, [](MPI_Comm* p) {
      MPI_Comm_free(p);
      delete p;
    });
    MPI_Comm_split(MPI_COMM_WORLD, color, key, c.get());
    comms.push_back(c);
    return *c;
  }

  buffer scratch(std::size_t elements) {
    extra_bytes += elements * sizeof(float);
    return buffer(Kokkos::view_alloc(Kokkos::WithoutInitializing, "scratch"), elements);
  }

  void collective(std::function<void()> f) { phases.push_back({phase::kind::collective, std::move(f)}); }
};

inline int count(std::size_t n) { return static_cast<int>(n); }

// Block q of h x w elements has its top-left corner at origin(q) in the matrix.
using origins = Kokkos::View<std::size_t* [2], Kokkos::HostSpace>;

template <class Origin>
Kokkos::View<std::size_t* [2], Kokkos::LayoutRight> block_origins(std::size_t n, Origin origin) {
  origins host("origins", n);
  for (std::size_t q = 0; q < n; ++q) {
    auto const [row, col] = origin(q);
    host(q, 0) = row;
    host(q, 1) = col;
  }
  return Kokkos::create_mirror_view_and_copy(Kokkos::DefaultExecutionSpace::memory_space{}, host);
}

// Copies n blocks of h x w between the matrix and the buffer, where they lie
// one after another: into the buffer (Pack, a pack phase) or out of it (an
// unpack phase). Not a template on Origin: nvcc accepts no KOKKOS_LAMBDA in
// a function instantiated with a type local to another (the caller's lambda).
template <bool Pack>
void move_blocks_at(hand_written& t, matrix m, buffer packed, std::size_t n, std::size_t h, std::size_t w,
                    Kokkos::View<std::size_t* [2], Kokkos::LayoutRight> at) {
  t.phases.push_back({Pack ? phase::kind::pack : phase::kind::unpack, [=] {
                        Kokkos::parallel_for(
                            Pack ? "pack" : "unpack", Kokkos::MDRangePolicy<Kokkos::Rank<3>>({0, 0, 0}, {n, h, w}),
                            KOKKOS_LAMBDA(std::size_t q, std::size_t i, std::size_t j) {
                              // Not if constexpr: nvcc's extended lambdas cannot
                              // capture a variable first inside one.
                              if (Pack)
                                packed((q * h + i) * w + j) = m(at(q, 0) + i, at(q, 1) + j);
                              else
                                m(at(q, 0) + i, at(q, 1) + j) = packed((q * h + i) * w + j);
                            });
                        Kokkos::fence();
                      }});
}

template <bool Pack, class Origin>
void move_blocks(hand_written& t, matrix m, buffer packed, std::size_t n, std::size_t h, std::size_t w, Origin origin) {
  move_blocks_at<Pack>(t, m, packed, n, h, w, block_origins(n, origin));
}

template <class Origin>
void take_blocks(hand_written& t, matrix from, buffer to, std::size_t n, std::size_t h, std::size_t w, Origin origin) {
  move_blocks<true>(t, from, to, n, h, w, origin);
}

template <class Origin>
void place_blocks(hand_written& t, buffer from, matrix to, std::size_t n, std::size_t h, std::size_t w, Origin origin) {
  move_blocks<false>(t, to, from, n, h, w, origin);
}

}  // namespace shardmesh::bench
