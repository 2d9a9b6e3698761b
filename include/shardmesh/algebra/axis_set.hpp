#pragma once
// A set of mesh axes, by index: the axes a collective acts on, the axes a
// layout shards or is partial on, the axes a submesh keeps. A structural
// value (usable in template arguments); pure constexpr, no Kokkos or MPI.

#include <bit>
#include <cstddef>

namespace shardmesh {

struct axis_set {
  unsigned bits = 0;  // bit a: mesh axis a is in the set

  [[nodiscard]] static constexpr axis_set of(std::size_t axis) { return {1U << axis}; }
  // Every axis of a mesh with ndim axes.
  [[nodiscard]] static constexpr axis_set all(std::size_t ndim) { return {(1U << ndim) - 1}; }

  [[nodiscard]] constexpr bool contains(std::size_t axis) const { return (bits >> axis & 1U) != 0; }
  [[nodiscard]] constexpr bool empty() const { return bits == 0; }
  [[nodiscard]] constexpr std::size_t size() const { return static_cast<std::size_t>(std::popcount(bits)); }
  // The smallest axis in the set. Precondition: !empty().
  [[nodiscard]] constexpr std::size_t first() const { return static_cast<std::size_t>(std::countr_zero(bits)); }

  constexpr axis_set& insert(std::size_t axis) {
    bits |= 1U << axis;
    return *this;
  }
  constexpr axis_set& erase(std::size_t axis) {
    bits &= ~(1U << axis);
    return *this;
  }

  [[nodiscard]] friend constexpr axis_set operator|(axis_set a, axis_set b) { return {a.bits | b.bits}; }
  [[nodiscard]] friend constexpr axis_set operator&(axis_set a, axis_set b) { return {a.bits & b.bits}; }
  // The axes of a that are not in b.
  [[nodiscard]] friend constexpr axis_set operator-(axis_set a, axis_set b) { return {a.bits & ~b.bits}; }
  constexpr axis_set& operator|=(axis_set b) { return *this = *this | b; }
  constexpr axis_set& operator&=(axis_set b) { return *this = *this & b; }
  constexpr axis_set& operator-=(axis_set b) { return *this = *this - b; }
  constexpr bool operator==(axis_set const&) const = default;
};

}  // namespace shardmesh
