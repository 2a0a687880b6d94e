// For tests: renders chat templates with bitsplit's interpreter, for tests/engine/chat/chat_template_reference.py.
//   chat_template_render TEMPLATE CONTEXT.json   prints the render, or "error: ..." (exit 1)
//   chat_template_render --batch JOBS.json       JOBS is [{"template": str, "context": {...}}, ...];
//                                                prints [{"output": str} | {"error": str}, ...]
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "bitsplit/chat_template.h"

namespace {

bool read_file(const std::string& path, std::string* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::ostringstream ss;
  ss << in.rdbuf();
  *out = ss.str();
  return true;
}

nlohmann::ordered_json render_one(const std::string& source, const nlohmann::ordered_json& context) {
  auto tmpl = bitsplit::ChatTemplate::parse(source);
  if (!tmpl.is_ok()) return {{"error", tmpl.status().message()}};
  auto text = tmpl->render(context);
  if (!text.is_ok()) return {{"error", text.status().message()}};
  return {{"output", *text}};
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s TEMPLATE CONTEXT.json | --batch JOBS.json\n", argv[0]);
    return 2;
  }
  const std::string first = argv[1];
  std::string text;
  if (first == "--batch") {
    if (!read_file(argv[2], &text)) {
      std::fprintf(stderr, "cannot read %s\n", argv[2]);
      return 2;
    }
    const auto jobs = nlohmann::ordered_json::parse(text, nullptr, false);
    if (jobs.is_discarded() || !jobs.is_array()) {
      std::fprintf(stderr, "%s: not a JSON array\n", argv[2]);
      return 2;
    }
    nlohmann::ordered_json results = nlohmann::ordered_json::array();
    for (const auto& job : jobs) results.push_back(render_one(job.at("template").get<std::string>(), job.at("context")));
    std::cout << results.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) << "\n";
    return 0;
  }
  std::string source, context_text;
  if (!read_file(first, &source) || !read_file(argv[2], &context_text)) {
    std::fprintf(stderr, "cannot read the template or the context\n");
    return 2;
  }
  const auto context = nlohmann::ordered_json::parse(context_text, nullptr, false);
  if (context.is_discarded()) {
    std::fprintf(stderr, "%s: not JSON\n", argv[2]);
    return 2;
  }
  const auto result = render_one(source, context);
  if (result.contains("error")) {
    std::cout << "error: " << result["error"].get<std::string>() << "\n";
    return 1;
  }
  std::cout << result["output"].get<std::string>();
  return 0;
}
