#pragma once
// Exceptions for bad input. Each is raised identically on every rank, before
// any data moves, with a message naming the tensor's notation, the layout
// and the axis at fault. A mistake that only one rank can see without
// communicating (a persistent redistributor run with other tensors than it
// was made for) ends the job instead, with a message naming the rank: the
// other ranks may already wait in a collective. docs/03-runtime.md has the
// whole table.

#include <stdexcept>
#include <string>

namespace shardmesh {

class error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A mesh shape that is malformed, does not match its communicator, or
// differs between ranks.
class invalid_mesh_error : public error {
 public:
  using error::error;
};

// A layout invalid on its mesh, or an impossible transition (one the
// algebra rejects, or one the planner finds no way to make).
class invalid_layout_error : public error {
 public:
  using error::error;
};

// Ranks that disagree about a tensor: its global extents, layout or element type.
class mismatched_tensor_error : public error {
 public:
  using error::error;
};

// A local shard whose extents are not what the layout gives its rank.
class local_extents_error : public error {
 public:
  using error::error;
};

// A root that is not a rank of the mesh (distribute, gather).
class invalid_root_error : public error {
 public:
  using error::error;
};

// A message longer than an MPI count (INT_MAX elements) on some rank.
class count_overflow_error : public error {
 public:
  using error::error;
};

// A global batch that is not B_micro x N_acc x N_dp, or cannot be split
// as asked (strategy/batch.hpp).
class invalid_batch_error : public error {
 public:
  using error::error;
};

// Ranks that reached different collectives on one communicator, found by
// the debug mode's fingerprints (comm/collective_debug.hpp).
class mismatched_collective_error : public error {
 public:
  using error::error;
};

// Layout or mesh notation that did not parse, used anyway (parsed::value).
class notation_error : public error {
 public:
  using error::error;
};

// A tensor that holds nothing: moved from, or default-constructed and never
// assigned. Raised by every operation given one, naming the operation.
class empty_tensor_error : public error {
 public:
  using error::error;
};

// A training option out of its range: a ZeRO stage that does not exist, a
// bucket size of zero, a learning rate that is not finite.
class invalid_option_error : public error {
 public:
  using error::error;
};

// A checkpoint that cannot be written or read: the file cannot be created
// or opened, is not HDF5, is truncated, or was not written by shardmesh
// (io/checkpoint.hpp). The more specific cases below derive from it.
class checkpoint_error : public error {
 public:
  using error::error;
};

// A dataset or value the checkpoint does not hold.
class missing_dataset_error : public checkpoint_error {
 public:
  using checkpoint_error::checkpoint_error;
};

// A dataset whose global shape or element type is not the tensor's.
class checkpoint_mismatch_error : public checkpoint_error {
 public:
  using checkpoint_error::checkpoint_error;
};

// A dataset whose elements do not add up to the checksums written with them,
// or run values (a step, a seed, a configuration) that do not match theirs.
class corrupt_checkpoint_error : public checkpoint_error {
 public:
  using checkpoint_error::checkpoint_error;
};

// A checkpoint replaced by another save each time it was opened: the ranks
// could not agree on one version of the file.
class replaced_checkpoint_error : public checkpoint_error {
 public:
  using checkpoint_error::checkpoint_error;
};

}  // namespace shardmesh
