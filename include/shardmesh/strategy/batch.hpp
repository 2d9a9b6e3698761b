#pragma once
// Global batch accounting: B_global = B_micro x N_acc x N_dp.
//
// A step takes B_global samples in N_acc micro-steps (gradient
// accumulation) on N_dp data-parallel replicas. Even batches give every
// replica B_micro samples per micro-step; the identity is checked when the
// accounting is made, at compile time when it is a constant:
//
//   constexpr batch_accounting b(4, 2, 8);          // B_global = 64
//   static_assert(check_batch<64, 4, 2, 8>());      // fails to compile with the message
//
// Uneven batches (batch_accounting::uneven) split B_global into N_acc
// micro-steps as evenly as possible (the first B_global mod N_acc take one
// more); each micro-step's samples are a tensor whose batch dimension is
// sharded on "dp", so the layout's blocks decide each replica's share (some
// may take none). The loss is then normalised by the global count of
// samples or tokens, which every rank knows before backward, never by a
// per-micro-batch mean: the update does not depend on how the batch was split.
//
// Pure constexpr; no Kokkos or MPI.

#include "shardmesh/algebra/shard_geometry.hpp"
#include "shardmesh/algebra/static_string.hpp"
#include "shardmesh/algebra/validation.hpp"
#include "shardmesh/errors.hpp"

#include <cstddef>
#include <string>

namespace shardmesh::parallel {

// Why (global, micro, accumulation, data_parallel) is not an even batch; empty when it is.
// global == 0 means "derived": only the factors are checked.
[[nodiscard]] constexpr fixed_text batch_error(std::size_t global, std::size_t micro, std::size_t accumulation,
                                               std::size_t data_parallel) {
  fixed_text m;
  if (micro == 0 || accumulation == 0 || data_parallel == 0)
    return m.append("batch: B_micro, N_acc and N_dp must be at least 1, not ")
        .append(micro)
        .append(", ")
        .append(accumulation)
        .append(" and ")
        .append(data_parallel);
  if (global != 0 && global != micro * accumulation * data_parallel)
    return m.append("batch: a global batch of ")
        .append(global)
        .append(" is not B_micro x N_acc x N_dp = ")
        .append(micro)
        .append(" x ")
        .append(accumulation)
        .append(" x ")
        .append(data_parallel)
        .append(" = ")
        .append(micro * accumulation * data_parallel);
  return m;
}

// Why B_global cannot be taken in `accumulation` micro-steps on `data_parallel` replicas; empty when it can.
[[nodiscard]] constexpr fixed_text uneven_batch_error(std::size_t global, std::size_t accumulation,
                                                      std::size_t data_parallel) {
  fixed_text m;
  if (accumulation == 0 || data_parallel == 0)
    return m.append("batch: N_acc and N_dp must be at least 1, not ")
        .append(accumulation)
        .append(" and ")
        .append(data_parallel);
  if (global < accumulation)
    return m.append("batch: a global batch of ")
        .append(global)
        .append(" cannot fill ")
        .append(accumulation)
        .append(" micro-steps");
  return m;
}

class batch_accounting {
 public:
  // An even batch of B_micro x N_acc x N_dp samples.
  constexpr batch_accounting(std::size_t micro, std::size_t accumulation, std::size_t data_parallel)
      : batch_accounting(check(batch_error(0, micro, accumulation, data_parallel)),
                         micro * accumulation * data_parallel, micro, accumulation, data_parallel) {}
  // An even batch whose global size is given too, and must match.
  constexpr batch_accounting(std::size_t global, std::size_t micro, std::size_t accumulation, std::size_t data_parallel)
      : batch_accounting(check(batch_error(global, micro, accumulation, data_parallel)), global, micro, accumulation,
                         data_parallel) {}

  // Any global batch of at least N_acc samples, split as evenly as the layouts allow.
  [[nodiscard]] static constexpr batch_accounting uneven(std::size_t global, std::size_t accumulation,
                                                         std::size_t data_parallel) {
    check(uneven_batch_error(global, accumulation, data_parallel));
    std::size_t const largest_step = (global + accumulation - 1) / accumulation;
    std::size_t const micro = (largest_step + data_parallel - 1) / data_parallel;  // the largest block
    return {checked{}, global, micro, accumulation, data_parallel};
  }

  [[nodiscard]] constexpr std::size_t global() const { return global_; }
  [[nodiscard]] constexpr std::size_t accumulation() const { return accumulation_; }
  [[nodiscard]] constexpr std::size_t data_parallel() const { return data_parallel_; }
  // Samples per replica per micro-step; for uneven batches, the most any replica takes.
  [[nodiscard]] constexpr std::size_t micro() const { return micro_; }
  // Every replica takes B_micro samples in every micro-step.
  [[nodiscard]] constexpr bool even() const { return micro_ * accumulation_ * data_parallel_ == global_; }

  // The global samples of micro-step a, [begin, end). Postcondition: the
  // micro-steps tile [0, global()) in order, their sizes differ by at most 1.
  [[nodiscard]] constexpr interval micro_step(std::size_t a) const {
    std::size_t const base = global_ / accumulation_, extra = global_ % accumulation_;
    std::size_t const begin = a * base + (a < extra ? a : extra);
    return {begin, begin + base + (a < extra ? 1 : 0)};
  }
  // The samples of micro-step a that replica r takes: the block the batch
  // dimension's "dp" sharding gives it (shard_geometry.hpp).
  [[nodiscard]] constexpr interval replica_share(std::size_t a, std::size_t r) const {
    interval const step = micro_step(a);
    interval const part = block_part(step.size(), data_parallel_, r);
    return {step.begin + part.begin, step.begin + part.end};
  }

 private:
  struct checked {};
  static constexpr checked check(fixed_text const& problem) {
    if (!problem.empty()) throw invalid_batch_error(std::string(problem.view()));
    return {};
  }
  constexpr batch_accounting(checked, std::size_t global, std::size_t micro, std::size_t accumulation,
                             std::size_t data_parallel)
      : global_(global), micro_(micro), accumulation_(accumulation), data_parallel_(data_parallel) {}

  std::size_t global_, micro_, accumulation_, data_parallel_;
};

// Compile time: a constant batch that is not even fails to compile, showing
// the message as shardmesh_error's template argument.
template <std::size_t Global, std::size_t Micro, std::size_t Accumulation, std::size_t DataParallel>
constexpr bool check_batch() {
  return require_valid<batch_error(Global, Micro, Accumulation, DataParallel)>();
}

}  // namespace shardmesh::parallel
