#include <shardmesh/models/gpt.hpp>
#include <shardmesh/train/trainer.hpp>

// A model whose backward is not reachable: the trainer names what it lacks.
class no_backward : public shardmesh::parallel::gpt<float, Kokkos::HostSpace> {
  using base = shardmesh::parallel::gpt<float, Kokkos::HostSpace>;
  using base::backward_chunk;  // private here

 public:
  using base::base;
};

template class shardmesh::parallel::trainer<no_backward>;
