#pragma once
// A product of two tensors in index notation, "btc,cf->btf": one letter per
// dimension of A, of B and of the result C. A letter in all three is a batch
// dimension, in A and C (or B and C) a free dimension of that operand, in A
// and B only a contracted one (summed). Several letters may be contracted
// ("btc,btf->cf" is the weight gradient of a linear layer). Pure constexpr;
// no Kokkos or MPI.

#include "shardmesh/algebra/layout.hpp"
#include "shardmesh/algebra/static_string.hpp"

#include <array>
#include <cstddef>
#include <span>
#include <string_view>

namespace shardmesh {

enum class label_role : unsigned char { batch, free_a, free_b, contracted };

struct contraction {
  using labels = static_string<max_tensor_rank>;
  labels a, b, c;

  // Position of label l in a, b or c, or npos.
  [[nodiscard]] static constexpr std::size_t find(labels const& s, char l) {
    for (std::size_t i = 0; i < s.size(); ++i)
      if (s.chars[i] == l) return i;
    return npos;
  }
  [[nodiscard]] constexpr label_role role(char l) const {
    bool const in_a = find(a, l) != npos;
    bool const in_b = find(b, l) != npos;
    if (find(c, l) == npos) return label_role::contracted;
    if (in_a && in_b) return label_role::batch;
    return in_a ? label_role::free_a : label_role::free_b;
  }
  constexpr bool operator==(contraction const&) const = default;
};

// The first position of `c` (of the text `what`) in s, or npos. A loop, not
// string_view::find: GCC cannot evaluate find's null test on a template
// parameter object's characters when sanitizers are on.
[[nodiscard]] constexpr std::size_t position_of(std::string_view s, std::string_view what) {
  for (std::size_t i = 0; i + what.size() <= s.size(); ++i)
    if (s.substr(i, what.size()) == what) return i;
  return std::string_view::npos;
}
[[nodiscard]] constexpr std::size_t position_of(std::string_view s, char c) {
  return position_of(s, std::string_view(&c, 1));
}

// Why spec is no product, or empty. Precondition of parse_contraction.
[[nodiscard]] constexpr fixed_text contraction_error(std::string_view spec) {
  fixed_text m;
  auto const fail = [&](auto const&... parts) -> fixed_text& {
    return ((m << "contraction \"" << spec << "\": ") << ... << parts);
  };
  std::size_t const comma = position_of(spec, ',');
  std::size_t const arrow = position_of(spec, "->");
  if (comma == std::string_view::npos || arrow == std::string_view::npos || comma > arrow)
    return fail("expected the form \"ab,bc->ac\"");
  std::string_view const parts[3] = {spec.substr(0, comma), spec.substr(comma + 1, arrow - comma - 1),
                                     spec.substr(arrow + 2)};
  std::size_t const offsets[3] = {0, comma + 1, arrow + 2};
  char const* const names[3] = {"A", "B", "the result"};
  for (std::size_t p = 0; p < 3; ++p) {
    if (parts[p].empty()) return fail(names[p], " has no dimensions");
    if (parts[p].size() > max_tensor_rank) return fail(names[p], " has more than ", max_tensor_rank, " dimensions");
    for (std::size_t i = 0; i < parts[p].size(); ++i) {
      char const l = parts[p][i];
      if (!((l >= 'a' && l <= 'z') || (l >= 'A' && l <= 'Z')))
        return fail("\"", std::string_view(&parts[p][i], 1), "\" at column ", offsets[p] + i + 1, " is not a letter");
      if (position_of(parts[p], l) != i)
        return fail("\"", std::string_view(&parts[p][i], 1), "\" appears twice in ", names[p]);
    }
  }
  // A result letter in neither operand first: "ik,kj->il" is a typo of the
  // result's, which also leaves j summed in B alone.
  for (char l : parts[2])
    if (position_of(parts[0], l) == std::string_view::npos && position_of(parts[1], l) == std::string_view::npos)
      return fail("\"", std::string_view(&l, 1), "\" of the result is in neither operand");
  for (std::size_t p = 0; p < 2; ++p)
    for (char l : parts[p])
      if (position_of(parts[1 - p], l) == std::string_view::npos && position_of(parts[2], l) == std::string_view::npos)
        return fail("\"", std::string_view(&l, 1), "\" is summed in ", names[p], " only: reduce that dimension first");
  return m;
}

// Precondition: contraction_error(spec) is empty.
[[nodiscard]] constexpr contraction parse_contraction(std::string_view spec) {
  std::size_t const comma = position_of(spec, ',');
  std::size_t const arrow = position_of(spec, "->");
  return {contraction::labels(spec.substr(0, comma)), contraction::labels(spec.substr(comma + 1, arrow - comma - 1)),
          contraction::labels(spec.substr(arrow + 2))};
}

// "btc,cf->btf"
[[nodiscard]] constexpr fixed_text to_string(contraction const& k) {
  fixed_text out;
  return out << k.a << "," << k.b << "->" << k.c;
}

// Why operands of these global extents do not fit the product, or empty:
// every label must have one extent. Precondition: the ranks match the labels.
[[nodiscard]] constexpr fixed_text contraction_shape_error(contraction const& k, std::span<std::size_t const> a,
                                                           std::span<std::size_t const> b) {
  fixed_text m;
  for (std::size_t i = 0; i < k.a.size(); ++i) {
    std::size_t const j = contraction::find(k.b, k.a.chars[i]);
    if (j != npos && a[i] != b[j])
      m << to_string(k) << ": dimension \"" << std::string_view(&k.a.chars[i], 1) << "\" is " << a[i] << " in A and "
        << b[j] << " in B";
    if (!m.empty()) break;
  }
  return m;
}

// The global extents of the result. Precondition: no contraction_shape_error.
[[nodiscard]] constexpr std::array<std::size_t, max_tensor_rank> contraction_extents(contraction const& k,
                                                                                     std::span<std::size_t const> a,
                                                                                     std::span<std::size_t const> b) {
  std::array<std::size_t, max_tensor_rank> out{};
  for (std::size_t i = 0; i < k.c.size(); ++i) {
    std::size_t const in_a = contraction::find(k.a, k.c.chars[i]);
    out[i] = in_a != npos ? a[in_a] : b[contraction::find(k.b, k.c.chars[i])];
  }
  return out;
}

}  // namespace shardmesh
