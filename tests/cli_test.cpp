// The bitsplit CLI as a user meets it: output of `run`, and errors for bad flags and files.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "test_paths.h"

namespace {

struct Output {
  int code;
  std::string out;  // stdout and stderr together
};

Output run_cli(const std::string& args) {
  const std::string cmd = std::string(BITSPLIT_CLI) + " " + args + " 2>&1";
  Output o{-1, {}};
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return o;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) o.out.append(buf.data(), n);
  const int status = pclose(p);
  o.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return o;
}

TEST(Cli, HelpListsCommands) {
  const auto o = run_cli("--help");
  EXPECT_EQ(o.code, 0);
  EXPECT_NE(o.out.find("run"), std::string::npos);
  EXPECT_NE(o.out.find("info"), std::string::npos);
  EXPECT_EQ(run_cli("run --help").code, 0);
}

TEST(Cli, UnknownFlagAndBadValuesAreErrorsWithAHint) {
  auto o = run_cli("run -m " BITSPLIT_SOURCE_DIR "/CMakeLists.txt --bogus");
  EXPECT_NE(o.code, 0);
  EXPECT_NE(o.out.find("--bogus"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("--help"), std::string::npos) << o.out;
  o = run_cli("run -m /nonexistent.gguf -p hi");
  EXPECT_NE(o.code, 0);
  EXPECT_NE(o.out.find("/nonexistent.gguf"), std::string::npos) << o.out;
  o = run_cli("run -m " BITSPLIT_SOURCE_DIR "/CMakeLists.txt -p hi");
  EXPECT_NE(o.code, 0);
  EXPECT_NE(o.out.find("not a GGUF file"), std::string::npos) << o.out;
  o = run_cli("run -m " BITSPLIT_SOURCE_DIR "/CMakeLists.txt -p hi --top-p 2");
  EXPECT_NE(o.code, 0);
  EXPECT_NE(o.out.find("top-p"), std::string::npos) << o.out;
  EXPECT_NE(run_cli("").code, 0);
}

TEST(Cli, RunPrintsLlamaCppGreedyStoryAndSpeed) {
  const std::string shared = bitsplit::testing::shared_dir();
  const std::string model = shared.empty() ? "" : shared + "/models/stories260K.gguf";
  BITSPLIT_REQUIRE_FILE(model);
  std::ifstream in(shared + "/golden/stories260K/0.json");
  const auto g = nlohmann::json::parse(in);
  const auto o = run_cli("run -m " + model + " -p \"Once upon a time\" -n 64 --temp 0");
  ASSERT_EQ(o.code, 0) << o.out;
  const std::string expected_prefix = "Once upon a time" + g["greedy_text"].get<std::string>().substr(0, 150);
  EXPECT_EQ(o.out.substr(0, expected_prefix.size()), expected_prefix);
  EXPECT_NE(o.out.find("tokens/s"), std::string::npos);
  const auto info = run_cli("info " + model);
  EXPECT_EQ(info.code, 0);
  EXPECT_NE(info.out.find("architecture:  llama"), std::string::npos) << info.out;
  EXPECT_NE(info.out.find("heads:         8 query, 4 key/value"), std::string::npos) << info.out;
}

TEST(Cli, ContextOverflowIsAClearError) {
  const std::string shared = bitsplit::testing::shared_dir();
  const std::string model = shared.empty() ? "" : shared + "/models/stories260K.gguf";
  BITSPLIT_REQUIRE_FILE(model);
  const auto o = run_cli("run -m " + model + " -p hi -n 100000");
  EXPECT_NE(o.code, 0);
  EXPECT_NE(o.out.find("exceed the model's context length of 2048"), std::string::npos) << o.out;
}

}  // namespace
