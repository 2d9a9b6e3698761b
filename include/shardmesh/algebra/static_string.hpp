#pragma once
// A string of bounded capacity that lives in constant expressions: axis names
// (usable as template arguments, being structural), the compact notation of
// layouts and plans, and compile-time error messages. Appending past the
// capacity truncates: these strings are for names and messages, never data.

#include <cstddef>
#include <string_view>
#include <type_traits>

namespace shardmesh {

template <std::size_t Capacity>
struct static_string {
  // Public members: structural types need them to be template arguments.
  char chars[Capacity + 1]{};
  std::size_t length = 0;

  constexpr static_string() = default;
  template <std::size_t N>
  constexpr static_string(char const (&literal)[N]) {
    append(std::string_view(literal, N - 1));
  }
  constexpr explicit static_string(std::string_view text) { append(text); }
  // Member by member. nvcc's front end writes a static_string template
  // argument back out as {{chars...}, length} (linear<"bk,kn->bn", ...>):
  // this constructor reads it back.
  constexpr static_string(char const (&text)[Capacity + 1], std::size_t used) : length(used) {
    for (std::size_t i = 0; i <= Capacity; ++i) chars[i] = text[i];
  }

  constexpr static_string& append(std::string_view text) {
    for (char c : text) {
      if (length == Capacity) break;
      chars[length++] = c;
    }
    return *this;
  }
  constexpr static_string& append(std::size_t number) {
    char digits[20]{};
    std::size_t count = 0;
    do {
      digits[count++] = static_cast<char>('0' + number % 10);
      number /= 10;
    } while (number != 0);
    while (count != 0) append(std::string_view(&digits[--count], 1));
    return *this;
  }
  // Appends text, a number, or anything with view().
  template <class T>
  constexpr static_string& operator<<(T const& value) {
    if constexpr (requires { value.view(); })
      return append(value.view());
    else if constexpr (std::is_convertible_v<T const&, std::string_view>)
      return append(std::string_view(value));
    else
      return append(static_cast<std::size_t>(value));
  }

  [[nodiscard]] constexpr std::string_view view() const { return {chars, length}; }
  [[nodiscard]] constexpr bool empty() const { return length == 0; }
  [[nodiscard]] constexpr std::size_t size() const { return length; }

  template <std::size_t Other>
  [[nodiscard]] constexpr bool operator==(static_string<Other> const& other) const {
    return view() == other.view();
  }
  [[nodiscard]] constexpr bool operator==(std::string_view other) const { return view() == other; }
};

// A C++ identifier in ASCII: what a mesh axis may be called, so that names
// print unambiguously in layouts and plans.
[[nodiscard]] constexpr bool is_identifier(std::string_view s) {
  auto const letter = [](char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; };
  auto const digit = [](char c) { return c >= '0' && c <= '9'; };
  if (s.empty() || !letter(s.front())) return false;
  for (char c : s)
    if (!letter(c) && !digit(c)) return false;
  return true;
}

// Axis names are short identifiers: "dp", "tp", "pp", "sp".
inline constexpr std::size_t max_axis_name_length = 15;
using axis_name = static_string<max_axis_name_length>;

// Messages and notation: long enough for a 6-D layout on a 6-axis mesh.
using fixed_text = static_string<240>;

}  // namespace shardmesh
