#include "sizes.hpp"

#include <bit>
#include <cstdio>
#include <limits>

namespace bench_tool {

std::size_t parse_bytes(std::string_view text) {
  std::size_t at = 0;
  std::size_t n = 0;
  while (at < text.size() && text[at] >= '0' && text[at] <= '9') {
    if (n > (std::size_t{1} << 50)) return 0;
    n = n * 10 + static_cast<std::size_t>(text[at] - '0');
    ++at;
  }
  if (at == 0) return 0;
  std::string_view const unit = text.substr(at);
  std::size_t scale = 0;
  if (unit.empty() || unit == "B")
    scale = 1;
  else if (unit == "KiB")
    scale = std::size_t{1} << 10;
  else if (unit == "MiB")
    scale = std::size_t{1} << 20;
  else if (unit == "GiB")
    scale = std::size_t{1} << 30;
  if (scale == 0 || n > std::numeric_limits<std::size_t>::max() / scale / 2) return 0;
  return n * scale;
}

std::string parse_sweep(std::string_view text, std::size_t element_bytes, std::vector<std::size_t>& sizes) {
  std::string const quoted = "--sweep " + std::string(text);
  std::size_t const dots = text.find("..");
  std::string_view const first_text = text.substr(0, dots);
  std::string_view const last_text = dots == std::string_view::npos ? first_text : text.substr(dots + 2);
  std::size_t const first = parse_bytes(first_text);
  std::size_t const last = parse_bytes(last_text);
  for (auto const& [value, what] : {std::pair{first, first_text}, std::pair{last, last_text}}) {
    if (value == 0) return quoted + ": \"" + std::string(what) + "\" is no size (e.g. 65536, 64KiB, 256MiB, 1GiB)";
    if (!std::has_single_bit(value)) return quoted + ": " + std::string(what) + " is no power of two";
    if (value < element_bytes)
      return quoted + ": " + std::string(what) + " is less than one element (" + std::to_string(element_bytes) + " B)";
  }
  if (last < first) return quoted + ": the last size is less than the first";
  sizes.clear();
  for (std::size_t s = first; s <= last; s *= 2) sizes.push_back(s);
  return "";
}

shardmesh::tensor_index shape_for(std::size_t bytes, std::size_t element_bytes, std::size_t rank) {
  auto const k = static_cast<std::size_t>(std::countr_zero(bytes / element_bytes));
  shardmesh::tensor_index shape{};
  for (std::size_t d = 0; d < rank; ++d) shape[d] = std::size_t{1} << (k / rank + (d < k % rank ? 1 : 0));
  return shape;
}

std::string size_label(std::size_t bytes) {
  char const* const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  std::size_t unit = 0;
  double value = static_cast<double>(bytes);
  while (value >= 1024 && unit + 1 < std::size(units)) {
    value /= 1024;
    ++unit;
  }
  char out[32];
  std::snprintf(out, sizeof out, "%.4g%s", value, units[unit]);
  return out;
}

}  // namespace bench_tool
