#include "plan_page.hpp"

#include "plan_page_template.hpp"  // generated from plan_page.html: plan_page_template

#include <shardmesh/algebra/owned_blocks.hpp>
#include <shardmesh/errors.hpp>

#include <algorithm>
#include <map>

namespace planner_tool {

using json = nlohmann::ordered_json;
using namespace shardmesh;
using namespace shardmesh::parallel;

namespace {

// Stage meshes above this many ranks show no shards (the page would grow with the ranks).
constexpr std::size_t max_shard_ranks = 64;

// "0:512, 256:512": the global index ranges of each block a rank holds, blocks joined by " + ".
std::string shards_text(mesh_shape const& mesh, layout const& placement, std::vector<std::size_t> const& extents,
                        std::size_t rank) {
  tensor_index global{};
  std::copy(extents.begin(), extents.end(), global.begin());
  std::vector<owned_block> const blocks = owned_blocks(mesh, bind(mesh, placement), global, rank);
  std::string out;
  for (std::size_t b = 0; b < blocks.size(); ++b) {
    if (b == 3) return out + " + " + std::to_string(blocks.size() - 3) + " more blocks";
    out += b > 0 ? " + " : "";
    for (std::size_t d = 0; d < extents.size(); ++d)
      out += (d > 0 ? ", " : "") + std::to_string(blocks[b].global_offset[d]) + ":" +
             std::to_string(blocks[b].global_offset[d] + blocks[b].extents[d]);
  }
  return blocks.empty() ? "nothing" : out;
}

template <class Spec>
json tensor_json(mesh_shape const& mesh, Spec const& t) {
  json shards = json::array();
  if (mesh.size() <= max_shard_ranks)
    for (std::size_t r = 0; r < mesh.size(); ++r) shards.push_back(shards_text(mesh, t.placement, t.extents, r));
  return {{"name", t.name},
          {"extents", t.extents},
          {"layout", std::string(to_string(t.placement).view())},
          {"shards", shards}};
}

// What the stages hold on the plan's stage mesh: shared by every plan with the same stage mesh and micro-batch.
json view_json(memory_model const& memory, training_plan const& plan) {
  mesh_shape const mesh = memory_model::stage_mesh(plan);
  json axes = json::array();
  for (std::size_t a = 0; a < mesh.ndim; ++a) axes.push_back({std::string(mesh[a].name.view()), mesh.extent(a)});
  json stages = json::array();
  for (stage_description const& st : memory.stages(plan)) {
    json parameters = json::array(), saved = json::array();
    for (parameter_spec const& p : st.parameters) parameters.push_back(tensor_json(mesh, p));
    for (saved_spec const& s : st.saved) saved.push_back(tensor_json(mesh, s));
    stages.push_back({{"name", st.name}, {"parameters", parameters}, {"saved", saved}});
  }
  return {{"mesh", axes}, {"stages", stages}};
}

std::string view_key(training_plan const& p) {
  return std::to_string(p.dp) + "," + std::to_string(p.cp) + "," + std::to_string(p.ep) + "," + std::to_string(p.tp) +
         "," + std::to_string(p.micro_batch) + "," + std::string(to_string(p.recompute));
}

json actions_json(std::vector<std::vector<timed_action>> const& stages) {
  json out = json::array();
  for (auto const& actions : stages) {
    json row = json::array();
    for (timed_action const& a : actions)
      row.push_back({{"op", std::string(1, letter(a.action.op))},
                     {"micro", a.action.micro},
                     {"chunk", a.action.chunk},
                     {"start", a.start},
                     {"end", a.end}});
    out.push_back(row);
  }
  return out;
}

// The ranks of each pipeline stage, numbered row-major over dp x cp x ep x pp x tp.
std::vector<std::string> stage_ranks(training_plan const& plan) {
  std::vector<std::string> out(plan.pp);
  for (std::size_t s = 0; s < plan.pp; ++s)
    for (std::size_t r = 0; r < plan.dp * plan.cp * plan.ep; ++r)
      for (std::size_t t = 0; t < plan.tp; ++t)
        out[s] += (out[s].empty() ? "" : ",") + std::to_string((r * plan.pp + s) * plan.tp + t);
  return out;
}

// "gpt, 4 layers, hidden 128, sequence 64" (and ", 4 experts" where it has them).
std::string model_summary(json const& m) {
  std::string out = m["architecture"].get<std::string>() + ", " + std::to_string(m["layers"].get<std::size_t>()) +
                    " layers, hidden " + std::to_string(m["hidden"].get<std::size_t>()) + ", sequence " +
                    std::to_string(m["sequence"].get<std::size_t>());
  if (m.contains("experts") && m["experts"].get<std::size_t>() > 0)
    out += ", " + std::to_string(m["experts"].get<std::size_t>()) + " experts";
  return out;
}

bool same_plan(json const& entry, json const& ran) {
  for (auto const& [key, value] : ran.items())
    if (!entry.contains(key) || entry[key] != value) return false;
  return true;
}

// The report's measurements, keyed as the page reads them.
json measured_json(json const& report) {
  std::vector<double> steps = report.at("step_seconds").get<std::vector<double>>();
  if (steps.empty()) throw invalid_option_error("the report has no steps");
  std::ranges::sort(steps);
  json out{{"median_step_seconds", steps[steps.size() / 2]}, {"peak_bytes", report.at("peak_bytes")}};
  if (report.contains("timeline")) out["timeline"] = report["timeline"];
  return out;
}

}  // namespace

std::string plan_page(json document, memory_model const& memory, time_model const& time,
                      std::vector<judged_plan> const& plans, std::optional<json> const& report) {
  json& entries = document["plans"];
  json views = json::object();
  std::size_t feasible = 0;
  for (std::size_t i = 0; i < plans.size(); ++i) {
    training_plan const& p = plans[i].plan;
    json& e = entries[i];
    e["id"] = i;
    e["label"] = to_string(p);
    std::string const key = view_key(p);
    if (!views.contains(key)) views[key] = view_json(memory, p);
    e["view"] = key;
    json pipeline = json::array();
    for (std::size_t s = 0; s < p.pp; ++s) pipeline.push_back(memory.held_stages(p, s));
    e["pipeline"] = pipeline;
    e["stage_ranks"] = stage_ranks(p);
    e["batch"] = {{"micro", p.micro_batch},
                  {"accumulation", p.micro_batches},
                  {"dp", p.dp},
                  {"ep", p.ep},
                  {"global", p.global_batch()}};
    e["schedule_name"] = std::string(to_string(p.schedule)) + (p.virtual_stages > 1 ? " v=" : "") +
                         (p.virtual_stages > 1 ? std::to_string(p.virtual_stages) : "");
    if (!plans[i].dropped.empty()) continue;
    e["rank"] = ++feasible;
    pipeline_simulation const sim = time.timeline(p);
    e["timeline"] = {
        {"stages", actions_json(sim.compute)}, {"makespan", sim.makespan}, {"idle_share", sim.idle_share()}};
  }
  // Plans share most of their crossings: each is listed once, plans name theirs by index.
  json crossings = json::array();
  std::map<std::string, std::size_t> index;
  for (json& e : entries) {
    json named = json::array();
    for (json const& c : e["crossings"]) {
      auto const [it, added] = index.try_emplace(c.dump(), crossings.size());
      if (added) crossings.push_back(c);
      named.push_back(it->second);
    }
    e["crossings"] = named;
  }
  document["crossings"] = crossings;
  document["views"] = views;
  document["dimensions"] = {"dp",          "cp",
                            "ep",          "tp",
                            "pp",          "zero",
                            "micro_batch", "micro_batches",
                            "schedule",    "virtual_stages",
                            "precision",   "recompute",
                            "gradients"};
  document["model_summary"] = model_summary(document["model"]);
  document["initial"] = 0;
  if (report) {
    json const& ran = report->at("plan");
    json& all = document["plans"];  // (entries is stale: ordered_json moves its values when keys are added)
    auto const it = std::ranges::find_if(all, [&](json const& e) { return same_plan(e, ran); });
    if (it == all.end())
      throw invalid_option_error("the report's plan (" + ran.dump() + ") is not one of the planner's plans");
    (*it)["measured"] = measured_json(*report);
    document["initial"] = (*it)["id"];
  }
  std::string data = document.dump();
  // Inside <script>: "</" would end the element.
  for (std::size_t at = data.find("</"); at != std::string::npos; at = data.find("</", at + 3))
    data.insert(at + 1, "\\");
  std::string page(plan_page_template);
  std::string const slot = "/*PLAN_DATA*/";
  return page.replace(page.find(slot), slot.size(), data);
}

}  // namespace planner_tool
