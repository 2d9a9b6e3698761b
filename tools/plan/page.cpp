#include "page.hpp"

#include "json.hpp"
#include "text.hpp"

#include <string_view>

namespace plan_tool {

namespace {

// Text as HTML character data.
std::string escaped(std::string_view text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      default: out += c;
    }
  }
  return out;
}

}  // namespace

std::string html_page(request const& r, plan_report const& p, std::string const& picture) {
  std::string const title =
      "shardmesh plan: " + std::string(to_string(r.from).view()) + " to " + std::string(to_string(r.to).view());
  std::string data = plan_json(r, p);
  // Inside <script>: "</" would end the element.
  for (std::size_t at = data.find("</"); at != std::string::npos; at = data.find("</", at + 3))
    data.insert(at + 1, "\\");
  std::string const svg = picture.substr(picture.find("<svg"));  // without the XML declaration
  return "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>" + escaped(title) +
         "</title>\n<style>\nbody { font: 14px/1.4 system-ui, sans-serif; margin: 16px 24px; color: #1d232b; }\n"
         "h1 { font-size: 20px; } pre { background: #f3f5f7; padding: 8px; }\n</style>\n</head>\n<body>\n<h1>" +
         escaped(title) + "</h1>\n<section id=\"picture\">\n" + svg +
         "\n</section>\n<h2>The plan</h2>\n<pre id=\"plan\">" + escaped(plan_text(r, p)) +
         "</pre>\n<script type=\"application/json\" id=\"plan-data\">" + data + "</script>\n</body>\n</html>\n";
}

}  // namespace plan_tool
