#include "draw.hpp"

#include <algorithm>
#include <cmath>
#include <string_view>
#include <vector>

namespace plan_tool {

namespace {

// Sizes of segments sharing `total` in proportion to their extents, each at least its minimum.
std::vector<std::size_t> apportion(std::vector<segment> const& segments, std::size_t total,
                                   std::vector<std::size_t> const& minimum) {
  std::size_t const extent = segments.back().end - segments.front().begin;
  std::vector<std::size_t> out;
  for (std::size_t i = 0; i < segments.size(); ++i) {
    double const share = static_cast<double>(segments[i].end - segments[i].begin) / static_cast<double>(extent);
    out.push_back(std::max(minimum[i], static_cast<std::size_t>(std::lround(share * static_cast<double>(total)))));
  }
  return out;
}

std::string repeat(std::string_view s, std::size_t n) {
  std::string out;
  for (std::size_t i = 0; i < n; ++i) out += s;
  return out;
}

// A border line: left, fill, joint, right, over the columns' widths.
std::string border(std::vector<std::size_t> const& widths, std::string_view left, std::string_view joint,
                   std::string_view right) {
  std::string out(left);
  for (std::size_t j = 0; j < widths.size(); ++j)
    out += repeat("─", widths[j]) + std::string(j + 1 < widths.size() ? joint : right);
  return out + "\n";
}

}  // namespace

std::string draw(block_grid const& grid) {
  // Interior size of the whole picture: terminal cells are about twice as
  // tall as wide, so a square matrix gets 2.5 times as many columns as lines.
  std::size_t const rows_extent = grid.rows.back().end;
  std::size_t const cols_extent = grid.cols.back().end;
  std::size_t height = 1;
  std::size_t width = 48;
  if (grid.rank == 2) {
    double const aspect = static_cast<double>(cols_extent) / static_cast<double>(rows_extent);
    height = 6;
    width = static_cast<std::size_t>(std::lround(2.5 * 6 * aspect));
    if (width > 64) {
      width = 64;
      height = static_cast<std::size_t>(std::lround(64 / (2.5 * aspect)));
    }
    width = std::max<std::size_t>(width, 16);
  }
  std::vector<std::size_t> label_width(grid.cols.size(), 0);
  for (std::size_t i = 0; i < grid.rows.size(); ++i)
    for (std::size_t j = 0; j < grid.cols.size(); ++j)
      label_width[j] = std::max(label_width[j], grid.at(i, j).label().size() + 2);
  std::vector<std::size_t> const widths = apportion(grid.cols, width, label_width);
  std::vector<std::size_t> const heights = apportion(grid.rows, height, std::vector<std::size_t>(grid.rows.size(), 1));

  std::string out = border(widths, "┌", "┬", "┐");
  for (std::size_t i = 0; i < grid.rows.size(); ++i) {
    if (i > 0) out += border(widths, "├", "┼", "┤");
    for (std::size_t line = 0; line < heights[i]; ++line) {
      out += "│";
      for (std::size_t j = 0; j < grid.cols.size(); ++j) {
        std::string text = line == (heights[i] - 1) / 2 ? grid.at(i, j).label() : "";
        std::size_t const left = (widths[j] - text.size()) / 2;
        out += std::string(left, ' ') + text + std::string(widths[j] - left - text.size(), ' ') + "│";
      }
      out += "\n";
    }
  }
  return out + border(widths, "└", "┴", "┘");
}

}  // namespace plan_tool
