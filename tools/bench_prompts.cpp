// Prompt sets for `bitsplit bench accept` (bench_prompts.h).
#include "bench_prompts.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

namespace bitsplit::cli {
namespace {

// One JSONL line: {"category": "...", "turns": [{"role": "user", "content": "..."}, ...]}. The
// error names the line and what is wrong with it.
Result<std::pair<std::string, std::vector<std::pair<std::string, std::string>>>> parse_jsonl_prompt(
    const std::string& line, const std::string& where) {
  const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return Status::error(where + ": not a JSON object");
  if (!j.contains("category") || !j["category"].is_string() || j["category"].get<std::string>().empty()) {
    return Status::error(where + ": \"category\" must be a non-empty string");
  }
  if (!j.contains("turns") || !j["turns"].is_array() || j["turns"].empty()) {
    return Status::error(where + ": \"turns\" must be a non-empty array of {\"role\", \"content\"}");
  }
  std::vector<std::pair<std::string, std::string>> turns;
  for (const auto& t : j["turns"]) {
    if (!t.is_object() || !t.contains("role") || !t["role"].is_string() || !t.contains("content") ||
        !t["content"].is_string()) {
      return Status::error(where + ": each turn must be {\"role\": \"...\", \"content\": \"...\"}");
    }
    const std::string role = t["role"].get<std::string>();
    if (role != "system" && role != "user" && role != "assistant") {
      return Status::error(where + ": role '" + role + "' is not system, user or assistant");
    }
    turns.emplace_back(role, t["content"].get<std::string>());
  }
  if (turns.back().first != "user") return Status::error(where + ": the last turn must be the user's");
  return std::make_pair(j["category"].get<std::string>(), std::move(turns));
}

}  // namespace

Result<PromptSet> read_prompts(const std::string& path, const std::string& text, const Tokenizer& tokenizer,
                               bool ignore_eos) {
  PromptSet set;
  std::istringstream lines(text);
  if (!path.ends_with(".jsonl")) {
    set.format = set.rendering = "text";
    set.categories = {"all"};
    for (std::string line; std::getline(lines, line);) {
      if (!line.empty()) set.prompts.push_back({0, tokenizer.encode(line), line});
    }
    if (set.prompts.empty()) return Status::error(path + " has no prompts (one per line)");
    return set;
  }
  set.format = "jsonl";
  const int32_t im_start = tokenizer.vocab().find("<|im_start|>"), im_end = tokenizer.vocab().find("<|im_end|>");
  const bool chatml = im_start >= 0 && im_end >= 0;
  set.rendering = chatml ? "chatml" : "plain";
  if (chatml && !ignore_eos) set.stop_token = im_end;
  int line_no = 0;
  for (std::string line; std::getline(lines, line);) {
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    auto parsed = parse_jsonl_prompt(line, path + ":" + std::to_string(line_no));
    if (!parsed) return parsed.status();
    auto& [category, turns] = *parsed;
    std::string rendered;
    EncodeOptions enc;
    if (chatml) {
      for (const auto& [role, content] : turns) rendered += "<|im_start|>" + role + "\n" + content + "<|im_end|>\n";
      rendered += "<|im_start|>assistant\n";
      enc.parse_special = true;
    } else {
      for (const auto& [role, content] : turns) rendered += (rendered.empty() ? "" : "\n\n") + content;
    }
    auto it = std::find(set.categories.begin(), set.categories.end(), category);
    if (it == set.categories.end()) it = set.categories.insert(it, category);
    BenchPrompt p{size_t(it - set.categories.begin()), tokenizer.encode(rendered, enc), rendered};
    if (p.tokens.empty()) return Status::error(path + ":" + std::to_string(line_no) + ": the prompt encodes to no tokens");
    set.prompts.push_back(std::move(p));
  }
  if (set.prompts.empty()) return Status::error(path + " has no prompts (one JSON object per line)");
  return set;
}

Status render_prompts(const PromptSet& set, const Tokenizer& tokenizer, const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Status::error("cannot create " + dir + ": " + ec.message());
  std::ofstream index(dir + "/prompts.tsv");
  index << "file\tcategory\ttokens\tstop\n";
  const std::string stop = set.stop_token >= 0 ? tokenizer.token_to_piece(set.stop_token, true) : "-";
  for (size_t i = 0; i < set.prompts.size(); ++i) {
    char name[32];
    std::snprintf(name, sizeof(name), "%04zu.txt", i + 1);
    std::ofstream out(dir + "/" + name, std::ios::binary);
    out << set.prompts[i].text;
    if (!out.flush()) return Status::error("could not write " + dir + "/" + name);
    index << name << "\t" << set.categories[set.prompts[i].category] << "\t" << set.prompts[i].tokens.size() << "\t"
          << stop << "\n";
  }
  if (!index.flush()) return Status::error("could not write " + dir + "/prompts.tsv");
  return Status::ok();
}

}  // namespace bitsplit::cli
