#include "svg.hpp"

#include "text.hpp"

#include <shardmesh/algebra/planner.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>
#include <vector>

namespace plan_tool {

namespace {

using namespace shardmesh;

constexpr double margin = 24;
constexpr double gap = 28;
constexpr double char_width = 0.6;  // of the font size, for a monospaced font
constexpr char const* font = "DejaVu Sans Mono, Menlo, Consolas, Liberation Mono, monospace";

std::string num(double v) {
  char out[32];
  std::snprintf(out, sizeof out, "%.1f", v);
  std::string s = out;
  if (s.size() > 2 && s.ends_with(".0")) s.resize(s.size() - 2);
  return s;
}

std::string escaped(std::string_view s) {
  std::string out;
  for (char const c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

double text_width(std::string_view s, double size) { return static_cast<double>(s.size()) * char_width * size; }

// A colour per rank: Tableau 10, then hues a golden angle apart.
std::string colour(std::size_t rank) {
  static char const* const palette[] = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f",
                                        "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"};
  if (rank < std::size(palette)) return palette[rank];
  return "hsl(" + num(std::fmod(static_cast<double>(rank) * 137.508, 360.0)) + ",55%,62%)";
}

std::string text(double x, double y, double size, std::string_view s, std::string_view extra = "") {
  return "<text x=\"" + num(x) + "\" y=\"" + num(y) + "\" font-size=\"" + num(size) + "\"" +
         (extra.empty() ? "" : " ") + std::string(extra) + ">" + escaped(s) + "</text>\n";
}

std::string pattern_id(std::vector<std::size_t> const& ranks) {
  std::string id = "ranks";
  for (std::size_t r : ranks) id += "_" + std::to_string(r);
  return id;
}

// Diagonal stripes, one per rank, for blocks held by several ranks.
std::string stripes(std::vector<std::size_t> const& ranks) {
  double const w = 7;
  std::string out = "<pattern id=\"" + pattern_id(ranks) + "\" patternUnits=\"userSpaceOnUse\" width=\"" +
                    num(w * static_cast<double>(ranks.size())) + "\" height=\"" + num(w) +
                    "\" patternTransform=\"rotate(45)\">";
  for (std::size_t i = 0; i < ranks.size(); ++i)
    out += "<rect x=\"" + num(w * static_cast<double>(i)) + "\" y=\"0\" width=\"" + num(w) + "\" height=\"" + num(w) +
           "\" fill=\"" + colour(ranks[i]) + "\"/>";
  return out + "</pattern>\n";
}

// Pixel sizes of segments: in proportion to their extents over `total`,
// each at least its minimum.
std::vector<double> apportion(std::vector<segment> const& segments, double total, std::vector<double> const& minimum) {
  double const extent = static_cast<double>(segments.back().end - segments.front().begin);
  std::vector<double> out;
  for (std::size_t i = 0; i < segments.size(); ++i)
    out.push_back(std::max(minimum[i], total * static_cast<double>(segments[i].end - segments[i].begin) / extent));
  return out;
}

struct picture {
  std::vector<double> widths;
  std::vector<double> heights;
  double width = 0;
  double height = 0;
};

constexpr double label_size = 12;

picture measure(block_grid const& grid) {
  picture p;
  double w = 320;
  double h = 56;
  if (grid.rank == 2) {
    double const aspect = static_cast<double>(grid.rows.back().end) / static_cast<double>(grid.cols.back().end);
    w = 240;
    h = 240 * aspect;
    if (h > 300) {
      h = 300;
      w = std::max(80.0, 300 / aspect);
    }
    h = std::max(h, 48.0);
  }
  std::vector<double> min_width(grid.cols.size(), 0);
  for (std::size_t i = 0; i < grid.rows.size(); ++i)
    for (std::size_t j = 0; j < grid.cols.size(); ++j)
      min_width[j] = std::max(min_width[j], text_width(grid.at(i, j).label(), label_size) + 12);
  p.widths = apportion(grid.cols, w, min_width);
  p.heights = apportion(grid.rows, h, std::vector<double>(grid.rows.size(), label_size + 12));
  for (double x : p.widths) p.width += x;
  for (double y : p.heights) p.height += y;
  return p;
}

std::string draw_grid(block_grid const& grid, picture const& p, double x0, double y0) {
  std::string out;
  double y = y0;
  for (std::size_t i = 0; i < grid.rows.size(); ++i) {
    double x = x0;
    for (std::size_t j = 0; j < grid.cols.size(); ++j) {
      block const& b = grid.at(i, j);
      std::vector<std::size_t> const ranks = b.ranks();
      std::string const fill = ranks.size() == 1 ? colour(ranks[0]) : "url(#" + pattern_id(ranks) + ")";
      double const w = p.widths[j];
      double const h = p.heights[i];
      out += "<rect x=\"" + num(x) + "\" y=\"" + num(y) + "\" width=\"" + num(w) + "\" height=\"" + num(h) +
             "\" fill=\"" + fill + "\" stroke=\"#222\" stroke-width=\"1\"/>\n";
      if (b.partial) {  // a dashed frame on a white one, visible over any stripes
        std::string const frame = "<rect x=\"" + num(x + 4) + "\" y=\"" + num(y + 4) + "\" width=\"" + num(w - 8) +
                                  "\" height=\"" + num(h - 8) + "\" fill=\"none\" ";
        out += frame + "stroke=\"#fff\" stroke-width=\"4\"/>\n";
        out += frame + "stroke=\"#222\" stroke-width=\"2\" stroke-dasharray=\"6 4\"/>\n";
      }
      std::string const label = b.label();
      double const lw = text_width(label, label_size) + 8;
      if (lw <= w - 4 && label_size + 6 <= h - 4) {
        out += "<rect x=\"" + num(x + (w - lw) / 2) + "\" y=\"" + num(y + h / 2 - label_size * 0.75) + "\" width=\"" +
               num(lw) + "\" height=\"" + num(label_size * 1.5) + "\" rx=\"3\" fill=\"#fff\" fill-opacity=\"0.88\"/>\n";
        out += text(x + w / 2, y + h / 2 + label_size * 0.35, label_size, label, "text-anchor=\"middle\"");
      }
      x += w;
    }
    y += p.heights[i];
  }
  return out + "<rect x=\"" + num(x0) + "\" y=\"" + num(y0) + "\" width=\"" + num(p.width) + "\" height=\"" +
         num(p.height) + "\" fill=\"none\" stroke=\"#222\" stroke-width=\"2\"/>\n";
}

struct line {
  std::string s;
  double size;
  std::string style;
  double indent = 0;  // SVG collapses leading spaces
};

}  // namespace

namespace {

// The plan between the pictures: per step its collective, what a rank
// receives, and the layout it leaves.
std::vector<line> step_lines(request const& r, plan_report const& p) {
  std::vector<line> steps;
  for (std::size_t i = 0; i < p.steps.size(); ++i) {
    plan_step const& s = p.steps[i].step;
    steps.push_back(
        {std::to_string(i + 1) + ". " + std::string(to_string(r.mesh, s).view()), 12, "font-weight=\"bold\""});
    std::string const bytes = most(p.steps[i].bytes) == 0 ? "" : ", " + per_rank_text(p.steps[i].bytes);
    double const indent = text_width("1. ", 12);
    steps.push_back({std::string(bytes_phrase(r.mesh, s).view()) + bytes, 11, "fill=\"#444\"", indent});
    steps.push_back({"now " + std::string(to_string(r.mesh, s.after).view()), 11, "fill=\"#444\"", indent});
  }
  if (steps.empty()) steps.push_back({"no steps", 12, "font-weight=\"bold\""});
  return steps;
}

// The blocks several ranks hold (drawn striped), and the notes that explain the pictures' marks.
struct marks {
  std::set<std::vector<std::size_t>> striped;
  std::vector<std::string> notes;
};
marks marks_of(block_grid const& before, block_grid const& after) {
  marks m;
  bool any_partial = false;
  for (block_grid const* g : {&before, &after})
    for (block const& b : g->blocks) {
      if (b.ranks().size() > 1) m.striped.insert(b.ranks());
      any_partial = any_partial || b.partial;
    }
  if (!m.striped.empty()) m.notes.push_back("stripes: a block held by several ranks, in their colours");
  if (any_partial) m.notes.push_back("dashed, P a+b: partial values, combined over the ranks joined by +");
  return m;
}

// One swatch per rank with its mesh coordinates, as many to a row as fit.
class rank_legend {
 public:
  rank_legend(mesh_shape const& mesh, double width) {
    for (std::size_t rank = 0; rank < mesh.size(); ++rank) {
      entries_.push_back("rank " + std::to_string(rank) + ": " + coordinates_text(mesh, rank));
      item_ = std::max(item_, 22 + text_width(entries_.back(), 11) + 18);
    }
    per_row_ = std::max<std::size_t>(1, static_cast<std::size_t>((width - 2 * margin) / item_));
  }

  [[nodiscard]] std::size_t rows() const { return (entries_.size() + per_row_ - 1) / per_row_; }

  [[nodiscard]] std::string draw(double top) const {
    std::string out;
    for (std::size_t i = 0; i < entries_.size(); ++i) {
      double const x = margin + item_ * static_cast<double>(i % per_row_);
      double const y = top + 22 * static_cast<double>(i / per_row_);
      out += "<rect x=\"" + num(x) + "\" y=\"" + num(y - 12) + "\" width=\"16\" height=\"16\" fill=\"" + colour(i) +
             "\" stroke=\"#222\"/>\n";
      out += text(x + 22, y + 1, 11, entries_[i]);
    }
    return out;
  }

 private:
  std::vector<std::string> entries_;
  double item_ = 0;
  std::size_t per_row_ = 1;
};

}  // namespace

std::string svg(request const& r, plan_report const& p, block_grid const& before, block_grid const& after) {
  picture const left = measure(before);
  picture const right = measure(after);
  std::vector<line> const steps = step_lines(r, p);
  double middle = 180;
  for (line const& l : steps) middle = std::max(middle, l.indent + text_width(l.s, l.size) + 16);
  double const steps_height = 18 * static_cast<double>(steps.size()) + 24;

  std::string const title = tensor_name(r) + " on mesh " + std::string(to_string(r.mesh).view()) + ": " +
                            std::string(to_string(r.from).view()) + " -> " + std::string(to_string(p.target).view());
  std::string const before_title = "before: " + std::string(to_string(before.layout).view());
  std::string const after_title = "after: " + std::string(to_string(after.layout).view());
  double const left_width = std::max(left.width, text_width(before_title, 13));
  double const right_width = std::max(right.width, text_width(after_title, 13));
  double const body = std::max({left.height, right.height, steps_height});

  // Summary and legend below.
  std::vector<std::string> summary;
  {
    std::string const s = summary_text(p);
    std::size_t const cut = s.find('\n');
    summary = {s.substr(0, cut), s.substr(cut + 1)};
  }
  auto const [striped, notes] = marks_of(before, after);

  double width = margin + left_width + gap + middle + gap + right_width + margin;
  for (std::string const& s : summary) width = std::max(width, 2 * margin + text_width(s, 12));
  width = std::max(width, 2 * margin + text_width(title, 15));
  rank_legend const legend(r.mesh, width);

  double const title_y = margin + 15;
  double const panel_title_y = title_y + 30;
  double const body_y = panel_title_y + 12;
  double const summary_y = body_y + body + 30;
  double const legend_y = summary_y + 18 * static_cast<double>(summary.size()) + 12;
  double const notes_y = legend_y + 22 * static_cast<double>(legend.rows()) + 8;
  double const height = notes_y + 18 * static_cast<double>(notes.size()) + margin - 20;

  std::string out = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + num(width) + "\" height=\"" + num(height) +
                    "\" viewBox=\"0 0 " + num(width) + " " + num(height) + "\" font-family=\"" + font + "\">\n";
  out += "<title>" + escaped(title) + "</title>\n<defs>\n";
  for (auto const& ranks : striped) out += stripes(ranks);
  out +=
      "<marker id=\"arrow\" viewBox=\"0 0 10 10\" refX=\"9\" refY=\"5\" markerWidth=\"8\" markerHeight=\"8\" "
      "orient=\"auto\"><path d=\"M0,0 L10,5 L0,10 z\" fill=\"#222\"/></marker>\n</defs>\n";
  out += "<rect width=\"100%\" height=\"100%\" fill=\"#fff\"/>\n";
  out += text(margin, title_y, 15, title, "font-weight=\"bold\"");

  double const left_x = margin;
  double const middle_x = left_x + left_width + gap;
  double const right_x = middle_x + middle + gap;
  out += text(left_x, panel_title_y, 13, before_title);
  out += text(right_x, panel_title_y, 13, after_title);
  out += draw_grid(before, left, left_x, body_y + (body - left.height) / 2);
  out += draw_grid(after, right, right_x, body_y + (body - right.height) / 2);

  double y = body_y + (body - steps_height) / 2 + 14;
  for (line const& l : steps) {
    out += text(middle_x + 8 + l.indent, y, l.size, l.s, l.style);
    y += 18;
  }
  out += "<line x1=\"" + num(middle_x) + "\" y1=\"" + num(y) + "\" x2=\"" + num(middle_x + middle) + "\" y2=\"" +
         num(y) + "\" stroke=\"#222\" stroke-width=\"2\" marker-end=\"url(#arrow)\"/>\n";

  for (std::size_t i = 0; i < summary.size(); ++i)
    out += text(margin, summary_y + 18 * static_cast<double>(i), 12, summary[i]);
  out += legend.draw(legend_y);
  for (std::size_t i = 0; i < notes.size(); ++i)
    out += text(margin, notes_y + 18 * static_cast<double>(i), 11, notes[i], "fill=\"#444\"");
  return out + "</svg>\n";
}

}  // namespace plan_tool
