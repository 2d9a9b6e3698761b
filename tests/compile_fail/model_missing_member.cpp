#include <shardmesh/models/gpt.hpp>
#include <shardmesh/train/trainer.hpp>

// A model whose backward is not reachable: the trainer names what it lacks.
class no_backward : public shardmesh::parallel::gpt<float, Kokkos::HostSpace> {
  using gpt::backward_chunk;  // private here

 public:
  using gpt::gpt;
};

template class shardmesh::parallel::trainer<no_backward>;
