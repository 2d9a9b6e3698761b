#pragma once
// What a training step held, per phase: for each memory category of the
// mesh's ledger (runtime/memory_ledger.hpp), the most held at once during
// the phase and what was held at its end. The trainer fills one per step;
// to_string prints it as a table.

#include "shardmesh/runtime/memory_ledger.hpp"

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace shardmesh::parallel {

struct phase_memory {
  std::string phase;
  std::array<std::size_t, memory_category_count> peak{};  // bytes, per category
  std::array<std::size_t, memory_category_count> end{};
  std::size_t peak_total = 0;  // the most held at once over all categories

  [[nodiscard]] std::size_t peak_of(memory_category c) const { return peak[static_cast<std::size_t>(c)]; }
  [[nodiscard]] std::size_t end_of(memory_category c) const { return end[static_cast<std::size_t>(c)]; }
};

struct memory_report {
  std::vector<phase_memory> phases;

  [[nodiscard]] phase_memory const& operator[](std::string_view phase) const {
    for (phase_memory const& p : phases)
      if (p.phase == phase) return p;
    throw std::out_of_range("memory report: no phase " + std::string(phase));
  }
};

// Records phases of a step from a ledger: begin() starts new high-water
// marks, end() folds them into the phase (a phase may run several times,
// once per micro-batch: its peak is the largest).
class memory_phases {
 public:
  memory_phases(memory_ledger& ledger, std::vector<std::string> const& names) : ledger_(&ledger) {
    for (std::string const& n : names) report_.phases.push_back({n, {}, {}, 0});
  }
  void begin() { ledger_->reset_peaks(); }
  void end(std::size_t phase) {
    phase_memory& p = report_.phases[phase];
    for (std::size_t c = 0; c < memory_category_count; ++c) {
      auto const category = static_cast<memory_category>(c);
      p.peak[c] = std::max(p.peak[c], ledger_->peak(category));
      p.end[c] = ledger_->current(category);
    }
    p.peak_total = std::max(p.peak_total, ledger_->peak_total());
  }
  [[nodiscard]] memory_report const& report() const { return report_; }

 private:
  memory_ledger* ledger_;
  memory_report report_;
};

// "12.5 KiB", "3.0 MiB": binary units, one decimal.
[[nodiscard]] inline std::string format_bytes(std::size_t bytes) {
  char const* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  auto value = static_cast<double>(bytes);
  std::size_t u = 0;
  while (value >= 1024 && u + 1 < std::size(units)) {
    value /= 1024;
    ++u;
  }
  char text[32];
  std::snprintf(text, sizeof text, u == 0 ? "%.0f %s" : "%.1f %s", value, units[u]);
  return text;
}

// One line per phase: the peak of each category and of their total.
[[nodiscard]] inline std::string to_string(memory_report const& r) {
  std::string out;
  char line[256];
  std::snprintf(line, sizeof line, "%-10s %12s %12s %16s %12s %12s %12s\n", "phase", "parameters", "gradients",
                "optimizer state", "activations", "workspace", "total");
  out += line;
  for (phase_memory const& p : r.phases) {
    std::snprintf(line, sizeof line, "%-10s %12s %12s %16s %12s %12s %12s\n", p.phase.c_str(),
                  format_bytes(p.peak[0]).c_str(), format_bytes(p.peak[1]).c_str(), format_bytes(p.peak[2]).c_str(),
                  format_bytes(p.peak[3]).c_str(), format_bytes(p.peak[4]).c_str(), format_bytes(p.peak_total).c_str());
    out += line;
  }
  return out;
}

}  // namespace shardmesh::parallel
