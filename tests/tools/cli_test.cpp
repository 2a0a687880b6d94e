// The bitsplit CLI as a user meets it: output of `run`, and errors for bad flags and files.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "bitsplit/gguf.h"
#include "cli_testing.h"
#include "hf_folder_testing.h"
#include "test_paths.h"

namespace {

// `run`'s output from the echoed prompt to the end of the generated text (before its "prompt:"
// speed line), so lines printed before the text (memory plan, backend) do not take part; the
// whole output when the prompt is not there.
std::string generated_text(const std::string& out, const std::string& prompt) {
  const size_t from = out.find(prompt);
  return from == std::string::npos ? out : out.substr(from, out.find("\nprompt:", from) - from);
}

using bitsplit::testing::run_cli;

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
  EXPECT_NE(o.out.find(expected_prefix), std::string::npos) << o.out;
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

namespace {

// convert, delta, quantize, then run a variant on the converted base and the Q8_0 baseline.
TEST(Cli, VariantsAndTheQ8_0BaselineEndToEnd) {
  const std::string models = BITSPLIT_SOURCE_DIR "/tests/models/";
  BITSPLIT_REQUIRE_FILE(models + "bible-base.gguf");
  bitsplit::testing::TempDir dir("cli-variant");
  const std::string base = dir.file("base.bs.gguf"), delta = dir.file("devil.delta.gguf"), q8 = dir.file("q8.gguf");
  ASSERT_EQ(run_cli("convert " + models + "bible-base.gguf " + base).code, 0);
  auto o = run_cli("delta --base " + models + "bible-base.gguf --finetuned " + models + "bible-devil.gguf -o " + delta);
  ASSERT_EQ(o.code, 0) << o.out;
  o = run_cli("info " + delta);
  ASSERT_EQ(o.code, 0) << o.out;
  EXPECT_NE(o.out.find("BitDelta variant"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("sign planes:   44"), std::string::npos) << o.out;
  o = run_cli("info " + base + " --vram-budget 800K");
  ASSERT_EQ(o.code, 0) << o.out;
  EXPECT_NE(o.out.find("draft on the CPU"), std::string::npos) << o.out;
  // The whole draft on the device needs its embedding, K/V cache and scratch beside the planes.
  EXPECT_NE(o.out.find("device draft:"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("does not fit"), std::string::npos) << o.out;
  o = run_cli("info " + base + " --vram-budget 64M");
  ASSERT_EQ(o.code, 0) << o.out;
  EXPECT_NE(o.out.find("fits, the whole draft runs on the GPU"), std::string::npos) << o.out;
  o = run_cli("run -m " + base + " -p \"The devil\" -n 8 --temp 0");
  ASSERT_EQ(o.code, 0) << o.out;
  EXPECT_NE(o.out.find("draft pass: host ("), std::string::npos) << "the run says where the draft ran: " << o.out;
  o = run_cli("run -m " + base + " --delta devil=" + delta + " --variant devil -p \"The devil\" -n 24 --temp 0");
  ASSERT_EQ(o.code, 0) << o.out;
  EXPECT_NE(o.out.find("variant: devil"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("variant 'devil': loaded"), std::string::npos) << "cold load is logged: " << o.out;
  const auto base_run = run_cli("run -m " + base + " -p \"The devil\" -n 24 --temp 0");
  ASSERT_EQ(base_run.code, 0);
  EXPECT_NE(o.out.substr(0, o.out.find("prompt:")), base_run.out.substr(0, base_run.out.find("prompt:")))
      << "the variant writes something else than the base";

  o = run_cli("run -m " + base + " --delta devil=" + delta + " --variant psalms -p hi -n 4");
  EXPECT_NE(o.code, 0);
  EXPECT_NE(o.out.find("no variant named 'psalms'"), std::string::npos) << o.out;
  o = run_cli("run -m " + base + " --delta devil=" + delta + " -p hi -n 4");
  EXPECT_NE(o.code, 0);
  EXPECT_NE(o.out.find("--variant"), std::string::npos) << o.out;
  o = run_cli("run -m " + base + " --delta devil -p hi -n 4");
  EXPECT_NE(o.code, 0);
  EXPECT_NE(o.out.find("NAME=FILE"), std::string::npos) << o.out;
  // A delta against another base names both hashes.
  o = run_cli("run -m " + models + "bible-psalms.gguf --delta devil=" + delta + " --variant devil -p hi -n 4");
  EXPECT_NE(o.code, 0);
  EXPECT_NE(o.out.find("was made against a base with sha256"), std::string::npos) << o.out;

  ASSERT_EQ(run_cli("quantize " + models + "bible-base.gguf " + q8).code, 0);
  o = run_cli("run -m " + q8 + " -p \"In the beginning\" -n 16 --temp 0");
  ASSERT_EQ(o.code, 0) << o.out;
  EXPECT_NE(o.out.find("Q8_0 kernel"), std::string::npos) << o.out;
}

// LoRA adapters as variants, and merges: `run --lora` writes the adapter's golden greedy text
// (the independent reference of tests/models/golden/bible-devil-lora) on the f32 base, speculative
// equals plain on the converted base, `info` describes the adapter, `merge` writes a model and a
// delta that `eval --reference` and `run --delta` take.
TEST(Cli, LoraVariantsAndMergesEndToEnd) {
  const std::string models = BITSPLIT_SOURCE_DIR "/tests/models/";
  BITSPLIT_REQUIRE_FILE(models + "bible-devil-lora.gguf");
  bitsplit::testing::TempDir dir("cli-lora");
  const std::string lora = models + "bible-devil-lora.gguf", psalms = models + "bible-psalms-lora.gguf";
  std::ifstream in(models + "golden/bible-devil-lora/0.json");
  const auto g = nlohmann::json::parse(in);
  const std::string prompt = g["prompt"].get<std::string>();
  auto o = run_cli("run -m " + models + "bible-base.gguf --lora devil=" + lora + " --variant devil -p \"" + prompt +
                   "\" -n 64 --temp 0");
  ASSERT_EQ(o.code, 0) << o.out;
  EXPECT_NE(o.out.find("variant: devil (LoRA"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find(prompt + g["greedy_text"].get<std::string>().substr(0, 80)), std::string::npos) << o.out;

  const std::string base = dir.file("base.bs.gguf");
  ASSERT_EQ(run_cli("convert " + models + "bible-base.gguf " + base).code, 0);
  const std::string args = " --lora devil=" + lora + ":0.5 --variant devil -p \"The devil\" -n 40 --temp 0";
  const auto spec = run_cli("run -m " + base + args);
  const auto plain = run_cli("run -m " + base + args + " --no-spec");
  ASSERT_EQ(spec.code, 0) << spec.out;
  ASSERT_EQ(plain.code, 0) << plain.out;
  EXPECT_EQ(generated_text(spec.out, "The devil"), generated_text(plain.out, "The devil"));
  EXPECT_NE(spec.out.find("decoding: speculative"), std::string::npos) << spec.out;

  // A converted file's target scored against its source, in two activation arithmetics: the
  // remainder (the default) is closer to the source than one int8 row per row.
  auto target_kl = [&](const std::string& activations) {
    const auto e = run_cli("eval " + base + " --reference " + models + "bible-base.gguf --text " + models +
                           "text/kjv.valid.txt --max-tokens 200 --json --target-activations " + activations);
    EXPECT_EQ(e.code, 0) << e.out;
    const size_t at = e.out.find('{');
    return at == std::string::npos ? -1.0 : nlohmann::json::parse(e.out.substr(at))["kl_mean"].get<double>();
  };
  const double kl_int8 = target_kl("int8"), kl_default = target_kl("draft-remainder");
  EXPECT_GT(kl_default, 0.0);
  EXPECT_LT(kl_default, kl_int8);
  // --pass both: the target and the draft, one pass over the reference; the draft (D alone) is
  // further from the source than the target it drafts for, and the target row is the default's.
  {
    const auto e = run_cli("eval " + base + " --reference " + models + "bible-base.gguf --text " + models +
                           "text/kjv.valid.txt --max-tokens 200 --json --pass both");
    ASSERT_EQ(e.code, 0) << e.out;
    const auto j = nlohmann::json::parse(e.out.substr(e.out.find('{')));
    ASSERT_EQ(j["passes"].size(), 2u) << e.out;
    EXPECT_EQ(j["passes"][0]["pass"], "target");
    EXPECT_EQ(j["passes"][1]["pass"], "draft");
    EXPECT_NEAR(j["passes"][0]["kl_mean"].get<double>(), kl_default, 1e-6 * kl_default);
    EXPECT_GT(j["passes"][1]["kl_mean"].get<double>(), 2 * kl_default);
    EXPECT_LT(j["passes"][1]["top1_agreement"].get<double>(), j["passes"][0]["top1_agreement"].get<double>());
  }
  o = run_cli("eval " + base + " --text " + models + "text/kjv.valid.txt");
  EXPECT_NE(o.out.find("--reference ORIGINAL"), std::string::npos) << o.out;

  o = run_cli("info " + lora);
  ASSERT_EQ(o.code, 0) << o.out;
  EXPECT_NE(o.out.find("LoRA adapter"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("43 matrices (43 of rank 8)"), std::string::npos) << o.out;

  const std::string merged = dir.file("merged.gguf"), merged_delta = dir.file("merged.delta.gguf");
  o = run_cli("merge --base " + models + "bible-base.gguf " + lora + " " + psalms + " --method monosoup --rank 4 -o " + merged);
  ASSERT_EQ(o.code, 0) << o.out;
  EXPECT_NE(o.out.find("cut to rank 4 keep"), std::string::npos) << o.out;
  o = run_cli("eval " + merged + " --reference " + models + "bible-devil.gguf --text " + models +
              "text/devil.valid.txt --max-tokens 256");
  ASSERT_EQ(o.code, 0) << o.out;
  EXPECT_NE(o.out.find("KL(reference || model) mean"), std::string::npos) << o.out;
  o = run_cli("merge --base " + models + "bible-base.gguf " + lora + " " + psalms + " --method average --as-delta -o " +
              merged_delta);
  ASSERT_EQ(o.code, 0) << o.out;
  EXPECT_FALSE(std::filesystem::exists(merged_delta + ".merged-model.tmp"));
  o = run_cli("run -m " + base + " --delta both=" + merged_delta + " --variant both -p hi -n 8 --temp 0");
  ASSERT_EQ(o.code, 0) << o.out;
  EXPECT_NE(o.out.find("variant: both (BitDelta"), std::string::npos) << o.out;

  // A K-Merge pool with room for the devil adapter only: psalms is merged into it at a loose
  // threshold, refused at the default one.
  const std::string pooled = "run -m " + models + "bible-base.gguf --lora devil=" + lora + " --lora psalms=" + psalms +
                             " --variant-storage-budget 820K --lora-calibration devil=" + models +
                             "text/devil.valid.txt --lora-calibration psalms=" + models +
                             "text/psalms.valid.txt -p \"Blessed is\" -n 8 --temp 0 --variant psalms";
  o = run_cli(pooled + " --merge-kl-threshold 5");
  ASSERT_EQ(o.code, 0) << o.out;
  EXPECT_NE(o.out.find("pool: 'devil' admitted"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("pool: 'psalms' merged into 'devil'"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("variant: psalms (LoRA, served by the merged adapter devil+psalms"), std::string::npos) << o.out;
  o = run_cli(pooled);
  EXPECT_NE(o.code, 0);
  EXPECT_NE(o.out.find("pool: 'psalms' refused"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("no variant named 'psalms'"), std::string::npos) << o.out;
}

}  // namespace

namespace {

// `synth --format bitsplit` writes a loadable bit-split model directly; greedy speculative
// decoding on it must reproduce the plain target's text.
TEST(Cli, SynthWritesABitSplitModelThatRunsSpeculatively) {
  bitsplit::testing::TempDir dir("cli-synth");
  const std::string model = dir.file("tiny.bs.gguf");
  auto o = run_cli("synth --shape tiny --format bitsplit --residual 6 -o " + model);
  ASSERT_EQ(o.code, 0) << o.out;
  EXPECT_NE(o.out.find("RANDOM WEIGHTS"), std::string::npos) << o.out;
  o = run_cli("info " + model);
  ASSERT_EQ(o.code, 0) << o.out;
  EXPECT_NE(o.out.find("bit-split:     group 64, 2-bit draft plane"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("6-bit residual plane"), std::string::npos) << o.out;
  const auto spec = run_cli("run -m " + model + " -p hello -n 8 --temp 0 --ignore-eos");
  ASSERT_EQ(spec.code, 0) << spec.out;
  EXPECT_NE(spec.out.find("decoding: speculative"), std::string::npos) << spec.out;
  const auto plain = run_cli("run -m " + model + " -p hello -n 8 --temp 0 --ignore-eos --no-spec");
  ASSERT_EQ(plain.code, 0) << plain.out;
  EXPECT_NE(plain.out.find("generation: 8 tokens"), std::string::npos) << plain.out;
  // The generated line (stdout) among the log lines (stderr): it starts with the prompt.
  const auto text = [](const std::string& out) {
    size_t at = 0;
    if (!out.starts_with("hello")) {
      at = out.find("\nhello");
      if (at == std::string::npos) return std::string();
      ++at;
    }
    return out.substr(at, out.find('\n', at) - at);
  };
  EXPECT_EQ(text(spec.out), text(plain.out));
  EXPECT_GT(text(spec.out).size(), std::string("hello").size());

  o = run_cli("synth --shape tiny --residual 6 -o " + dir.file("x.gguf"));
  EXPECT_NE(o.code, 0);
  EXPECT_NE(o.out.find("--format bitsplit"), std::string::npos) << o.out;
}

// Writers refuse, before any work, an output that is one of their inputs (also through a
// symlink) or that is not a regular file, and a missing output directory; the input survives.
TEST(Cli, WritersRefuseToOverwriteTheirInputOrADevice) {
  const std::string base = BITSPLIT_SOURCE_DIR "/tests/models/bible-base.gguf";
  BITSPLIT_REQUIRE_FILE(base);
  bitsplit::testing::TempDir dir("cli-output");
  const std::string copy = dir.file("m.gguf"), link = dir.file("link.gguf");
  std::filesystem::copy_file(base, copy);
  std::filesystem::create_symlink(copy, link);
  const auto size = std::filesystem::file_size(copy);
  for (const std::string& cmd : {"convert " + copy + " " + copy, "convert " + copy + " " + link, "quantize " + copy + " " + link,
                                 "delta --base " + copy + " --finetuned " + base + " -o " + link}) {
    const auto o = run_cli(cmd);
    EXPECT_EQ(o.code, 1) << cmd;
    EXPECT_NE(o.out.find("would destroy the input"), std::string::npos) << cmd << ": " << o.out;
    EXPECT_EQ(std::filesystem::file_size(copy), size) << cmd;
  }
  auto o = run_cli("convert " + copy + " /dev/null");
  EXPECT_EQ(o.code, 1);
  EXPECT_NE(o.out.find("not a regular file (a device)"), std::string::npos) << o.out;
  EXPECT_TRUE(std::filesystem::is_character_file("/dev/null")) << "the device node must survive";
  o = run_cli("convert " + copy + " " + dir.path().string() + "/no/such/dir/out.gguf");
  EXPECT_EQ(o.code, 1);
  EXPECT_NE(o.out.find("does not exist"), std::string::npos) << o.out;
  EXPECT_EQ(o.out.find("wrote"), std::string::npos) << "refused before converting: " << o.out;
  o = run_cli("convert " + copy + " " + dir.path().string());
  EXPECT_NE(o.out.find("a directory"), std::string::npos) << o.out;
}

TEST(Cli, ConvertWritesASplitSetThatRunsLikeOneFile) {
  const std::string base = BITSPLIT_SOURCE_DIR "/tests/models/bible-base.gguf";
  BITSPLIT_REQUIRE_FILE(base);
  bitsplit::testing::TempDir dir("cli-split");
  auto o = run_cli("convert " + base + " " + dir.file("one.gguf"));
  ASSERT_EQ(o.code, 0) << o.out;
  // The default conversion (calibrated, its tensors block by block) cut into parts of 2 MB.
  o = run_cli("convert " + base + " " + dir.file("parts.gguf") + " --split-max-size 2M");
  ASSERT_EQ(o.code, 0) << o.out;
  const size_t at = o.out.find(" parts; run the first)");
  ASSERT_NE(at, std::string::npos) << o.out;
  const int parts = std::stoi(o.out.substr(o.out.rfind('(', at) + 1));
  ASSERT_GE(parts, 3) << o.out;
  auto part_name = [&](int i) {
    char name[64];
    std::snprintf(name, sizeof name, "parts-%05d-of-%05d.gguf", i, parts);
    return std::string(name);
  };
  const std::string first = dir.file(part_name(1));
  for (int i = 2; i <= parts; ++i) EXPECT_TRUE(std::filesystem::exists(dir.file(part_name(i)))) << part_name(i);
  const std::string args = " -p \"In the beginning\" -n 24 --temp 0";
  const auto whole = run_cli("run -m " + dir.file("one.gguf") + args);
  const auto split = run_cli("run -m " + first + args);
  ASSERT_EQ(whole.code, 0) << whole.out;
  ASSERT_EQ(split.code, 0) << split.out;
  const std::string whole_text = generated_text(whole.out, "In the beginning");
  EXPECT_NE(whole_text.find("In the beginning"), std::string::npos) << whole.out;
  EXPECT_EQ(generated_text(split.out, "In the beginning"), whole_text);
  EXPECT_NE(run_cli("info " + first).out.find("split in " + std::to_string(parts) + " parts"), std::string::npos);
  std::filesystem::remove(dir.file(part_name(2)));
  o = run_cli("run -m " + first + " -p hi");
  EXPECT_EQ(o.code, 1);
  EXPECT_NE(o.out.find(part_name(2) + ") cannot be opened"), std::string::npos) << o.out;
}

// convert --draft-bpw end to end: convert and info report the mix, and the model runs; greedy
// speculative output equals plain decoding's.
TEST(Cli, ConvertWithADraftBudgetReportsTheMixAndRuns) {
  const std::string base = BITSPLIT_SOURCE_DIR "/tests/models/bible-base.gguf";
  BITSPLIT_REQUIRE_FILE(base);
  bitsplit::testing::TempDir dir("cli-draft-bpw");
  const std::string model = dir.file("mixed.gguf");
  auto o = run_cli("convert " + base + " " + model + " --draft-bpw 3.25");
  ASSERT_EQ(o.code, 0) << o.out;
  EXPECT_NE(o.out.find("draft 3.2"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("draft budget: measuring the errors took"), std::string::npos) << o.out;
  o = run_cli("info " + model);
  ASSERT_EQ(o.code, 0) << o.out;
  EXPECT_NE(o.out.find("mixed draft plane"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("draft bits:    draft 3.2"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("4-bit x"), std::string::npos) << o.out;
  const std::string args = " -p \"And it came to pass\" -n 32 --temp 0";
  const auto spec = run_cli("run -m " + model + args + " --draft chain --budget 4");
  const auto plain = run_cli("run -m " + model + args + " --no-spec");
  ASSERT_EQ(spec.code, 0) << spec.out;
  ASSERT_EQ(plain.code, 0) << plain.out;
  const std::string plain_text = generated_text(plain.out, "And it came to pass");
  EXPECT_NE(plain_text.find("And it came to pass"), std::string::npos) << plain.out;
  EXPECT_GT(plain_text.size(), 40u) << plain.out;
  EXPECT_EQ(generated_text(spec.out, "And it came to pass"), plain_text);
}

// A ChatML template (the shape SmolLM2's and Qwen2.5's use) written into `dir`; its path.
std::string write_chatml_template(bitsplit::testing::TempDir& dir) {
  const std::string path = dir.file("chatml.jinja");
  std::ofstream(path) << "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
                         "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";
  return path;
}

TEST(Cli, ChatKeepsHistoryResetsAndAnswersLikeRun) {
  const std::string base = BITSPLIT_SOURCE_DIR "/tests/models/bible-base.gguf";
  BITSPLIT_REQUIRE_FILE(base);
  bitsplit::testing::TempDir dir("cli-chat");
  const std::string tmpl = write_chatml_template(dir);
  // Replies to the same question: fresh, after /reset (the same), and with history (the prompt
  // then holds the first exchange).
  std::ofstream(dir.file("in.txt")) << "In the beginning\n/reset\nIn the beginning\n/exit\nnever read\n";
  auto o = run_cli("chat -m " + base + " --chat-template " + tmpl + " --temp 0 -n 12 < " + dir.file("in.txt"),
                   300, /*with_stderr=*/false);
  ASSERT_EQ(o.code, 0) << o.out;
  const std::string rendered = "<|im_start|>user\nIn the beginning<|im_end|>\n<|im_start|>assistant\n";
  std::ofstream(dir.file("prompt.txt")) << rendered;
  const auto r = run_cli("run -m " + base + " --parse-special --temp 0 -n 12 -f " + dir.file("prompt.txt"), 300, false);
  ASSERT_EQ(r.code, 0) << r.out;
  ASSERT_EQ(r.out.rfind(rendered, 0), 0u) << r.out;
  const std::string reply = r.out.substr(rendered.size());  // the continuation and run's final newline
  ASSERT_GT(reply.size(), 1u);
  EXPECT_EQ(o.out, reply + reply) << "chat answers as run does on the rendered prompt, and again after /reset";
}

// The second turn continues from the first turn's KV cache (--timings says how many prompt
// tokens were kept), and the replies are those of a chat that runs the whole history every turn.
TEST(Cli, ChatContinuesFromTheLastTurnsCache) {
  const std::string base = BITSPLIT_SOURCE_DIR "/tests/models/bible-base.gguf";
  BITSPLIT_REQUIRE_FILE(base);
  bitsplit::testing::TempDir dir("cli-chat-reuse");
  const std::string tmpl = write_chatml_template(dir);
  std::ofstream(dir.file("in.txt")) << "In the beginning\nAnd the earth\n";
  const std::string args = "chat -m " + base + " --chat-template " + tmpl + " --temp 0 -n 12 --timings";
  // stdout (the replies) compared, stderr (the timings) read from a file.
  auto chat = [&](const std::string& more, const std::string& err) {
    return bitsplit::testing::run_shell(bitsplit::testing::cli_command(args + more + " < " + dir.file("in.txt")) + " 2>" +
                                        dir.file(err));
  };
  const auto kept = chat("", "kept.err"), rerun = chat(" --no-reuse", "rerun.err");
  ASSERT_EQ(kept.code, 0) << kept.out;
  ASSERT_EQ(rerun.code, 0) << rerun.out;
  EXPECT_EQ(kept.out, rerun.out);
  auto kept_counts = [](const std::string& path) {
    std::ifstream in(path);
    std::vector<long> counts;
    for (std::string line; std::getline(in, line);) {
      const size_t at = line.find(" tokens, ");
      if (line.rfind("(prompt: ", 0) == 0 && at != std::string::npos) counts.push_back(std::stol(line.substr(at + 9)));
    }
    return counts;
  };
  const auto with = kept_counts(dir.file("kept.err")), without = kept_counts(dir.file("rerun.err"));
  ASSERT_EQ(with.size(), 2u);
  EXPECT_EQ(with[0], 0);
  EXPECT_GT(with[1], 10) << "the first exchange's tokens are kept";
  EXPECT_EQ(without, (std::vector<long>{0, 0}));
}

// A Hugging Face folder (bible-base written as two F32 safetensors shards, config.json) where a
// GGUF goes: `info` prints the same model lines as for the GGUF, and converting it gives the same
// bit-split tensors and architecture keys as converting the GGUF (the files differ in the
// name, the tokenizer, which the folder lacks (bible-base's is SentencePiece), and the source hash).
TEST(Cli, HuggingFaceFolderInfoAndConvertMatchTheGguf) {
  const std::string gguf_path = BITSPLIT_SOURCE_DIR "/tests/models/bible-base.gguf";
  BITSPLIT_REQUIRE_FILE(gguf_path);
  bitsplit::testing::TempDir dir("cli-hf-folder");
  const std::string folder = dir.file("bible-hf");
  std::filesystem::create_directories(folder);
  {
    auto g = bitsplit::open_weights(gguf_path);
    ASSERT_TRUE(g.is_ok()) << g.status().message();
    bitsplit::testing::write_hf_folder(**g, folder);
  }
  auto model_lines = [](const std::string& out) {
    std::string kept;
    for (const char* key : {"architecture:", "layers:", "embedding:", "heads:", "ffn:", "vocabulary:", "context:", "rope:",
                            "rms epsilon:", "output head:", "ram plan:"}) {
      const size_t at = out.find(std::string("\n") + key);
      kept += at == std::string::npos ? std::string("(no ") + key + ")\n" : out.substr(at + 1, out.find('\n', at + 1) - at);
    }
    return kept;
  };
  const auto from_gguf = run_cli("info " + gguf_path), from_folder = run_cli("info " + folder),
             from_index = run_cli("info " + folder + "/model.safetensors.index.json");
  ASSERT_EQ(from_gguf.code, 0) << from_gguf.out;
  ASSERT_EQ(from_folder.code, 0) << from_folder.out;
  ASSERT_EQ(from_index.code, 0) << from_index.out;
  EXPECT_EQ(model_lines(from_folder.out), model_lines(from_gguf.out)) << from_folder.out;
  EXPECT_EQ(model_lines(from_index.out), model_lines(from_gguf.out));
  EXPECT_EQ(model_lines(from_gguf.out).find("(no "), std::string::npos) << from_gguf.out;
  EXPECT_NE(from_folder.out.find("safetensors folder (LlamaForCausalLM), 2 shards, 57 tensors"), std::string::npos) << from_folder.out;

  const std::string out_g = dir.file("from-gguf.gguf"), out_f = dir.file("from-folder.gguf");
  const auto cg = run_cli("convert --no-calibration " + gguf_path + " " + out_g);
  const auto cf = run_cli("convert --no-calibration " + folder + " " + out_f);
  ASSERT_EQ(cg.code, 0) << cg.out;
  ASSERT_EQ(cf.code, 0) << cf.out;
  auto a = bitsplit::gguf::File::open(out_g), b = bitsplit::gguf::File::open(out_f);
  ASSERT_TRUE(a.is_ok() && b.is_ok());
  ASSERT_EQ(a->tensors().size(), b->tensors().size());
  for (const auto& t : a->tensors()) {
    SCOPED_TRACE(t.name);
    const bitsplit::gguf::TensorInfo* u = b->find_tensor(t.name);
    ASSERT_NE(u, nullptr);
    EXPECT_EQ(u->dims, t.dims);
    EXPECT_EQ(u->type, t.type);
    const auto x = a->tensor_bytes(t), y = b->tensor_bytes(*u);
    EXPECT_TRUE(std::equal(x.begin(), x.end(), y.begin(), y.end()));
  }
  int arch_keys = 0;
  for (const auto& [key, value] : a->metadata().entries()) {
    if (!key.starts_with("llama.") || key == "llama.vocab_size") continue;  // vocab_size: not in config.json's keys
    SCOPED_TRACE(key);
    ++arch_keys;
    ASSERT_TRUE(b->metadata().contains(key));
    EXPECT_TRUE(*b->metadata().find(key) == value);
  }
  EXPECT_GE(arch_keys, 9);

  // A directory that is not a model folder is an error saying what is missing, not a crash.
  std::filesystem::create_directories(dir.file("empty"));
  const auto e = run_cli("convert " + dir.file("empty") + " " + dir.file("x.gguf"));
  EXPECT_EQ(e.code, 1) << e.out;
  EXPECT_NE(e.out.find("is a directory without config.json"), std::string::npos) << e.out;
}

// `synth --sparse` and `convert --dry-run`: the plan of a shape this machine could not hold,
// printed, with nothing written; a dry run without an output file is fine, a real one is not.
TEST(Cli, ADryRunPlansAShapeTooBigToConvertHere) {
  bitsplit::testing::TempDir dir("cli-dry-run");
  const std::string src = dir.file("s8b.gguf");
  const auto synth = run_cli("synth --shape 8b --sparse -o " + src);
  ASSERT_EQ(synth.code, 0) << synth.out;
  EXPECT_NE(synth.out.find("--sparse"), std::string::npos) << synth.out;
  EXPECT_GT(std::filesystem::file_size(src), uint64_t(13) << 30) << "the full F16 size (7.2 B weights)";
  const auto dry = run_cli("convert --dry-run " + src + " " + dir.file("out.gguf"));
  ASSERT_EQ(dry.code, 0) << dry.out;
  EXPECT_NE(dry.out.find("calibration plan: peak"), std::string::npos) << dry.out;
  EXPECT_NE(dry.out.find("nothing read or written"), std::string::npos) << dry.out;
  EXPECT_NE(dry.out.find("draft planes"), std::string::npos) << dry.out;
  EXPECT_NE(dry.out.find("calibration: peak"), std::string::npos) << dry.out;
  EXPECT_FALSE(std::filesystem::exists(dir.file("out.gguf")));
  const auto no_output = run_cli("convert --dry-run --no-calibration " + src);
  EXPECT_EQ(no_output.code, 0) << no_output.out;
  EXPECT_EQ(no_output.out.find("calibration: peak"), std::string::npos) << no_output.out;
  const auto needs_output = run_cli("convert " + src);
  EXPECT_EQ(needs_output.code, 1) << needs_output.out;
  EXPECT_NE(needs_output.out.find("output is required"), std::string::npos) << needs_output.out;
}

// A fine-tune published as a Hugging Face folder stores as a BitDelta of a base that is a folder
// too: the delta's tensors are those made from the same models as GGUFs.
TEST(Cli, DeltaTakesHuggingFaceFolders) {
  const std::string base = BITSPLIT_SOURCE_DIR "/tests/models/bible-base.gguf";
  const std::string ft = BITSPLIT_SOURCE_DIR "/tests/models/bible-devil.gguf";
  BITSPLIT_REQUIRE_FILE(base);
  BITSPLIT_REQUIRE_FILE(ft);
  bitsplit::testing::TempDir dir("cli-hf-delta");
  for (const auto& [gguf, name] : {std::pair{base, "base-hf"}, std::pair{ft, "devil-hf"}}) {
    std::filesystem::create_directories(dir.file(name));
    auto g = bitsplit::open_weights(gguf);
    ASSERT_TRUE(g.is_ok()) << g.status().message();
    bitsplit::testing::write_hf_folder(**g, dir.file(name));
  }
  const auto from_folders = run_cli("delta --base " + dir.file("base-hf") + " --finetuned " + dir.file("devil-hf") +
                                    " -o " + dir.file("f.delta.gguf"));
  ASSERT_EQ(from_folders.code, 0) << from_folders.out;
  const auto from_ggufs = run_cli("delta --base " + base + " --finetuned " + ft + " -o " + dir.file("g.delta.gguf"));
  ASSERT_EQ(from_ggufs.code, 0) << from_ggufs.out;
  auto a = bitsplit::gguf::File::open(dir.file("f.delta.gguf")), b = bitsplit::gguf::File::open(dir.file("g.delta.gguf"));
  ASSERT_TRUE(a.is_ok() && b.is_ok());
  ASSERT_EQ(a->tensors().size(), b->tensors().size());
  ASSERT_GT(a->tensors().size(), 10u);
  for (const auto& t : a->tensors()) {
    SCOPED_TRACE(t.name);
    const bitsplit::gguf::TensorInfo* u = b->find_tensor(t.name);
    ASSERT_NE(u, nullptr);
    const auto x = a->tensor_bytes(t), y = b->tensor_bytes(*u);
    EXPECT_TRUE(std::equal(x.begin(), x.end(), y.begin(), y.end()));
  }
}

}  // namespace
