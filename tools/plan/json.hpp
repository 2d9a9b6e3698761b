#pragma once
// --json: the plan, or with --all the ranked targets, as one JSON document;
// and the pieces shardmesh-bench's documents are made of.

#include "report.hpp"
#include "request.hpp"
#include "targets.hpp"

#include <shardmesh/algebra/static_string.hpp>

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace plan_tool {

// "text", escaped.
[[nodiscard]] std::string quoted(std::string_view s);
[[nodiscard]] std::string quoted(shardmesh::fixed_text const& s);
// [1, 2, 3]
[[nodiscard]] std::string numbers(std::vector<std::size_t> const& values);
// 6 significant digits.
[[nodiscard]] std::string number(double v);
// The fields of one plan ("to", "steps", the bytes, "planned_cost"),
// indented by `pad`, each line but the last ending in ",\n", without braces.
[[nodiscard]] std::string plan_fields(request const& r, plan_report const& p, std::string const& pad);

[[nodiscard]] std::string plan_json(request const& r, plan_report const& p);
[[nodiscard]] std::string targets_json(request const& r, std::vector<ranked_target> const& targets);

}  // namespace plan_tool
