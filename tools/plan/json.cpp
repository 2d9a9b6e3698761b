#include "json.hpp"

#include <shardmesh/algebra/plan_step.hpp>
#include <shardmesh/algebra/planner.hpp>

#include <cstdio>
#include <string_view>

namespace plan_tool {

using namespace shardmesh;

std::string quoted(std::string_view s) {
  std::string out = "\"";
  for (char const c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\u%04x", static_cast<unsigned>(c));
      out += hex;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

std::string quoted(fixed_text const& s) { return quoted(s.view()); }

std::string numbers(std::vector<std::size_t> const& values) {
  std::string out = "[";
  for (std::size_t i = 0; i < values.size(); ++i) out += (i == 0 ? "" : ", ") + std::to_string(values[i]);
  return out + "]";
}

namespace {

// ["dp", "tp"]: the step's axes in mesh order.
std::string axes(mesh_shape const& mesh, axis_set set) {
  std::string out = "[";
  for (std::size_t a = 0; a < mesh.ndim; ++a)
    if (set.contains(a)) out += (out.size() == 1 ? "" : ", ") + quoted(mesh[a].name.view());
  return out + "]";
}

// The fields every document starts with, each line ending in ",\n".
std::string head(request const& r) {
  std::vector<std::size_t> shape(r.global.begin(), r.global.begin() + static_cast<std::ptrdiff_t>(r.rank));
  return "  \"tensor\": " + quoted(tensor_name(r)) + ",\n  \"mesh\": " + quoted(to_string(r.mesh)) +
         ",\n  \"ranks\": " + std::to_string(r.mesh.size()) + ",\n  \"shape\": " + numbers(shape) +
         ",\n  \"type\": " + quoted(r.type.name) + ",\n  \"element_bytes\": " + std::to_string(r.type.bytes) +
         ",\n  \"from\": " + quoted(to_string(r.from)) + ",\n";
}

}  // namespace

std::string number(double v) {
  char out[32];
  std::snprintf(out, sizeof out, "%.6g", v);
  return out;
}

std::string plan_fields(request const& r, plan_report const& p, std::string const& pad) {
  std::string out = pad + "\"to\": " + quoted(to_string(p.target)) + ",\n" + pad + "\"steps\": [";
  for (std::size_t i = 0; i < p.steps.size(); ++i) {
    plan_step const& s = p.steps[i].step;
    out += (i == 0 ? "\n" : ",\n") + pad + "  {\"before\": " + quoted(to_string(r.mesh, s.before)) +
           ", \"after\": " + quoted(to_string(r.mesh, s.after)) + ", \"step\": " + quoted(to_string(r.mesh, s)) +
           ", \"kind\": " + quoted(to_string(s.kind)) + ", \"axes\": " + axes(r.mesh, s.axes) +
           ", \"of_local\": " + quoted(bytes_phrase(r.mesh, s)) + ", \"bytes_per_rank\": " + numbers(p.steps[i].bytes) +
           "}";
  }
  out += p.steps.empty() ? "],\n" : "\n" + pad + "],\n";
  double const cost = static_cast<double>(p.plan.cost) / static_cast<double>(global_units(r.mesh));
  return out + pad + "\"bytes_per_rank\": " + numbers(p.total) + ",\n" + pad +
         "\"bytes_busiest_rank\": " + std::to_string(p.most_received()) + ",\n" + pad +
         "\"lower_bound_bytes\": " + std::to_string(p.lower_bound) + ",\n" + pad +
         "\"peak_extra_bytes\": " + std::to_string(p.peak_extra) + ",\n" + pad + "\"planned_cost\": " + number(cost) +
         "\n";
}

std::string plan_json(request const& r, plan_report const& p) {
  return "{\n" + head(r) + plan_fields(r, p, "  ") + "}\n";
}

std::string targets_json(request const& r, std::vector<ranked_target> const& targets) {
  std::string out = "{\n" + head(r) + "  \"targets\": [";
  for (std::size_t i = 0; i < targets.size(); ++i)
    out += std::string(i == 0 ? "\n" : ",\n") +
           "    {\n      \"source\": " + (targets[i].is_source ? "true" : "false") + ",\n" +
           plan_fields(r, targets[i].report, "      ") + "    }";
  return out + (targets.empty() ? "]\n}\n" : "\n  ]\n}\n");
}

}  // namespace plan_tool
