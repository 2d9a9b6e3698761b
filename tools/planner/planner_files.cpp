#include "planner_files.hpp"

#include "plan_crossings.hpp"

#include <shardmesh/errors.hpp>

#include <nlohmann/json.hpp>

#include <fstream>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>

namespace planner_tool {

using shardmesh::parallel::collective_fit;
using shardmesh::parallel::collective_kind;
using shardmesh::parallel::gemm_rate;
using shardmesh::parallel::gpt_config;
using shardmesh::parallel::hardware_model;
using shardmesh::parallel::kernel_fit;
using shardmesh::parallel::llama_config;
using shardmesh::parallel::stage_kind;
using json = nlohmann::ordered_json;

std::string hardware_json(hardware_model const& h) {
  json out{{"machine", h.machine},
           {"measured", h.measured},
           {"ranks", h.ranks},
           {"cores", h.cores},
           {"memory_per_rank", h.memory_per_rank},
           {"ranks_per_node", h.ranks_per_node},
           {"elementwise_bytes_per_second", h.elementwise_bytes_per_second},
           {"data_parallel_overlap", h.data_parallel_overlap},
           {"redistribution_overhead_seconds", h.redistribution_overhead},
           {"sync_overhead_seconds", h.sync_overhead},
           {"pace_seconds", h.pace}};
  out["stage_overheads"] = json::object();
  for (stage_kind k : shardmesh::parallel::stage_kinds)
    out["stage_overheads"][std::string(to_string(k))] = {{"forward_seconds", h.overhead(k).forward},
                                                         {"backward_seconds", h.overhead(k).backward}};
  out["peaks"] = json::object();
  for (auto const& [compute, rate] : h.peaks) out["peaks"][std::string(to_string(compute))] = rate;
  out["gemm"] = json::array();
  for (gemm_rate const& g : h.gemm)
    out["gemm"].push_back({{"m", g.m},
                           {"n", g.n},
                           {"k", g.k},
                           {"flops_per_second", g.flops_per_second},
                           {"precision", std::string(to_string(g.compute))}});
  out["kernels"] = json::array();
  for (kernel_fit const& k : h.kernels)
    out["kernels"].push_back({{"kind", std::string(to_string(k.kind))},
                              {"alpha_seconds", k.cost.alpha},
                              {"beta_seconds_per_element", k.cost.beta}});
  out["collectives"] = json::array();
  for (collective_fit const& c : h.collectives)
    out["collectives"].push_back({{"kind", std::string(to_string(c.kind))},
                                  {"group", c.group},
                                  {"alpha_seconds", c.cost.alpha},
                                  {"beta_seconds_per_byte", c.cost.beta},
                                  {"between_nodes", c.between_nodes},
                                  {"deferred", c.deferred}});
  return out.dump(2) + "\n";
}

json object_in(std::string const& kind, std::string const& path) {
  std::ifstream in(path);
  if (!in) throw shardmesh::invalid_option_error(kind + " " + path + ": cannot be read");
  json const j = json::parse(in, nullptr, false);
  if (j.is_discarded() || !j.is_object())
    throw shardmesh::invalid_option_error(kind + " " + path + ": is not a JSON object");
  return j;
}

namespace {

// A model file's fields, each read or refused with its name.
class model_fields {
 public:
  model_fields(json j, std::string path) : j_(std::move(j)), path_(std::move(path)) {}

  [[nodiscard]] shardmesh::invalid_option_error bad(std::string const& what) const {
    return shardmesh::invalid_option_error("model file " + path_ + ": " + what);
  }
  // A size: a whole number of at least 1.
  [[nodiscard]] std::size_t size(char const* name) const {
    if (!j_.contains(name)) throw bad(std::string("\"") + name + "\" is missing");
    json const& v = j_.at(name);
    if (!v.is_number_unsigned() && !(v.is_number_integer() && v.get<long long>() >= 0))
      throw bad(std::string("\"") + name + "\" is " + v.dump() + ", not a whole number");
    auto const n = v.get<std::size_t>();
    if (n == 0) throw bad(std::string("\"") + name + "\" is 0; it must be at least 1");
    return n;
  }
  // A size where given, else `otherwise`.
  [[nodiscard]] std::size_t size_or(char const* name, std::size_t otherwise) const {
    return j_.contains(name) ? size(name) : otherwise;
  }
  // One of `choices` where given, else the first.
  [[nodiscard]] std::string choice(char const* name, std::vector<std::string> const& choices) const {
    if (!j_.contains(name)) return choices.front();
    json const& v = j_.at(name);
    for (std::string const& c : choices)
      if (v == c) return c;
    std::string listed;
    for (std::string const& c : choices) listed += (listed.empty() ? "\"" : ", \"") + c + "\"";
    throw bad(std::string("\"") + name + "\" is " + v.dump() + ", not one of " + listed);
  }
  [[nodiscard]] bool flag(char const* name) const {
    if (j_.contains(name) && !j_.at(name).is_boolean())
      throw bad(std::string("\"") + name + "\" is " + j_.at(name).dump() + ", not true or false");
    return j_.value(name, false);
  }
  [[nodiscard]] double number(char const* name, double otherwise) const {
    if (j_.contains(name) && !j_.at(name).is_number())
      throw bad(std::string("\"") + name + "\" is " + j_.at(name).dump() + ", not a number");
    return j_.value(name, otherwise);
  }
  // The architecture's own complaint about the sizes, which names the field.
  void check(std::string const& why) const {
    if (!why.empty()) throw bad(why);
  }

 private:
  json j_;
  std::string path_;
};

// The sizes both architectures have.
template <class Config>
Config read_decoder(model_fields const& f) {
  Config c;
  c.vocabulary = f.size("vocabulary");
  c.sequence = f.size("sequence");
  c.hidden = f.size("hidden");
  c.heads = f.size("heads");
  c.head_size = f.size("head_size");
  c.ffn = f.size("ffn");
  c.layers = f.size("layers");
  c.sequence_parallel = f.flag("sequence_parallel");
  return c;
}

gpt_config read_gpt(model_fields const& f) {
  gpt_config const c = read_decoder<gpt_config>(f);
  f.check(shardmesh::parallel::gpt_config_error(c));
  return c;
}

llama_config read_llama(model_fields const& f) {
  llama_config c = read_decoder<llama_config>(f);
  c.kv_heads = f.size("kv_heads");
  c.rope_base = f.number("rope_base", c.rope_base);
  if (f.flag("tied_embeddings"))
    throw f.bad("\"tied_embeddings\" is true; the Llama-style model's head is untied (false)");
  c.context = f.choice("context", {"ring", "all-to-all"}) == "ring" ? shardmesh::context_form::ring
                                                                    : shardmesh::context_form::all_to_all;
  c.experts = {.count = f.size_or("experts", 0),
               .every = f.size_or("expert_every", 2),
               .top_k = f.size_or("top_k", 2),
               .capacity = f.number("capacity", 0)};
  f.check(shardmesh::parallel::llama_config_error(c));
  return c;
}

}  // namespace

model_config read_model(std::string const& path) {
  json const j = object_in("model file", path);
  model_fields const fields(j, path);
  if (!j.contains("architecture") || !j.at("architecture").is_string())
    throw fields.bad("\"architecture\" is missing (a text: \"gpt\" or \"llama\")");
  std::string const a = j.at("architecture").get<std::string>();
  if (a == "gpt") return read_gpt(fields);
  if (a == "llama") return read_llama(fields);
  throw fields.bad("the architecture \"" + a + "\" is not one the planner knows (\"gpt\" or \"llama\")");
}

std::shared_ptr<shardmesh::parallel::model_description const> describe(model_config const& model) {
  return std::visit(
      [](auto const& c) -> std::shared_ptr<shardmesh::parallel::model_description const> {
        if constexpr (std::is_same_v<std::decay_t<decltype(c)>, gpt_config>)
          return std::make_shared<shardmesh::parallel::gpt_description const>(c);
        else
          return std::make_shared<shardmesh::parallel::llama_description const>(c);
      },
      model);
}

namespace {

json model_json(model_config const& model) {
  if (auto const* c = std::get_if<gpt_config>(&model))
    return {{"architecture", "gpt"}, {"vocabulary", c->vocabulary}, {"sequence", c->sequence},
            {"hidden", c->hidden},   {"heads", c->heads},           {"head_size", c->head_size},
            {"ffn", c->ffn},         {"layers", c->layers},         {"sequence_parallel", c->sequence_parallel}};
  auto const& c = std::get<llama_config>(model);
  return {{"architecture", "llama"},
          {"vocabulary", c.vocabulary},
          {"sequence", c.sequence},
          {"hidden", c.hidden},
          {"heads", c.heads},
          {"kv_heads", c.kv_heads},
          {"head_size", c.head_size},
          {"ffn", c.ffn},
          {"layers", c.layers},
          {"rope_base", c.rope_base},
          {"tied_embeddings", false},
          {"sequence_parallel", c.sequence_parallel},
          {"context", c.context == shardmesh::context_form::ring ? "ring" : "all-to-all"},
          {"experts", c.experts.count},
          {"expert_every", c.experts.every},
          {"top_k", c.experts.top_k},
          {"capacity", c.experts.capacity}};
}

}  // namespace

json plans_document(model_config const& model, shardmesh::parallel::training_problem const& problem,
                    hardware_model const& hardware, std::size_t capacity, std::vector<judged_plan> const& plans,
                    shardmesh::parallel::memory_model const& memory, bool with_crossings) {
  json out{{"model", model_json(model)},   {"global_batch", problem.global_batch},
           {"ranks", problem.ranks},       {"memory_capacity", capacity},
           {"hardware", hardware.machine}, {"prediction_only", !hardware.measured}};
  out["plans"] = json::array();
  for (judged_plan const& p : plans) {
    json entry{{"dp", p.plan.dp},
               {"cp", p.plan.cp},
               {"ep", p.plan.ep},
               {"tp", p.plan.tp},
               {"pp", p.plan.pp},
               {"zero", static_cast<unsigned>(p.plan.zero)},
               {"micro_batch", p.plan.micro_batch},
               {"micro_batches", p.plan.micro_batches},
               {"schedule", std::string(to_string(p.plan.schedule))},
               {"virtual_stages", p.plan.virtual_stages},
               {"precision", std::string(to_string(p.plan.compute))},
               {"recompute", std::string(to_string(p.plan.recompute))},
               {"gradients", std::string(to_string(p.plan.gradients))},
               {"memory",
                {{"parameters", p.memory.parameters},
                 {"gradients", p.memory.gradients},
                 {"optimizer_state", p.memory.optimizer_state},
                 {"activations", p.memory.activations},
                 {"total", p.memory_total}}}};
    if (with_crossings) entry["crossings"] = json::array();
    for (crossing const& c : with_crossings ? crossings_of(memory, p.plan) : std::vector<crossing>{})
      entry["crossings"].push_back({{"stage", c.stage},
                                    {"tensor", c.tensor},
                                    {"phase", c.phase},
                                    {"collective", c.collective},
                                    {"axis", c.axis},
                                    {"group", c.group},
                                    {"calls", c.calls},
                                    {"bytes", c.bytes},
                                    {"extents", c.extents},
                                    {"from", c.from},
                                    {"to", c.to}});
    if (p.dropped.empty()) {
      entry["model_flops_utilisation"] = p.mfu;
      entry["seconds"] = {{"step", p.time.total()},
                          {"compute", p.time.compute},
                          {"bubble", p.time.bubble},
                          {"data_parallel", p.time.data_parallel},
                          {"optimizer", p.time.optimizer},
                          {"tensor_parallel", p.time.tensor_parallel},
                          {"parameter_gather", p.time.parameter_gather}};
    } else {
      entry["dropped"] = p.dropped;
    }
    out["plans"].push_back(entry);
  }
  return out;
}

hardware_model read_hardware(std::string const& path) {
  auto const fail = [&](std::string const& why) {
    return shardmesh::invalid_option_error("hardware file " + path + ": " + why);
  };
  json const j = object_in("hardware file", path);
  hardware_model h;
  try {
    h.machine = j.at("machine").get<std::string>();
    h.measured = j.at("measured").get<bool>();
    h.ranks = j.at("ranks").get<std::size_t>();
    h.cores = j.at("cores").get<std::size_t>();
    h.memory_per_rank = j.value("memory_per_rank", std::size_t{0});
    h.ranks_per_node = j.value("ranks_per_node", std::size_t{0});
    h.elementwise_bytes_per_second = j.at("elementwise_bytes_per_second").get<double>();
    h.data_parallel_overlap = j.value("data_parallel_overlap", 0.0);
    h.redistribution_overhead = j.value("redistribution_overhead_seconds", 0.0);
    h.sync_overhead = j.value("sync_overhead_seconds", 0.0);
    h.pace = j.value("pace_seconds", 0.0);
    json const overheads = j.value("stage_overheads", json::object());
    for (stage_kind k : shardmesh::parallel::stage_kinds) {
      json const o = overheads.value(std::string(to_string(k)), json::object());
      h.overheads[static_cast<std::size_t>(k)] = {o.value("forward_seconds", 0.0), o.value("backward_seconds", 0.0)};
    }
    // A precision named by `text` ("fp32", "bf16", "fp16").
    auto const precision_of = [&](std::string const& text) {
      auto const p = shardmesh::parallel::parse_precision(text);
      if (!p) throw fail("unknown precision \"" + text + "\"");
      return *p;
    };
    json const peaks = j.value("peaks", json::object());
    for (auto const& [name, rate] : peaks.items()) h.peaks.emplace_back(precision_of(name), rate.get<double>());
    for (json const& g : j.at("gemm"))
      h.gemm.push_back({g.at("m").get<std::size_t>(), g.at("n").get<std::size_t>(), g.at("k").get<std::size_t>(),
                        g.at("flops_per_second").get<double>(), precision_of(g.value("precision", "fp32"))});
    // The member of `kinds` named by entry's "kind".
    auto const kind_of = [&](json const& entry, auto const& kinds, std::string const& what) {
      std::string const name = entry.at("kind").get<std::string>();
      for (auto k : kinds)
        if (to_string(k) == name) return k;
      throw fail("unknown " + what + " \"" + name + "\"");
    };
    for (json const& k : j.value("kernels", json::array())) {
      kernel_fit f;
      f.kind = kind_of(k, shardmesh::parallel::kernel_kinds, "kernel");
      f.cost = {k.at("alpha_seconds").get<double>(), k.at("beta_seconds_per_element").get<double>()};
      h.kernels.push_back(f);
    }
    for (json const& c : j.at("collectives")) {
      collective_fit f;
      f.kind = kind_of(c, shardmesh::parallel::collective_kinds, "collective");
      f.group = c.at("group").get<std::size_t>();
      f.cost = {c.at("alpha_seconds").get<double>(), c.at("beta_seconds_per_byte").get<double>()};
      f.between_nodes = c.value("between_nodes", false);
      f.deferred = c.value("deferred", false);
      h.collectives.push_back(f);
    }
  } catch (json::exception const& e) {
    throw fail(e.what());
  }
  if (h.ranks == 0 || h.cores == 0) throw fail("ranks and cores must be at least 1");
  if (h.gemm.empty()) throw fail("has no GEMM rates");
  for (gemm_rate const& g : h.gemm)
    if (!(g.flops_per_second > 0)) throw fail("a GEMM rate is not positive");
  if (!(h.elementwise_bytes_per_second > 0)) throw fail("the elementwise bandwidth is not positive");
  bool overheads_valid = h.redistribution_overhead >= 0 && h.sync_overhead >= 0;
  for (auto const& o : h.overheads) overheads_valid = overheads_valid && o.forward >= 0 && o.backward >= 0;
  if (!overheads_valid) throw fail("an overhead is negative");
  if (!(h.pace >= 0)) throw fail("pace_seconds is negative");
  if (!(h.data_parallel_overlap >= 0 && h.data_parallel_overlap <= 1))
    throw fail("data_parallel_overlap must be between 0 and 1");
  return h;
}

}  // namespace planner_tool
