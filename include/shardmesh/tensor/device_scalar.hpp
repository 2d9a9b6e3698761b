#pragma once
// A number computed in MemorySpace that stays there until the host asks for
// it: a result (a loss) that later device work can read, or add up, without
// a round trip through the host. Reading it (value(), or the conversion to
// T) copies it to the host and waits for the work that computes it.
//
//   auto f = ops::cross_entropy(logits, targets, count, exec);
//   float loss = f.loss;              // one read by the host
//   f.loss.view()                     // the 0-d View, for device work

#include <Kokkos_Core.hpp>

#include <utility>

namespace shardmesh {

template <class T, class MemorySpace = Kokkos::DefaultExecutionSpace::memory_space>
class device_scalar {
 public:
  using value_type = T;
  using view_type = Kokkos::View<T, MemorySpace>;

  device_scalar() = default;
  explicit device_scalar(view_type v) : v_(std::move(v)) {}

  [[nodiscard]] view_type const& view() const { return v_; }
  [[nodiscard]] T value() const {
    T out{};
    Kokkos::deep_copy(out, v_);
    return out;
  }
  operator T() const { return value(); }  // NOLINT(google-explicit-constructor): reads like the number it is

 private:
  view_type v_;
};

}  // namespace shardmesh
