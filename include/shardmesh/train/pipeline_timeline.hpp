#pragma once
// A pipeline step as it ran: every stage's compute actions with their
// measured start and end (trainer::timeline(), with options.timeline), its
// idle share, the mean time of each kind of action per stage, and a picture
// of it next to the simulation of the same schedule with those mean times
// (pipeline_simulation.hpp): one row per stage, one cell per action
// labelled as the seed draws them (F3: forward of micro-batch 3; B, I, W
// the backward, its input and its weight gradient; .1 chunk 1 when
// interleaved), idle time left blank.
//
//   auto t = parallel::gather_timeline(trainer, mesh);   // collective; rank 0 gets it
//   if (t) write(file, timeline_svg(*t, simulate(t->schedule, t->mean_costs())));

#include "shardmesh/comm/communicator.hpp"
#include "shardmesh/runtime/device_mesh.hpp"
#include "shardmesh/strategy/pipeline_schedule.hpp"
#include "shardmesh/strategy/pipeline_simulation.hpp"

#include <mpi.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

namespace shardmesh::parallel {

struct pipeline_timeline {
  pipeline_schedule schedule;
  std::vector<std::vector<timed_action>> stages;  // per stage, its compute actions in order

  [[nodiscard]] double makespan() const {
    double end = 0;
    for (auto const& s : stages)
      for (timed_action const& a : s) end = std::max(end, a.end);
    return end;
  }
  // Sum over the stages of (makespan - busy) / (p x makespan): the definition the simulation uses.
  [[nodiscard]] double idle_share() const {
    double const t = makespan();
    double idle = 0;
    for (auto const& s : stages) {
      idle += t;
      for (timed_action const& a : s) idle -= a.end - a.start;
    }
    return t > 0 ? idle / (static_cast<double>(stages.size()) * t) : 0;
  }
  // Each stage's mean forward, input-gradient and weight-gradient time (a
  // whole backward counted as input gradient, weight 0), for simulate().
  [[nodiscard]] action_costs mean_costs() const {
    action_costs c;
    for (auto const& s : stages) {
      std::array<double, 3> sum{}, count{};
      for (timed_action const& a : s) {
        std::size_t const k = a.action.op == pipeline_op::forward           ? 0
                              : a.action.op == pipeline_op::backward_weight ? 2
                                                                            : 1;
        sum[k] += a.end - a.start;
        count[k] += 1;
      }
      c.per_stage.push_back({count[0] > 0 ? sum[0] / count[0] : 0, count[1] > 0 ? sum[1] / count[1] : 0,
                             count[2] > 0 ? sum[2] / count[2] : 0});
    }
    return c;
  }
};

// Collective over the mesh: the timelines of the trainer's last step from
// the ranks at dp = tp = 0 of every stage, on rank 0 (nullopt elsewhere).
template <class Trainer>
std::optional<pipeline_timeline> gather_timeline(Trainer const& trainer, device_mesh const& mesh) {
  std::size_t const pp = mesh.shape().find("pp");
  // Rank 0's stage group: the ranks that differ from it only along "pp".
  bool on_axis = true;
  for (std::size_t a = 0; a < mesh.shape().ndim; ++a)
    if (a != pp && mesh.coordinates()[a] != 0) on_axis = false;
  if (!on_axis) return std::nullopt;
  std::vector<double> mine;  // op, micro, chunk, start, end per action
  for (timed_action const& a : trainer.timeline())
    mine.insert(mine.end(), {static_cast<double>(a.action.op), static_cast<double>(a.action.micro),
                             static_cast<double>(a.action.chunk), a.start, a.end});
  communicator const& group = pp == npos ? mesh.comm() : mesh.group(axis_set::of(pp));
  int const n = group.size(), count = static_cast<int>(mine.size());
  std::vector<int> counts(static_cast<std::size_t>(n)), offsets(static_cast<std::size_t>(n), 0);
  MPI_Gather(&count, 1, MPI_INT, counts.data(), 1, MPI_INT, 0, group.get());
  for (std::size_t r = 1; r < counts.size(); ++r) offsets[r] = offsets[r - 1] + counts[r - 1];
  std::vector<double> all(group.rank() == 0 ? static_cast<std::size_t>(offsets.back() + counts.back()) : 0);
  MPI_Gatherv(mine.data(), count, MPI_DOUBLE, all.data(), counts.data(), offsets.data(), MPI_DOUBLE, 0, group.get());
  if (group.rank() != 0) return std::nullopt;
  pipeline_timeline t{trainer.schedule(), std::vector<std::vector<timed_action>>(static_cast<std::size_t>(n))};
  for (std::size_t r = 0; r < t.stages.size(); ++r)
    for (int i = offsets[r]; i < offsets[r] + counts[r]; i += 5) {
      double const* v = all.data() + i;
      t.stages[r].push_back(
          {{static_cast<pipeline_op>(v[0]), static_cast<std::size_t>(v[1]), static_cast<std::size_t>(v[2])},
           v[3],
           v[4]});
    }
  return t;
}

namespace detail {

// "F3", "B3.1" (chunk 1), as the seed labels a cell.
inline std::string cell_label(pipeline_action const& a, std::size_t chunks) {
  std::string label = std::string(1, letter(a.op)) + std::to_string(a.micro);
  if (chunks > 1) label += "." + std::to_string(a.chunk);
  return label;
}

inline char const* cell_colour(pipeline_op op) {
  switch (op) {
    case pipeline_op::forward: return "#8fb8de";
    case pipeline_op::backward_weight: return "#f2c57c";
    default: return "#9ccc8f";
  }
}

// One panel: a row per stage, the actions as cells on a time axis of `scale` pixels per second.
inline void draw_panel(std::string& svg, std::string const& title, std::vector<std::vector<timed_action>> const& rows,
                       std::size_t chunks, double scale, double top) {
  constexpr double left = 90, row = 30;
  char buffer[512];
  std::snprintf(buffer, sizeof buffer, "<text x='%g' y='%g' font-weight='bold'>%s</text>\n", left, top + 14,
                title.c_str());
  svg += buffer;
  for (std::size_t s = 0; s < rows.size(); ++s) {
    double const y = top + 24 + static_cast<double>(s) * row;
    std::snprintf(buffer, sizeof buffer, "<text x='8' y='%g'>stage %zu</text>\n", y + 19, s);
    svg += buffer;
    for (timed_action const& a : rows[s]) {
      double const x = left + a.start * scale, w = std::max(1.0, (a.end - a.start) * scale);
      std::snprintf(buffer, sizeof buffer,
                    "<rect x='%.2f' y='%g' width='%.2f' height='%g' fill='%s' stroke='#333' stroke-width='0.5'/>\n", x,
                    y, w, row - 4, cell_colour(a.action.op));
      svg += buffer;
      std::string const label = cell_label(a.action, chunks);
      if (w >= 7.0 * static_cast<double>(label.size()))
        std::snprintf(buffer, sizeof buffer, "<text x='%.2f' y='%g' text-anchor='middle'>%s</text>\n", x + w / 2,
                      y + 17, label.c_str());
      else
        buffer[0] = '\0';
      svg += buffer;
    }
  }
}

}  // namespace detail

// The measured timeline above the simulated one, on one time axis, with
// both idle shares in the titles.
[[nodiscard]] inline std::string timeline_svg(pipeline_timeline const& measured, pipeline_simulation const& predicted) {
  constexpr double width = 1000, left = 90;
  double const span = std::max(measured.makespan(), predicted.makespan);
  double const scale = span > 0 ? (width - left - 20) / span : 1;
  std::size_t const p = measured.stages.size();
  double const panel = 34 + static_cast<double>(p) * 30;
  double const height = 2 * panel + 40;
  char buffer[256];
  std::string svg;
  std::snprintf(buffer, sizeof buffer,
                "<svg xmlns='http://www.w3.org/2000/svg' width='%g' height='%g' font-family='sans-serif' "
                "font-size='12'>\n<rect width='100%%' height='100%%' fill='white'/>\n",
                width, height);
  svg += buffer;
  auto const& s = measured.schedule;
  std::snprintf(buffer, sizeof buffer, "%s, p = %zu, m = %zu, v = %zu: measured, idle %.1f%%",
                std::string(s.name.view()).c_str(), s.stages, s.micro_batches, s.chunks, 100 * measured.idle_share());
  detail::draw_panel(svg, buffer, measured.stages, s.chunks, scale, 0);
  std::snprintf(buffer, sizeof buffer, "simulated with the measured mean action times, idle %.1f%%",
                100 * predicted.idle_share());
  detail::draw_panel(svg, buffer, predicted.compute, s.chunks, scale, panel);
  std::snprintf(buffer, sizeof buffer,
                "<text x='%g' y='%g'>0</text><text x='%g' y='%g' text-anchor='end'>%.1f ms</text>\n", left, height - 12,
                width - 20, height - 12, 1e3 * span);
  svg += buffer;
  return svg + "</svg>\n";
}

}  // namespace shardmesh::parallel
