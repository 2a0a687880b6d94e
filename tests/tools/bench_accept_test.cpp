// `bitsplit bench accept` as a user runs it: JSONL prompts with categories against a plain row,
// the text format's table, and errors that name the bad line. No timings are checked.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "cli_testing.h"
#include "test_paths.h"

namespace {

using bitsplit::testing::run_cli;

// The JSON document in the CLI's output: stdout and stderr arrive together, and the JSON (printed
// last, in one piece) starts at the first line that is "{".
nlohmann::json json_in(const std::string& out) {
  const size_t line = out.compare(0, 2, "{\n") == 0 ? 0 : out.find("\n{\n");
  const std::string text = line == std::string::npos ? std::string() : out.substr(line == 0 ? 0 : line + 1);
  return nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
}

// The bible fixture converted once for all tests of the suite.
class BenchAccept : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new bitsplit::testing::TempDir("bench-accept");
    const std::string source = bitsplit::testing::source_dir() + "/tests/models/bible-base.gguf";
    if (!std::filesystem::exists(source)) return;
    const auto o = run_cli("convert " + source + " " + dir_->file("base.bs.gguf"));
    if (o.code == 0) model_ = dir_->file("base.bs.gguf");
    else convert_output_ = o.out;
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  void SetUp() override {
    BITSPLIT_REQUIRE_FILE(bitsplit::testing::source_dir() + "/tests/models/bible-base.gguf");
    ASSERT_FALSE(model_.empty()) << "convert failed: " << convert_output_;
  }
  static std::string write(const std::string& name, const std::string& text) {
    const std::string path = dir_->file(name);
    std::ofstream(path) << text;
    return path;
  }

  static inline bitsplit::testing::TempDir* dir_ = nullptr;
  static inline std::string model_, convert_output_;
};

TEST_F(BenchAccept, JsonlPromptsReportEveryCategoryAgainstPlainDecoding) {
  // Two categories, one prompt with several turns; the bible fixture has no ChatML tokens, so the
  // turns are joined as plain text (and the CLI says so).
  const std::string prompts = write(
      "p.jsonl",
      R"({"category": "qa", "turns": [{"role": "user", "content": "And God said unto Moses"}]})" "\n"
      R"({"category": "multi_turn", "turns": [{"role": "user", "content": "In the beginning"}, )"
      R"({"role": "assistant", "content": "God created"}, {"role": "user", "content": "the heaven and the earth"}]})" "\n"
      "\n"
      R"({"category": "qa", "turns": [{"role": "system", "content": "Psalms"}, {"role": "user", "content": "The LORD is my shepherd"}]})" "\n");
  const auto o = run_cli("bench accept -m " + model_ + " --prompts " + prompts +
                         " -n 8 -t 1 --settings plain,chain-2,tree-4,auto --json");
  ASSERT_EQ(o.code, 0) << o.out;
  EXPECT_NE(o.out.find("rendered as plain text"), std::string::npos) << o.out;
  const nlohmann::json j = json_in(o.out);
  ASSERT_FALSE(j.is_discarded()) << o.out;
  EXPECT_EQ(j["format"], "jsonl");
  EXPECT_EQ(j["rendering"], "plain");
  EXPECT_EQ(j["n_prompts"], 3);
  // Greedy speculative output is the target's: every setting generated the same tokens.
  EXPECT_EQ(j["greedy_mismatches"], 0);
  ASSERT_EQ(j["categories"].size(), 2u);
  EXPECT_EQ(j["categories"][0]["name"], "qa");
  EXPECT_EQ(j["categories"][0]["prompts"], 2);
  EXPECT_EQ(j["categories"][1]["name"], "multi_turn");

  std::set<std::pair<std::string, std::string>> seen;  // (setting, category)
  for (const auto& r : j["results"]) {
    const std::string setting = r["setting"], category = r["category"];
    seen.insert({setting, category});
    EXPECT_GT(r["tokens"].get<int64_t>(), 0) << setting << " " << category;
    ASSERT_TRUE(r["speedup"].is_number()) << setting << " " << category;
    if (setting == "plain") {
      EXPECT_EQ(r["tokens_per_check"].get<double>(), 1.0);
      EXPECT_EQ(r["speedup"].get<double>(), 1.0);
    } else {
      EXPECT_GT(r["checks"].get<int64_t>(), 0) << setting << " " << category;
      // τ counts the bonus token: at least one token per check.
      EXPECT_GE(r["tokens_per_check"].get<double>(), 1.0) << setting << " " << category;
      EXPECT_NEAR(r["tokens_per_check"].get<double>(), r["accepted_per_check"].get<double>() + 1.0, 1e-9);
    }
  }
  for (const std::string setting : {"plain", "chain-2", "tree-4", "auto"}) {
    for (const std::string category : {"qa", "multi_turn"}) {
      EXPECT_TRUE(seen.count({setting, category})) << setting << " " << category;
    }
  }
  const auto& summary = j["summary"];
  EXPECT_EQ(summary["reference"], "plain");
  ASSERT_EQ(summary["rows"].size(), 4u);
  for (const auto& row : summary["rows"]) {
    for (const std::string category : {"qa", "multi_turn", "overall"}) {
      ASSERT_TRUE(row["tokens_per_check"].contains(category)) << row.dump();
      EXPECT_GE(row["tokens_per_check"][category].get<double>(), 1.0) << row.dump();
      EXPECT_TRUE(row["speedup"][category].is_number()) << row.dump();
    }
  }
  EXPECT_EQ(summary["overall"].size(), 4u);
  EXPECT_EQ(summary["best"].size(), 3u);  // qa, multi_turn, overall
}

TEST_F(BenchAccept, TextPromptsKeepTheirTableWithAPlainRow) {
  const std::string prompts = write("p.txt", "In the beginning God created\nThe LORD is my shepherd\n");
  auto o = run_cli("bench accept -m " + model_ + " --prompts " + prompts + " -n 4 -t 1");
  ASSERT_EQ(o.code, 0) << o.out;
  for (const std::string row : {"| plain ", "| chain-1 ", "| chain-8 ", "| tree-4 ", "| tree-32 "}) {
    EXPECT_NE(o.out.find(row), std::string::npos) << row << "\n" << o.out;
  }
  EXPECT_NE(o.out.find("tokens/check"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("speedup"), std::string::npos) << o.out;
  // --chains with no values: no chain rows.
  o = run_cli("bench accept -m " + model_ + " --prompts " + prompts + " -n 4 -t 1 --chains --budgets 4");
  ASSERT_EQ(o.code, 0) << o.out;
  EXPECT_EQ(o.out.find("| chain-"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("| tree-4 "), std::string::npos) << o.out;
}

TEST_F(BenchAccept, BadPromptLinesAndSettingsAreNamed) {
  const std::string prompts = write(
      "bad.jsonl", R"({"category": "qa", "turns": [{"role": "user", "content": "x"}]})" "\n"
                   R"({"category": "qa", "turns": [{"role": "robot", "content": "x"}]})" "\n");
  auto o = run_cli("bench accept -m " + model_ + " --prompts " + prompts + " -n 4");
  EXPECT_EQ(o.code, 1) << o.out;
  EXPECT_NE(o.out.find("bad.jsonl:2: role 'robot'"), std::string::npos) << o.out;
  o = run_cli("bench accept -m " + model_ + " --prompts " + write("nojson.jsonl", "not json\n") + " -n 4");
  EXPECT_NE(o.out.find("nojson.jsonl:1: not a JSON object"), std::string::npos) << o.out;
  o = run_cli("bench accept -m " + model_ + " --prompts " + prompts + " --settings plain,chain-99");
  EXPECT_NE(o.out.find("'chain-99'"), std::string::npos) << o.out;
  o = run_cli("bench accept -m " + model_ + " --prompts " + prompts + " --settings plain,plain");
  EXPECT_NE(o.out.find("listed twice"), std::string::npos) << o.out;
}

}  // namespace
