#pragma once
// Learning-rate schedules: the factor the optimizer's learning rate is
// multiplied by at update t (the t-th optimizer step, counted from 1, the
// count a checkpoint resumes from). A schedule is any function of t; the
// trainer refuses a factor that is negative or not finite, on every rank
// alike (the factor depends on t alone).
//
//   warmup_cosine(100, 10000, 0.1)   t/100 up to t = 100, then a half cosine
//                                    from 1 down to 0.1 at t = 10000, 0.1 after
//
// Pure; no Kokkos or MPI.

#include "shardmesh/errors.hpp"

#include <cmath>
#include <cstddef>
#include <functional>
#include <numbers>
#include <string>

namespace shardmesh::parallel {

using learning_rate_schedule = std::function<double(std::size_t update)>;

// Why warmup_cosine(warmup, total, floor) cannot be made; empty when it can.
[[nodiscard]] inline std::string warmup_cosine_error(std::size_t warmup, std::size_t total, double floor) {
  if (total <= warmup)
    return "learning rate: the cosine ends at update " + std::to_string(total) + ", not after the " +
           std::to_string(warmup) + " updates of warm-up";
  if (!(floor >= 0 && floor <= 1))
    return "learning rate: the floor is " + std::to_string(floor) + ", which is not in [0, 1]";
  return {};
}

// Linear warm-up to the full rate (t / warmup for t <= warmup; none when
// warmup is 0), then floor + (1 - floor) (1 + cos(pi (t - warmup) /
// (total - warmup))) / 2 up to t = total, and floor after it.
[[nodiscard]] inline learning_rate_schedule warmup_cosine(std::size_t warmup, std::size_t total, double floor = 0) {
  if (std::string const e = warmup_cosine_error(warmup, total, floor); !e.empty()) throw invalid_option_error(e);
  return [=](std::size_t t) {
    if (t <= warmup) return static_cast<double>(t) / static_cast<double>(warmup);
    if (t >= total) return floor;
    double const progress = static_cast<double>(t - warmup) / static_cast<double>(total - warmup);
    return floor + (1 - floor) * (1 + std::cos(std::numbers::pi * progress)) / 2;
  };
}

}  // namespace shardmesh::parallel
