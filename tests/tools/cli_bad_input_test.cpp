// Every subcommand and option tried with bad values, as a hostile but ordinary user would: each
// case must end with exit code 1 and exactly one "error:" line naming the problem, never a
// crash, a hang, a usage dump or an output file (issue: reliability). Also: interrupts and full
// disks leave no partial output and never touch an existing file.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <thread>

#include "cli_testing.h"
#include "test_paths.h"

namespace {

namespace fs = std::filesystem;
using bitsplit::testing::count_lines_starting_with;
using bitsplit::testing::run_cli;

// Files the cases refer to as {NAME}; made once for the suite.
class CliBadInput : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string models = BITSPLIT_SOURCE_DIR "/tests/models";
    if (!fs::exists(models + "/bible-base.gguf")) return;
    dir_ = new bitsplit::testing::TempDir("cli-bad-input");
    auto& f = files_;
    f["BASE"] = dir_->file("base.gguf");
    fs::copy_file(models + "/bible-base.gguf", f["BASE"]);
    f["FT"] = models + "/bible-devil.gguf";
    f["LORA"] = models + "/bible-devil-lora.gguf";
    f["TEXT"] = models + "/text/kjv.valid.txt";
    f["SHORT"] = dir_->file("short.txt");  // a few windows, for the imatrix
    f["BS"] = dir_->file("base.bitsplit.gguf");
    f["BS2"] = dir_->file("base.bitsplit-v2.gguf");  // bit-split format 2
    f["DELTA"] = dir_->file("devil.delta.gguf");
    f["IM"] = dir_->file("kjv.imatrix.gguf");
    f["TINY"] = dir_->file("tiny.gguf");
    f["EMPTY"] = dir_->file("empty.gguf");
    f["TRUNC"] = dir_->file("truncated.gguf");
    f["DIR"] = dir_->file("folder");
    f["MISSING"] = dir_->file("missing.gguf");
    f["OUT"] = dir_->file("out.gguf");
    fs::create_directory(f["DIR"]);
    f["FIFO"] = dir_->file("model.fifo");  // opening it for reading would block until a writer comes
    (void)::mkfifo(f["FIFO"].c_str(), 0600);
    {
      std::ifstream in(f["TEXT"]);
      std::string head(3000, '\0');
      in.read(head.data(), std::streamsize(head.size()));
      std::ofstream(f["SHORT"]) << head;
    }
    std::ofstream(f["EMPTY"]).flush();
    {
      std::ifstream in(f["BASE"], std::ios::binary);
      std::string head(8192, '\0');
      in.read(head.data(), std::streamsize(head.size()));
      std::ofstream(f["TRUNC"], std::ios::binary).write(head.data(), std::streamsize(head.size()));
    }
    const std::vector<std::string> setup = {
        "convert " + f["BASE"] + " " + f["BS"] + " -t 2",
        "convert " + f["BASE"] + " " + f["BS2"] + " -t 2 --format-version 2",
        "delta --base " + f["BASE"] + " --finetuned " + f["FT"] + " -o " + f["DELTA"],
        "imatrix " + f["BASE"] + " --text " + f["SHORT"] + " -o " + f["IM"] + " --ctx 64",
        "synth --shape tiny --format f16 -o " + f["TINY"],
    };
    for (const auto& cmd : setup) {
      const auto o = run_cli(cmd);
      if (o.code != 0) setup_error_ += cmd + ": " + o.out + "\n";
    }
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  void SetUp() override {
    if (!dir_) GTEST_SKIP() << "tests/models/bible-base.gguf is missing";
    ASSERT_TRUE(setup_error_.empty()) << setup_error_;
  }
  // Replaces every {NAME} with its file.
  static std::string expand(std::string text) {
    for (const auto& [name, path] : files_) {
      const std::string key = "{" + name + "}";
      for (size_t at; (at = text.find(key)) != std::string::npos;) text.replace(at, key.size(), path);
    }
    return text;
  }
  static inline bitsplit::testing::TempDir* dir_ = nullptr;
  static inline std::map<std::string, std::string> files_;
  static inline std::string setup_error_;
};

struct Case {
  const char* args;  // with {NAME} placeholders
  const char* says;  // a piece of the error line
};

// clang-format off
const Case kCases[] = {
    // The command itself.
    {"", "a command is required"},
    {"frobnicate", "unknown command 'frobnicate'"},
    {"--bogus", "unknown option '--bogus'"},
    {"run --bogus -m {BASE}", "--bogus"},
    // run: files.
    {"run -p hi", "--model is required"},
    {"run -m {MISSING} -p hi", "missing.gguf"},
    {"run -m {DIR} -p hi", "folder"},
    {"run -m {EMPTY} -p hi", "empty.gguf"},
    {"run -m {TRUNC} -p hi", "truncated.gguf"},
    {"run -m {TEXT} -p hi", "not a GGUF file"},
    {"run -m {DELTA} -p hi", "is a BitDelta delta file, not a model"},
    {"run -m {IM} -p hi", "is an importance matrix, not a model"},
    {"run -m {BASE} -f {MISSING}", "missing.gguf"},
    {"run -m {BASE} -f {TEXT} -p hi", "excludes"},
    // run: numbers.
    {"run -m {BASE} -p hi -n -1", "-1 is below the minimum 0"},
    {"run -m {BASE} -p hi -n abc", "'abc' is not a whole number"},
    {"run -m {BASE} -p hi -n 99999999999", "above the maximum"},
    {"run -m {BASE} -p hi -n 100000", "exceed the model's context length"},
    {"run -m {BASE} -p hi --target-activations int4", "int4"},
    // serve: its numbers are checked before it listens.
    {"serve -m {BASE} --ctx 100000", "--ctx 100000 is over the model's context of"},
    {"serve -m {BASE} --ctx 0", "below the minimum 1"},
    {"serve -m {BASE} --parallel 0", "below the minimum 1"},
    {"serve -m {BASE} --spec-max-sequences -1", "below the minimum 0"},
    {"serve -m {BASE} --api-key ''", "--api-key is empty"},  // never "no authentication"
    {"serve -m {BASE} --api-key 'two words'", "visible ASCII"},
    {"serve -m {BASE} --api-key-file {EMPTY}", "has no key"},
    {"serve -m {BASE} --max-connections 0", "below the minimum 1"},
    {"info {FIFO}", "is a FIFO, not a regular file"},
    {"serve -m {FIFO}", "is a FIFO, not a regular file"},
    {"run -m {BASE} -p hi --temp -1", "below the minimum 0"},
    {"run -m {BASE} -p hi --temp nan", "not a finite number"},
    {"run -m {BASE} -p hi --top-p 2", "above the maximum 1"},
    {"run -m {BASE} -p hi --min-p -0.5", "below the minimum 0"},
    {"run -m {BASE} -p hi --top-k -3", "-3 is below the minimum 0"},
    {"run -m {BASE} -p hi --repeat-penalty 0", "must be greater than 0"},
    {"run -m {BASE} -p hi --repeat-penalty 1e400", "not a finite number"},
    {"run -m {BASE} -p hi --seed -1", "'-1' is not a seed"},
    {"run -m {BASE} -p hi --seed=-1", "'-1' is not a seed"},
    {"run -m {BASE} -p hi --seed 99999999999999999999999", "is not a seed"},
    {"run -m {BASE} -p hi --seed abc", "'abc' is not a seed"},
    {"run -m {BASE} -p hi -t 0", "below the minimum 1"},
    {"run -m {BS} -p hi --budget 0", "--budget"},
    {"run -m {BS} -p hi --budget 65", "--budget"},
    {"run -m {BS} -p hi --budget lots", "--budget"},
    {"run -m {BS} -p hi --draft star", "star"},
    {"run -m {BS} -p hi --lookup 99", "above the maximum 64"},
    {"run -m {BS} -p hi --depth 0", "below the minimum 1"},
    {"run -m {BS} -p hi --tree-top-k 0", "below the minimum 1"},
    // run: options that do not go together or do not apply.
    {"run -m {BS} -p hi --no-spec --draft-only", "excludes"},
    {"run -m {BASE} -p hi --draft-only", "not a bit-split model"},
    {"run -m {BS} -p hi --vram-budget -5G", "is not a byte size"},
    {"run -m {BASE} -p hi --vram-budget 1G", "is not a bit-split model"},
    {"run -m {BS} -p hi --delta nameless", "NAME=FILE"},
    {"run -m {BS} -p hi --delta d={MISSING} --variant d", "missing.gguf"},
    {"run -m {BS} -p hi --delta d={DELTA}", "none was chosen"},
    {"run -m {BS} -p hi --variant nope", "nope"},
    {"run -m {BS} -p hi --base-draft", "needs --variant"},
    {"run -m {BS} -p hi --delta d={BASE} --variant d", "is a model, not a variant"},
    {"run -m {BS} -p hi --lora d={DELTA} --variant d", "register it with --delta, not --lora"},
    {"run -m {BS} -p hi --delta d={LORA} --variant d", "register it with --lora, not --delta"},
    {"run -m {BS} -p hi --lora d={LORA}:nan --variant d", "must be a finite number"},
    {"run -m {BS} -p hi --lora d={LORA}", "none was chosen"},
    {"run -m {TINY} -p hi --lora d={LORA} --variant d", "bible-devil-lora.gguf"},
    {"run -m {LORA} -p hi", "is an adapter file (LoRA), not a model; load its base model"},
    {"run -m {BASE} -p hi --lora d={LORA} --variant d --variant-storage-budget 1K --lora-calibration d={TEXT}", "a budget smaller than one adapter"},
    {"run -m {BASE} -p hi --lora d={LORA} --variant d --variant-storage-budget 1M", "needs its calibration text"},
    {"run -m {BASE} -p hi --lora d={LORA} --variant d --lora-calibration d={TEXT}", "needs --variant-storage-budget"},
    {"run -m {BASE} -p hi --lora d={LORA} --variant d --variant-storage-budget lots --lora-calibration d={TEXT}", "--variant-storage-budget"},
    {"run -m {BASE} -p hi --lora d={LORA} --variant d --variant-storage-budget 1M --lora-calibration d={TEXT} --lora-calibration x={TEXT}", "no --lora named 'x'"},
    {"run -m {BASE} -p hi --lora d={LORA} --variant d --variant-storage-budget 1M --lora-calibration d={MISSING}", "missing.gguf"},
    {"run -m {BASE} -p hi --lora d={LORA} --variant d --variant-storage-budget 1M --lora-calibration d={TEXT} --merge-kl-threshold -1", "below the minimum 0"},
    {"info {LORA} --vram-budget 1G", "is an adapter"},
    {"run -m {BASE} --no-bos -p ''", "--no-bos"},
    // info.
    {"info", "a model file is required"},
    {"info {MISSING}", "missing.gguf"},
    {"info {EMPTY}", "empty.gguf"},
    {"info {IM}", "is an importance matrix"},
    {"info {BS} --vram-budget -5G", "is not a byte size"},
    {"info {BASE} --vram-budget 1G", "is not one"},
    // convert.
    {"convert {BASE}", "output is required"},
    {"convert {MISSING} {OUT}", "missing.gguf"},
    {"convert {BASE} {BASE}", "would destroy the input"},
    {"convert {BASE} /dev/null", "not a regular file"},
    {"convert {BASE} {DIR}", "a directory"},
    {"convert {BASE} {DIR}/no/such/out.gguf", "does not exist"},
    {"convert {BS} {OUT}", "already a bit-split model"},
    {"convert {BS2} {OUT} --group 32", "convert only rewrites it as format 3"},
    {"convert {BASE} {OUT} --format-version 4", "--format-version: 4 not in {2,3}"},
    {"convert {DELTA} {OUT}", "delta file"},
    {"convert {TEXT} {OUT}", "not a GGUF file"},
    {"convert {BASE} {OUT} --group 48", "48"},
    {"convert {BASE} {OUT} --residual 7", "7"},
    {"convert {BASE} {OUT} --draft-bits 5", "5"},
    {"convert {BASE} {OUT} --fit magic", "magic"},
    {"convert {BASE} {OUT} --draft-bpw 2", "below the smallest draft"},
    {"convert {BASE} {OUT} --draft-bpw 0", "0"},
    {"convert {BASE} {OUT} --draft-bpw x3", "x3"},
    {"convert {BASE} {OUT} --draft-bpw 3 --draft-bits 4", "excludes"},
    {"convert {BASE} {OUT} --imatrix {MISSING}", "missing.gguf"},
    {"convert {BASE} {OUT} --imatrix {TEXT}", "not a GGUF file"},
    {"convert {BASE} {OUT} --imatrix {BASE}", "importance matrix"},
    {"convert {BASE} {OUT} -t 0", "below the minimum 1"},
    // quantize.
    {"quantize {DELTA} {OUT}", "delta file"},
    {"quantize {IM} {OUT}", "importance matrix"},
    {"quantize {BS} {OUT}", "quantize the original"},
    {"quantize {BASE} {BASE}", "would destroy the input"},
    {"quantize {BASE} {OUT} --type q4_k", "q4_k"},
    // imatrix.
    {"imatrix {BASE} --text {MISSING} -o {OUT}", "missing.gguf"},
    {"imatrix {BASE} --text {TEXT} -o {TEXT}", "would destroy the input"},
    {"imatrix {BASE} --text {TEXT} -o {OUT} --ctx 1", "below the minimum 2"},
    {"imatrix {DELTA} --text {TEXT} -o {OUT}", "delta file"},
    {"imatrix {BASE} --text {EMPTY} -o {OUT}", "text"},
    // eval.
    {"eval {BS} --text {TEXT}", "converted"},
    {"eval {BASE} --text {MISSING}", "missing.gguf"},
    {"eval {BASE} --text {TEXT} --ctx 1", "below the minimum 2"},
    {"eval {BASE} --text {TEXT} --group 48", "48"},
    {"eval {BASE} --text {TEXT} --draft-bpw 1", "below the smallest draft"},
    {"eval {BASE} --text {TEXT} --scheme bogus", "bogus"},
    {"eval {BASE} --text {TEXT} --max-tokens -5", "below the minimum 0"},
    {"eval {FT} --text {TEXT} --base {BS}", "--base"},
    {"eval {BASE} --text {TEXT} --distill-text {TEXT}", "needs --base"},
    {"eval {BASE} --text {TEXT} --imatrix {TEXT}", "not a GGUF file"},
    {"eval {DELTA} --text {TEXT}", "delta file"},
    // delta.
    {"delta --base {BASE} --finetuned {FT}", "--output is required"},
    {"delta --base {DELTA} --finetuned {FT} -o {OUT}", "delta file"},
    {"delta --base {BASE} --finetuned {BS} -o {OUT}", "converted bit-split"},
    {"delta --base {BASE} --finetuned {TINY} -o {OUT}", "tiny.gguf"},
    {"delta --base {BASE} --finetuned {FT} -o {BASE}", "would destroy the input"},
    {"delta --base {BASE} --finetuned {FT} -o {OUT} --alpha column", "column"},
    {"delta --base {BASE} --finetuned {FT} -o {OUT} --distill-kl-sweeps 9", "above the maximum 8"},
    {"delta --base {BASE} --finetuned {FT} -o {OUT} --distill {MISSING}", "missing.gguf"},
    // merge.
    {"merge --base {BASE} {FT} {FT} -o {OUT}", "merging a fine-tune with itself"},
    {"merge --base {BASE} {FT} {BASE} -o {OUT}", "is the base model itself"},
    {"merge --base {BASE} {FT} {LORA} --rank 0 -o {OUT}", "below the minimum 1"},
    {"merge --base {BASE} {FT} {LORA} --rank 100 -o {OUT}", "at most 64"},
    {"merge --base {BASE} {FT} {LORA} --method ties -o {OUT}", "unknown merge method 'ties'"},
    {"merge --base {BASE} {FT} {TINY} -o {OUT}", "a fine-tune of another model"},
    {"merge --base {BS} {FT} -o {OUT}", "converted bit-split"},
    {"merge --base {BASE} {BS} -o {OUT}", "converted bit-split"},
    {"merge --base {BASE} {FT} {IM} -o {OUT}", "importance matrix"},
    {"merge --base {BASE} {FT} -o {FT}", "would destroy the input"},
    {"merge --base {BASE} {FT} --method task-arithmetic --lambda nan -o {OUT}", "not a finite number"},
    {"eval {BASE} --text {TEXT} --reference {TINY}", "vocabulary"},
    {"eval {BASE} --text {TEXT} --reference {FT} --base {FT}", "do not go together"},
    {"eval {BASE} --text {TEXT} --reference {FT} --pass draft", "is not a converted (bit-split) file"},
    {"eval {BS} --text {TEXT} --reference {BASE} --pass draft-only", "draft-only"},
    {"eval {BS} --text {TEXT} --pass draft", "--pass applies to a converted MODEL scored against --reference"},
    // synth.
    {"synth --shape huge -o {OUT}", "huge"},
    {"synth --shape tiny -o /dev/null", "not a regular file"},
    {"synth --shape tiny -o {DIR}", "a directory"},
    {"synth --shape tiny -o {OUT} --seed -1", "is not a seed"},
    {"synth --shape tiny -o {OUT} --format q4", "q4"},
    // bench.
    {"bench accept -m {BS}", "--prompts is required"},
    {"bench accept -m {BS} --prompts {MISSING}", "missing.gguf"},
    {"bench accept -m {BS} --prompts {TEXT} --chains 0", "below the minimum 1"},
    {"bench accept -m {BS} --prompts {TEXT} --seed -2", "is not a seed"},
};
// clang-format on

TEST_F(CliBadInput, EveryBadOptionIsOneErrorLineAndExitCodeOne) {
  for (const Case& c : kCases) {
    const std::string args = expand(c.args);
    fs::remove(files_["OUT"]);
    const auto o = run_cli(args, 120);
    SCOPED_TRACE("bitsplit " + args + "\n" + o.out);
    EXPECT_EQ(o.code, 1) << "exit code (124: hung, -1: crashed)";
    EXPECT_EQ(count_lines_starting_with(o.out, "error: "), 1) << "one error line";
    EXPECT_NE(o.out.find(c.says), std::string::npos) << "the error names: " << c.says;
    EXPECT_EQ(o.out.find("Run with --help"), std::string::npos) << "no usage dump";
    EXPECT_FALSE(fs::exists(files_["OUT"])) << "no output file";
    EXPECT_FALSE(fs::exists(files_["OUT"] + ".tmp")) << "no partial output";
  }
}

// A model over the available RAM is refused before it is loaded (nothing allocated: the
// backend is never chosen), with the plan in the error.
TEST_F(CliBadInput, AModelOverTheAvailableMemoryIsRefusedBeforeLoading) {
  const auto o = run_cli("run -m " + files_["BS"] + " -p hi -n 4", 60);
  ASSERT_EQ(o.code, 0) << o.out;
  EXPECT_NE(o.out.find("memory: "), std::string::npos) << o.out;
  const auto refused = bitsplit::testing::run_shell("env BITSPLIT_MEMORY_AVAILABLE=1M " + std::string(BITSPLIT_CLI) +
                                                    " run -m " + files_["BS"] + " -p hi -n 4 2>&1");
  const std::string& text = refused.out;
  SCOPED_TRACE(text);
  EXPECT_EQ(refused.code, 1);
  EXPECT_EQ(count_lines_starting_with(text, "error: "), 1);
  EXPECT_NE(text.find("of RAM"), std::string::npos);
  EXPECT_NE(text.find("1.00 MiB is available"), std::string::npos);
  EXPECT_EQ(text.find("backend:"), std::string::npos) << "refused before loading";
  // serve: the model and --parallel KV caches of --ctx positions, before it listens.
  const auto serve = bitsplit::testing::run_shell("env BITSPLIT_MEMORY_AVAILABLE=1M " + std::string(BITSPLIT_CLI) +
                                                  " serve --port 0 -m " + files_["BS"] + " --parallel 3 2>&1");
  SCOPED_TRACE(serve.out);
  EXPECT_EQ(serve.code, 1);
  EXPECT_EQ(count_lines_starting_with(serve.out, "error: "), 1);
  EXPECT_NE(serve.out.find("KV cache (3 x "), std::string::npos);
  EXPECT_NE(serve.out.find("lower --parallel or --ctx"), std::string::npos);
  EXPECT_EQ(serve.out.find("listening"), std::string::npos) << "refused before listening";
}

// --mlock under a locked-memory limit it cannot meet (64 KiB; as root, with CAP_IPC_LOCK taken
// out of the bounding set so the limit applies): one error line naming the limit, no text.
TEST_F(CliBadInput, MlockOverTheLockedMemoryLimitNamesTheLimit) {
  const bool root = geteuid() == 0;
  const std::string prefix = root ? "setpriv --bounding-set=-ipc_lock " : "";
  const auto o = bitsplit::testing::run_shell(prefix + "bash -c 'ulimit -l 64 && exec " + std::string(BITSPLIT_CLI) +
                                              " run -m " + files_["BS"] + " -p hi -n 2 --mlock' 2>&1");
  if (o.out.find("setpriv:") != std::string::npos) GTEST_SKIP() << "cannot drop CAP_IPC_LOCK here: " << o.out;
  SCOPED_TRACE(o.out);
  EXPECT_EQ(o.code, 1);
  EXPECT_EQ(count_lines_starting_with(o.out, "error: "), 1);
  EXPECT_NE(o.out.find("--mlock: cannot lock the model's planes in RAM"), std::string::npos);
  EXPECT_NE(o.out.find("the locked-memory limit is 64.00 KiB"), std::string::npos);
  EXPECT_EQ(o.out.find("generation:"), std::string::npos);
  // Within the limits (here: no limit change), the planes are locked and the run goes on.
  const auto ok = run_cli("run -m " + files_["BS"] + " -p hi -n 2 --mlock", 60);
  if (ok.code == 0) {
    EXPECT_NE(ok.out.find("of planes locked in RAM"), std::string::npos) << ok.out;
  } else {
    EXPECT_NE(ok.out.find("locked-memory limit"), std::string::npos) << ok.out;
  }
}

// Files a writer must leave as they were when it fails.
struct Untouched {
  explicit Untouched(std::string path) : path(std::move(path)) {
    std::ofstream(this->path) << "an earlier output that must survive\n";
  }
  bool intact() const {
    std::ifstream in(path);
    std::string line;
    std::getline(in, line);
    return line == "an earlier output that must survive" && !fs::exists(path + ".tmp");
  }
  std::string path;
};

TEST_F(CliBadInput, AFullDiskLeavesNoPartialOutputAndTheOldFileIntact) {
  // A file-size limit (ulimit -f: 8 KiB) makes the writes fail part-way as a full disk
  // does; the CLI ignores SIGXFSZ so it sees the error.
  const Untouched out(files_["OUT"]);
  const std::vector<std::string> writers = {
      "convert {BASE} {OUT}",
      "quantize {BASE} {OUT}",
      "delta --base {BASE} --finetuned {FT} -o {OUT}",
      "imatrix {BASE} --text {SHORT} -o {OUT} --ctx 64",
      "synth --shape tiny -o {OUT}",
  };
  for (const std::string& w : writers) {
    const auto o = bitsplit::testing::run_shell("bash -c 'ulimit -f 8; exec " + std::string(BITSPLIT_CLI) + " " +
                                                expand(w) + "' 2>&1");
    const std::string& text = o.out;
    SCOPED_TRACE(w + "\n" + text);
    EXPECT_EQ(o.code, 1);
    EXPECT_EQ(count_lines_starting_with(text, "error: "), 1);
    EXPECT_NE(text.find("writing failed after"), std::string::npos);
    EXPECT_TRUE(out.intact());
  }
}

// Starts a writer, waits for its temporary file, interrupts it: no output, no temporary file,
// the old file intact, exit 128 + the signal.
TEST_F(CliBadInput, AnInterruptedWriterRemovesItsTemporaryFile) {
  for (const int sig : {SIGINT, SIGTERM}) {
    const Untouched out(files_["OUT"]);
    const std::string log = files_["OUT"] + ".log";
    // The 6-bit residual fit of the tiny synthetic model takes seconds on one thread.
    const pid_t pid = bitsplit::testing::spawn_cli(
        {"convert", files_["TINY"], files_["OUT"], "--residual", "6", "-t", "1"}, log);
    ASSERT_GT(pid, 0);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (!fs::exists(files_["OUT"] + ".tmp") && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    ASSERT_TRUE(fs::exists(files_["OUT"] + ".tmp")) << "the writer never started";
    ::kill(pid, sig);
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    const std::string text = bitsplit::testing::read_text(log);
    SCOPED_TRACE(text);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 128 + sig) << "status " << status;
    EXPECT_NE(text.find("the partial output was removed"), std::string::npos);
    EXPECT_TRUE(out.intact());
  }
}

// run stops after the current token, prints the text so far and the summary, and exits 130.
TEST_F(CliBadInput, AnInterruptedRunPrintsItsSummary) {
  const std::string log = files_["OUT"] + ".log";
  // The tiny synthetic model decodes plainly for a long time (random weights never stop).
  const pid_t pid = bitsplit::testing::spawn_cli(
      {"run", "-m", files_["TINY"], "-p", "hello", "-n", "2000", "--ignore-eos", "-t", "1"}, log);
  ASSERT_GT(pid, 0);
  // Wait for generated text (the prompt echo and some tokens after it) before interrupting.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline) {
    const std::string so_far = bitsplit::testing::read_text(log);
    if (const size_t at = so_far.find("hello"); at != std::string::npos && so_far.size() > at + 20) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ::kill(pid, SIGINT);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  const std::string text = bitsplit::testing::read_text(log);
  SCOPED_TRACE(text);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 130) << "status " << status;
  EXPECT_NE(text.find("generation: "), std::string::npos) << "the summary is printed";
  EXPECT_NE(text.find("stopped by SIGINT"), std::string::npos);
}

}  // namespace
