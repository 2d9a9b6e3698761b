#pragma once
// A string literal as a structural value, so that axis names can be template
// arguments: axis<"dp", 2>. Pure constexpr; no Kokkos or MPI.

#include <algorithm>
#include <cstddef>
#include <string_view>

namespace shardmesh {

template <std::size_t N>
struct fixed_string {
  char chars[N]{};  // public: structural types need public members

  constexpr fixed_string(char const (&literal)[N]) { std::copy_n(literal, N, chars); }

  [[nodiscard]] constexpr std::string_view view() const { return {chars, N - 1}; }
  [[nodiscard]] static constexpr std::size_t size() { return N - 1; }

  template <std::size_t M>
  [[nodiscard]] constexpr bool operator==(fixed_string<M> const& other) const {
    return view() == other.view();
  }
};

// A C++ identifier in ASCII: what a mesh axis may be called, so that names
// print unambiguously in layouts and plans.
[[nodiscard]] constexpr bool is_identifier(std::string_view s) {
  auto const letter = [](char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; };
  auto const digit = [](char c) { return c >= '0' && c <= '9'; };
  return !s.empty() && letter(s.front()) &&
         std::all_of(s.begin(), s.end(), [&](char c) { return letter(c) || digit(c); });
}

}  // namespace shardmesh
