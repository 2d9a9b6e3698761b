#pragma once
// Checking a tensor operation's input on every rank at once. Each rank
// contributes a small record (what it believes about the tensor); one
// MPI_Allgather gives every rank all records, so every rank reaches the same
// verdict and raises the same exception before any data moves: never a hang
// in a collective that some ranks skipped.

#include "shardmesh/algebra/hash.hpp"
#include "shardmesh/algebra/layout.hpp"
#include "shardmesh/algebra/shard_geometry.hpp"
#include "shardmesh/comm/collective_debug.hpp"
#include "shardmesh/errors.hpp"
#include "shardmesh/runtime/device_mesh.hpp"

#include <mpi.h>

#include <array>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

namespace shardmesh::detail {

struct tensor_record {
  std::uint64_t what = 0;  // hash of operation, layouts and element type
  std::array<std::uint64_t, max_tensor_rank> global{};
  std::array<std::uint64_t, max_tensor_rank> local{};     // the local shard's extents
  std::array<std::uint64_t, max_tensor_rank> expected{};  // what the layout gives this rank
  std::uint64_t output = 0;         // an output_problem, for operations that write into a given tensor
  std::uint64_t largest_count = 0;  // the largest count or displacement the operation hands MPI here
};

// Why a given output tensor cannot take an operation's result on some rank.
enum class output_problem : std::uint64_t { none, other_mesh, other_extents, aliases_input };

inline std::string_view describe(output_problem p) {
  switch (p) {
    case output_problem::none: break;
    case output_problem::other_mesh: return "is on another mesh";
    case output_problem::other_extents: return "has other global extents";
    case output_problem::aliases_input: return "shares its memory with the input";
  }
  return "";
}

// "f32[8,6]": element type and global extents.
inline std::string tensor_name(std::string_view element, std::size_t rank, tensor_index const& global) {
  std::string out(element);
  out += "[";
  for (std::size_t d = 0; d < rank; ++d) out += (d == 0 ? "" : ",") + std::to_string(global[d]);
  return out + "]";
}

inline std::string extents_string(std::size_t rank, std::array<std::uint64_t, max_tensor_rank> const& e) {
  std::string out = "[";
  for (std::size_t d = 0; d < rank; ++d) out += (d == 0 ? "" : ",") + std::to_string(e[d]);
  return out + "]";
}

// Ends the whole job for a mistake only this rank can see: the other ranks
// may already wait in a collective, so an exception here would hang them.
[[noreturn]] inline void end_job(device_mesh const& mesh, std::string const& why) {
  std::fprintf(stderr, "shardmesh: error on rank %zu of %zu, ending the job: %s\n", mesh.rank(), mesh.size(),
               why.c_str());
  std::fflush(stderr);
  MPI_Abort(mesh.comm().get(), 1);
  std::abort();  // MPI_Abort does not return; this says so to the compiler
}

// Collective over mesh. `what` must differ when ranks disagree on anything
// but the extents (operation, layouts, element type). Throws on every rank:
// mismatched_tensor_error if ranks disagree, local_extents_error if some
// rank's local shard has the wrong extents or cannot take the output,
// count_overflow_error if some rank would hand MPI a count beyond INT_MAX.
inline void agree(device_mesh const& mesh, std::string const& operation, std::string const& tensor, std::size_t rank,
                  tensor_record const& mine) {
  static_assert(sizeof(tensor_record) % sizeof(std::uint64_t) == 0);
  int const words = static_cast<int>(sizeof(tensor_record) / sizeof(std::uint64_t));
  std::vector<tensor_record> all(mesh.size());
  check_collective(mesh.comm().get(), "agreement of " + operation, "");
  {
    blocked_in const waiting("agreement of " + operation);
    MPI_Allgather(&mine, words, MPI_UINT64_T, all.data(), words, MPI_UINT64_T, mesh.comm().get());
  }
  for (std::size_t r = 1; r < all.size(); ++r) {
    if (all[r].what != all[0].what)
      throw mismatched_tensor_error(operation + ": rank " + std::to_string(r) + " asked for a different operation, " +
                                    "layout or element type than rank 0 (here: " + tensor + ")");
    if (all[r].global != all[0].global)
      throw mismatched_tensor_error(operation + ": ranks disagree on the global extents of " + tensor +
                                    ": rank 0 has " + extents_string(rank, all[0].global) + ", rank " +
                                    std::to_string(r) + " has " + extents_string(rank, all[r].global));
  }
  for (std::size_t r = 0; r < all.size(); ++r)
    if (auto const p = static_cast<output_problem>(all[r].output); p != output_problem::none)
      throw mismatched_tensor_error(operation + ": the output of " + tensor + " " + std::string(describe(p)) +
                                    " on rank " + std::to_string(r));
  std::string bad;
  for (std::size_t r = 0; r < all.size(); ++r)
    if (all[r].local != all[r].expected)
      bad += (bad.empty() ? "" : "; ") + std::string("rank ") + std::to_string(r) + " has " +
             extents_string(rank, all[r].local) + ", expected " + extents_string(rank, all[r].expected);
  if (!bad.empty())
    throw local_extents_error(operation + ": the local shards of " + tensor +
                              " do not have the extents the layout gives them: " + bad);
  for (std::size_t r = 0; r < all.size(); ++r)
    if (all[r].largest_count > static_cast<std::uint64_t>(INT_MAX))
      throw count_overflow_error(operation + ": " + tensor + " would hand MPI " + std::to_string(all[r].largest_count) +
                                 " elements in one count on rank " + std::to_string(r) + ", more than an int holds (" +
                                 std::to_string(INT_MAX) + ")");
}

}  // namespace shardmesh::detail
