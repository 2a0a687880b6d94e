// Tables of `bitsplit bench accept` (bench_report.h).
#include "bench_report.h"

#include <algorithm>
#include <cstdio>

namespace bitsplit::cli {
namespace {

std::string fmt(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), format, v);
  return buf;
}

std::string json_num(const nlohmann::json& v, const char* format) {
  return v.is_number() ? fmt(format, v.get<double>()) : "–";
}

// A table row, each cell padded to its column's width: the first `left` cells on the left.
std::string table_row(const std::vector<std::string>& cells, const std::vector<size_t>& width, size_t left) {
  std::string line = "|";
  for (size_t i = 0; i < cells.size(); ++i) {
    const size_t pad = width[i] - cells[i].size();
    line.push_back(' ');
    if (i >= left) line.append(pad, ' ');
    line.append(cells[i]);
    if (i < left) line.append(pad, ' ');
    line.append(" |");
  }
  return line;
}

// The line under the header: dashes, with a colon on the right of right-aligned columns.
std::string header_rule(const std::vector<size_t>& width, size_t left) {
  std::string line = "|";
  for (size_t i = 0; i < width.size(); ++i) {
    line.push_back('-');
    line.append(width[i], '-');
    line.append(i < left ? "-|" : ":|");
  }
  return line;
}

}  // namespace

// A markdown table, columns padded to their widest cell; the first `left` columns left-aligned.
void print_table(const std::vector<std::vector<std::string>>& rows, size_t left) {
  std::vector<size_t> width(rows.front().size(), 3);
  for (const auto& r : rows)
    for (size_t i = 0; i < r.size(); ++i) width[i] = std::max(width[i], r[i].size());
  for (size_t k = 0; k < rows.size(); ++k) {
    std::printf("%s\n", table_row(rows[k], width, left).c_str());
    if (k == 0) std::printf("%s\n", header_rule(width, left).c_str());
  }
}


// The per-check detail of every row (the table `bench accept` has always printed), with speedup.
void print_detail(const nlohmann::json& rows) {
  std::vector<std::vector<std::string>> t = {{"setting", "model", "accepted/check", "tokens/check", "draft ms/check",
                                              "verify ms/check", "tokens/s", "speedup"}};
  for (const auto& r : rows) {
    t.push_back({r["setting"].get<std::string>(), r["model"].get<std::string>(), json_num(r["accepted_per_check"], "%.2f"),
                 json_num(r["tokens_per_check"], "%.2f"), json_num(r["draft_ms_per_check"], "%.3f"),
                 json_num(r["verify_ms_per_check"], "%.3f"), json_num(r["tokens_per_second"], "%.1f"),
                 json_num(r["speedup"], "%.2fx")});
  }
  print_table(t, 2);
}

// The tables: for JSONL prompts τ, tokens/s and speedup per category and the per-check detail over
// all of them; for a text file the per-check detail alone (the table this command always printed).
void print_report(const nlohmann::json& j) {
  const bool jsonl = j["format"] == "jsonl";
  std::printf("model %s, %zu prompts", j["model"].get<std::string>().c_str(), j["n_prompts"].get<size_t>());
  if (jsonl) std::printf(" in %zu categories", j["categories"].size());
  std::printf(" x %d tokens, temperature %g", j["n_predict"].get<int>(), j["temperature"].get<double>());
  if (jsonl) {
    std::printf(", %s", j["rendering"] == "chatml" ? "ChatML" : "turns as plain text");
    if (j["stop_token"].is_string()) std::printf(", stopping at %s", j["stop_token"].get<std::string>().c_str());
  }
  std::printf("\n\n");
  if (!jsonl) {
    print_detail(j["results"]);
    return;
  }
  const std::pair<const char*, std::pair<const char*, const char*>> tables[] = {
      {"tau: tokens per check, bonus token included (plain decoding: 1)", {"tokens_per_check", "%.2f"}},
      {"tokens/s", {"tokens_per_second", "%.1f"}},
      {"speedup over plain decoding of the same model and category", {"speedup", "%.2fx"}}};
  std::vector<std::string> header = {"setting", "model"};
  for (const auto& c : j["summary"]["categories"]) header.push_back(c.get<std::string>());
  header.push_back("overall");
  for (const auto& [title, key] : tables) {
    std::printf("%s\n\n", title);
    std::vector<std::vector<std::string>> t = {header};
    for (const auto& r : j["summary"]["rows"]) {
      t.push_back({r["setting"].get<std::string>(), r["model"].get<std::string>()});
      for (size_t c = 2; c < header.size(); ++c) t.back().push_back(json_num(r[key.first][header[c]], key.second));
    }
    print_table(t, 2);
    std::printf("\n");
  }
  std::printf("per check, all categories\n\n");
  print_detail(j["summary"]["overall"]);
}

}  // namespace bitsplit::cli
