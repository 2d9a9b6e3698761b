// The training stack instantiated for the default execution space's memory
// (device memory in a CUDA or HIP build, host memory here): both models in
// float and bf16, the trainer and a step, gradients kept in either type.
// Compiled by tools/cuda-check and tools/hip-check in their full runs (the host build's tests
// instantiate the same for host memory); in no target, nothing here runs.
#include <shardmesh/models/gpt.hpp>
#include <shardmesh/models/llama.hpp>
#include <shardmesh/train/trainer.hpp>

#include <span>

namespace shardmesh::device_check {

using memory = Kokkos::DefaultExecutionSpace::memory_space;

template <class Model>
typename parallel::trainer<Model>::step_result train_one_step(
    device_mesh const& mesh, typename Model::config_type const& config, parallel::parameter_source const& values,
    parallel::training_options const& options, std::span<typename parallel::trainer<Model>::micro_batch const> batch) {
  Model model(mesh, config, values);
  parallel::trainer<Model> train(model, mesh, options);
  return train.step(batch);
}

// Taking each one's address instantiates it.
template <class... Models>
void instantiate() {
  (static_cast<void>(&train_one_step<Models>), ...);
}
template void instantiate<parallel::gpt<float, memory>, parallel::gpt<bf16, memory>, parallel::llama<float, memory>,
                          parallel::llama<bf16, memory>>();

}  // namespace shardmesh::device_check
