#pragma once
// The transitions the suite measures: every primitive step and common
// multi-step transitions of an N x N float32 matrix, on meshes of 4 ranks
// (4 and 2x2) and 8 ranks (2x2x2), each with its hand-written twin; and on 2
// ranks, one per core here (no oversubscription), the steps whose MPI call
// shardmesh chooses: reduce-scatter, all-reduce, slice, all-gather, all-to-all.
// Ranks are numbered row-major over the mesh (the last axis fastest), as in
// shardmesh, so rank = a * 2 + b on 2x2 and a * 4 + b * 2 + c on 2x2x2.

#include "hand_written.hpp"

#include <shardmesh/shardmesh.hpp>

#include <string>
#include <vector>

namespace shardmesh::bench {

// What a hand-written transfer starts from: N, this rank's place on the
// mesh, and its input and output shards (allocated by the benchmark).
struct transfer_setup {
  std::size_t n;
  mesh_coordinates me;
  matrix in;
  matrix out;
};

struct transition_case {
  std::string kind;  // the plan's steps, e.g. "all_to_all" or "reduce_scatter+all_gather"
  mesh_shape mesh;
  layout from;
  layout to;
  hand_written (*by_hand)(transfer_setup const&);
};

// All-to-all within the group of ranks of this color (members ordered by
// key): member q gets the q-th block of h rows of my h*members x w shard, which
// lies contiguously, and member q's block lands at columns q*w of my h x
// members*w output.
inline hand_written rows_within_group(transfer_setup const& s, int color, int key, std::size_t members, std::size_t h,
                                      std::size_t w) {
  hand_written t;
  MPI_Comm const group = t.split(color, key);
  buffer const recv = t.scratch(h * w * members);
  t.collective(
      [=] { MPI_Alltoall(s.in.data(), count(h * w), MPI_FLOAT, recv.data(), count(h * w), MPI_FLOAT, group); });
  place_blocks(t, recv, s.out, members, h, w, [=](std::size_t q) { return std::pair{std::size_t{0}, q * w}; });
  return t;
}

// Reduce-scatter over the group of ranks of this color (members ordered by
// key) into an h x w block, then all-gather every rank's block and unpack
// rank r's to origin(r).
template <class Origin>
hand_written reduce_then_gather(transfer_setup const& s, int color, int key, std::size_t ranks, std::size_t h,
                                std::size_t w, Origin origin) {
  hand_written t;
  MPI_Comm const group = t.split(color, key);
  buffer const mine = t.scratch(h * w);
  buffer const recv = t.scratch(s.n * s.n);
  t.collective([=] { MPI_Reduce_scatter_block(s.in.data(), mine.data(), count(h * w), MPI_FLOAT, MPI_SUM, group); });
  t.collective([=] {
    MPI_Allgather(mine.data(), count(h * w), MPI_FLOAT, recv.data(), count(h * w), MPI_FLOAT, MPI_COMM_WORLD);
  });
  place_blocks(t, recv, s.out, ranks, h, w, origin);
  return t;
}

// The hand-written transfers of a 1-D mesh of Ranks ranks, the whole
// communicator, on the rows (S(x),R) or columns (R,S(x)) of the matrix.
template <std::size_t Ranks>
hand_written all_gather_rows(transfer_setup const& s) {
  hand_written t;
  std::size_t const m = s.n / Ranks * s.n;
  t.collective(
      [=] { MPI_Allgather(s.in.data(), count(m), MPI_FLOAT, s.out.data(), count(m), MPI_FLOAT, MPI_COMM_WORLD); });
  return t;
}

template <std::size_t Ranks>
hand_written rows_to_columns(transfer_setup const& s) {
  hand_written t;
  std::size_t const b = s.n / Ranks;
  buffer const send = t.scratch(b * s.n);
  take_blocks(t, s.in, send, Ranks, b, b, [=](std::size_t q) { return std::pair{std::size_t{0}, q * b}; });
  t.collective([=] {
    MPI_Alltoall(send.data(), count(b * b), MPI_FLOAT, s.out.data(), count(b * b), MPI_FLOAT, MPI_COMM_WORLD);
  });
  return t;
}

template <std::size_t Ranks>
hand_written reduce_scatter_rows(transfer_setup const& s) {
  hand_written t;
  std::size_t const m = s.n / Ranks * s.n;
  t.collective(
      [=] { MPI_Reduce_scatter_block(s.in.data(), s.out.data(), count(m), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); });
  return t;
}

inline hand_written all_reduce_whole(transfer_setup const& s) {
  hand_written t;
  t.collective([=] { MPI_Allreduce(s.in.data(), s.out.data(), count(s.n * s.n), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); });
  return t;
}

inline std::vector<transition_case> transition_cases() {
  mesh_shape const pair{{"x", 2}};
  mesh_shape const line{{"x", 4}};
  mesh_shape const square{{"a", 2}, {"b", 2}};
  mesh_shape const cube{{"a", 2}, {"b", 2}, {"c", 2}};
  layout const R{replicated, replicated};
  return {
      {"reduce_scatter", pair, R.partial(reduce_op::sum, "x"), {shard("x"), replicated}, reduce_scatter_rows<2>},
      {"all_reduce", pair, R.partial(reduce_op::sum, "x"), R, all_reduce_whole},
      {"slice",
       pair,
       R,
       {shard("x"), replicated},
       [](transfer_setup const& s) {
         // The rows kept lie contiguously in the input: one block copy.
         hand_written t;
         std::size_t const rows = s.n / 2;
         auto const kept = Kokkos::subview(s.in, std::pair(s.me[0] * rows, (s.me[0] + 1) * rows), Kokkos::ALL);
         matrix const out = s.out;
         t.phases.push_back({phase::kind::pack, [=] {
                               Kokkos::deep_copy(out, kept);
                               Kokkos::fence();
                             }});
         return t;
       }},
      {"all_gather", pair, {shard("x"), replicated}, R, all_gather_rows<2>},
      {"all_to_all", pair, {shard("x"), replicated}, {replicated, shard("x")}, rows_to_columns<2>},
      {"all_gather", line, {shard("x"), replicated}, R, all_gather_rows<4>},
      {"all_gather",
       line,
       {replicated, shard("x")},
       R,
       [](transfer_setup const& s) {
         hand_written t;
         std::size_t const b = s.n / 4;
         buffer const recv = t.scratch(s.n * s.n);
         t.collective([=] {
           MPI_Allgather(s.in.data(), count(s.n * b), MPI_FLOAT, recv.data(), count(s.n * b), MPI_FLOAT,
                         MPI_COMM_WORLD);
         });
         place_blocks(t, recv, s.out, 4, s.n, b, [=](std::size_t q) { return std::pair{std::size_t{0}, q * b}; });
         return t;
       }},
      {"all_to_all", line, {shard("x"), replicated}, {replicated, shard("x")}, rows_to_columns<4>},
      {"reduce_scatter", line, R.partial(reduce_op::sum, "x"), {shard("x"), replicated}, reduce_scatter_rows<4>},
      {"all_reduce", line, R.partial(reduce_op::sum, "x"), R, all_reduce_whole},
      {"slice",
       line,
       R,
       {replicated, shard("x")},
       [](transfer_setup const& s) {
         hand_written t;
         std::size_t const b = s.n / 4;
         std::size_t const first = s.me[0] * b;
         matrix const in = s.in;
         matrix const out = s.out;
         t.phases.push_back({phase::kind::pack, [=] {
                               Kokkos::parallel_for(
                                   "slice", Kokkos::MDRangePolicy<Kokkos::Rank<2>>({0, 0}, {s.n, b}),
                                   KOKKOS_LAMBDA(std::size_t i, std::size_t j) { out(i, j) = in(i, first + j); });
                               Kokkos::fence();
                             }});
         return t;
       }},
      {"to_partial", line, R, R.partial(reduce_op::sum, "x"),
       [](transfer_setup const& s) {
         // Rank 0 keeps the values, the others hold the sum's identity.
         hand_written t;
         matrix const in = s.in;
         matrix const out = s.out;
         bool const keeps = s.me[0] == 0;
         t.phases.push_back({phase::kind::pack, [=] {
                               if (keeps)
                                 Kokkos::deep_copy(out, in);
                               else
                                 Kokkos::deep_copy(out, 0.0F);
                               Kokkos::fence();
                             }});
         return t;
       }},
      {"all_to_all_v",
       line,
       {shard("x"), replicated},
       {cyclic(1, "x"), replicated},
       [](transfer_setup const& s) {
         // Row r*b + k*4 + q goes to rank q, as its local row r*b/4 + k.
         hand_written t;
         std::size_t const b = s.n / 4;
         std::size_t const per = b / 4;  // rows to each rank
         buffer const send = t.scratch(b * s.n);
         matrix const in = s.in;
         std::size_t const n = s.n;
         t.phases.push_back({phase::kind::pack, [=] {
                               Kokkos::parallel_for(
                                   "pack", Kokkos::MDRangePolicy<Kokkos::Rank<3>>({0, 0, 0}, {std::size_t{4}, per, n}),
                                   KOKKOS_LAMBDA(std::size_t q, std::size_t k, std::size_t j) {
                                     send((q * per + k) * n + j) = in(k * 4 + q, j);
                                   });
                               Kokkos::fence();
                             }});
         t.collective([=] {
           MPI_Alltoall(send.data(), count(per * n), MPI_FLOAT, s.out.data(), count(per * n), MPI_FLOAT,
                        MPI_COMM_WORLD);
         });
         return t;
       }},
      {"permute",
       square,
       {shard("a"), shard("b")},
       {shard("b"), shard("a")},
       [](transfer_setup const& s) {
         hand_written t;
         int const partner = static_cast<int>(s.me[1] * 2 + s.me[0]);
         std::size_t const m = s.n / 2 * s.n / 2;
         t.collective([=] {
           MPI_Sendrecv(s.in.data(), count(m), MPI_FLOAT, partner, 0, s.out.data(), count(m), MPI_FLOAT, partner, 0,
                        MPI_COMM_WORLD, MPI_STATUS_IGNORE);
         });
         return t;
       }},
      {"all_to_all",
       square,
       {shard("a"), shard("b")},
       {shard("a", "b"), replicated},
       [](transfer_setup const& s) {
         return rows_within_group(s, static_cast<int>(s.me[0]), static_cast<int>(s.me[1]), 2, s.n / 4, s.n / 2);
       }},
      {"reduce_scatter+all_gather", square, layout{replicated, shard("b")}.partial(reduce_op::sum, "a"), R,
       [](transfer_setup const& s) {
         std::size_t const h = s.n / 2;
         return reduce_then_gather(s, static_cast<int>(s.me[1]), static_cast<int>(s.me[0]), 4, h, h,
                                   [=](std::size_t q) { return std::pair{q / 2 * h, q % 2 * h}; });
       }},
      {"reduce_scatter+all_to_all",
       square,
       layout{shard("a"), replicated}.partial(reduce_op::sum, "b"),
       {replicated, shard("a", "b")},
       [](transfer_setup const& s) {
         hand_written t;
         MPI_Comm const group = t.split(static_cast<int>(s.me[0]), static_cast<int>(s.me[1]));
         std::size_t const q = s.n / 4;
         buffer const mine = t.scratch(q * s.n);
         buffer const send = t.scratch(q * s.n);
         t.collective(
             [=] { MPI_Reduce_scatter_block(s.in.data(), mine.data(), count(q * s.n), MPI_FLOAT, MPI_SUM, group); });
         matrix const rows(mine.data(), q, s.n);
         take_blocks(t, rows, send, 4, q, q, [=](std::size_t r) { return std::pair{std::size_t{0}, r * q}; });
         t.collective([=] {
           MPI_Alltoall(send.data(), count(q * q), MPI_FLOAT, s.out.data(), count(q * q), MPI_FLOAT, MPI_COMM_WORLD);
         });
         return t;
       }},
      {"all_gather",
       cube,
       {shard("a", "b", "c"), replicated},
       R,
       [](transfer_setup const& s) {
         hand_written t;
         std::size_t const m = s.n / 8 * s.n;
         t.collective([=] {
           MPI_Allgather(s.in.data(), count(m), MPI_FLOAT, s.out.data(), count(m), MPI_FLOAT, MPI_COMM_WORLD);
         });
         return t;
       }},
      {"all_to_all",
       cube,
       {shard("a"), shard("b", "c")},
       {shard("a", "b", "c"), replicated},
       [](transfer_setup const& s) {
         return rows_within_group(s, static_cast<int>(s.me[0]), static_cast<int>(s.me[1] * 2 + s.me[2]), 4, s.n / 8,
                                  s.n / 4);
       }},
      {"reduce_scatter+all_gather", cube, layout{shard("b"), shard("c")}.partial(reduce_op::sum, "a"), R,
       [](transfer_setup const& s) {
         std::size_t const h = s.n / 4;
         std::size_t const w = s.n / 2;
         // Rank a*4 + b*2 + c holds rows b*N/2 + a*N/4 and columns c*N/2.
         return reduce_then_gather(s, static_cast<int>(s.me[1] * 2 + s.me[2]), static_cast<int>(s.me[0]), 8, h, w,
                                   [=](std::size_t r) { return std::pair{r / 2 % 2 * 2 * h + r / 4 * h, r % 2 * w}; });
       }},
  };
}

}  // namespace shardmesh::bench
