// The tables `bitsplit bench accept` prints from its JSON: τ, tokens/s and speedup per category,
// and the per-check detail (markdown, columns padded).
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace bitsplit::cli {

// A markdown table, columns padded to their widest cell; the first `left` columns left-aligned.
void print_table(const std::vector<std::vector<std::string>>& rows, size_t left);
// The per-check detail of every row, with speedup.
void print_detail(const nlohmann::json& rows);
// For JSONL prompts τ, tokens/s and speedup per category and the per-check detail over all of
// them; for a text file the per-check detail alone.
void print_report(const nlohmann::json& j);

}  // namespace bitsplit::cli
