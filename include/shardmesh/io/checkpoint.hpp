#pragma once
// Checkpoints: dtensors saved as global arrays in one parallel HDF5 file,
// loaded under any layout, mesh and rank count.
//
//   io::checkpoint_writer out(mesh, "run/state.h5");     // io/checkpoint_writer.hpp
//   out.write("params/w", w);
//   out.commit();                                        // only now does run/state.h5 appear
//
//   io::checkpoint_reader in(mesh, "run/state.h5");      // io/checkpoint_reader.hpp
//   auto w = in.read<float, 2>("params/w", layout{shard("tp"), replicated});
//
// Every call is collective (over the checkpoint's ranks, or a tensor's);
// every failure is the same typed exception on every rank (errors.hpp:
// checkpoint_error and its kinds). docs/08-checkpoints.md has the file
// layout and the guarantees.

#include "shardmesh/io/checkpoint_reader.hpp"
#include "shardmesh/io/checkpoint_writer.hpp"
