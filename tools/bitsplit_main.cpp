// bitsplit command-line entry point: dispatches to the subcommands.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>

#include "bitsplit/interrupt.h"
#include "bitsplit/version.h"
#include "bitsplit/vram_plan.h"
#include "commands.h"

namespace bitsplit::cli {

int report_error(const std::string& message) {
  std::fprintf(stderr, "error: %s\n", message.c_str());
  return 1;
}

void log_line(const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); }

Result<std::optional<uint64_t>> vram_budget_option(const std::string& text) {
  if (text.empty()) return std::optional<uint64_t>();
  auto bytes = parse_byte_size(text);
  if (!bytes) return bytes.status().with_context("--vram-budget");
  return std::optional<uint64_t>(*bytes);
}

Result<LoadedModel> load_model(const std::string& path, const ModelLoadOptions& options,
                               std::optional<uint64_t> vram_budget) {
  return open_model(path, options, vram_budget, log_line);
}

void add_plane_memory_flags(CLI::App* cmd, bool* mlock, bool* no_mmap) {
  cmd->add_flag("--mlock", *mlock, "Lock the model's planes in RAM (mlock) so they are never paged out");
  cmd->add_flag("--no-mmap", *no_mmap, "Copy the residual planes into memory of the process's own (huge pages) instead of "
                "using them from the file's memory map (a slower load, the residual held twice while the page cache keeps the file)");
}

void add_target_activations_option(CLI::App* cmd, TargetActivations* out) {
  std::map<std::string, TargetActivations> names;
  for (TargetActivations a : {TargetActivations::kInt8, TargetActivations::kDraftRemainder, TargetActivations::kRemainder})
    names[target_activations_name(a)] = a;
  cmd->add_option("--target-activations", *out,
                  "How the target (D + R) rounds its activations: int8 (one int8 row per row: fastest, most KL), "
                  "draft-remainder (D also multiplies the int8 remainder: 6-8x less KL on real models, slower prompts; default), "
                  "remainder (D and R both: the weights' own KL, R's arithmetic doubled)")
      ->transform(CLI::CheckedTransformer(names, CLI::ignore_case))
      ->default_str(target_activations_name(*out));
}

int lock_model_planes(const Model& model) {
  if (!model.has_planes()) return report_error("--mlock pins a bit-split model's planes; this model has none (`bitsplit convert` it first)");
  auto locked = model.lock_planes();
  if (!locked) return report_error("--mlock: " + locked.status().message());
  std::fprintf(stderr, "mlock: %s of planes locked in RAM\n", format_bytes(*locked).c_str());
  return 0;
}

Result<std::string> read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::error("cannot read " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::optional<tbb::global_control> limit_threads(int n) {
  std::optional<tbb::global_control> control;
  if (n > 0) control.emplace(tbb::global_control::max_allowed_parallelism, size_t(n));
  return control;
}

}  // namespace bitsplit::cli

namespace {

// CLI11's messages can span lines ("...\nRun with --help for more information."); errors are
// one line.
std::string one_line(std::string text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  for (char& c : text)
    if (c == '\n') c = ' ';
  return text;
}

// The innermost subcommand the arguments name, if any ("bitsplit bench accept ..." -> accept).
CLI::App* chosen_subcommand(CLI::App& app) {
  for (CLI::App* sub : app.get_subcommands({})) {
    if (!sub->parsed()) continue;
    CLI::App* inner = chosen_subcommand(*sub);
    return inner ? inner : sub;
  }
  return nullptr;
}

// "bench accept" for the innermost subcommand.
std::string command_path(const CLI::App* sub) {
  std::string path;
  for (; sub && sub->get_parent(); sub = sub->get_parent()) path = sub->get_name() + (path.empty() ? "" : " ") + path;
  return path;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bitsplit: runs LLMs larger than GPU memory with bit-split weights and speculative decoding"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "bitsplit " BITSPLIT_VERSION_STRING);
  int exit_code = 0;
  bitsplit::cli::add_run_command(app, &exit_code);
  bitsplit::cli::add_info_command(app, &exit_code);
  bitsplit::cli::add_convert_command(app, &exit_code);
  bitsplit::cli::add_eval_command(app, &exit_code);
  bitsplit::cli::add_bench_command(app, &exit_code);
  bitsplit::cli::add_synth_command(app, &exit_code);
  bitsplit::cli::add_delta_command(app, &exit_code);
  bitsplit::cli::add_merge_command(app, &exit_code);
  bitsplit::cli::add_serve_command(app, &exit_code);
  bitsplit::cli::add_chat_command(app, &exit_code);
  bitsplit::install_interrupt_handlers();
  std::string commands;
  bool known = argc < 2 || argv[1][0] == '-';
  for (const CLI::App* sub : app.get_subcommands({})) {
    commands += (commands.empty() ? "" : ", ") + sub->get_name();
    known = known || sub->check_name(argv[1]);
  }
  // An unknown first word is named, with the commands there are.
  if (argc > 1 && argv[1][0] == '-' && app.get_option_no_throw(argv[1]) == nullptr) {
    return bitsplit::cli::report_error(std::string("unknown option '") + argv[1] + "' before the command (commands: " +
                                       commands + "; see bitsplit --help)");
  }
  if (!known) {
    return bitsplit::cli::report_error(std::string("unknown command '") + argv[1] + "' (commands: " + commands + ")");
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
    if (dynamic_cast<const CLI::RequiredError*>(&e) && chosen_subcommand(app) == nullptr) {
      return bitsplit::cli::report_error("a command is required (commands: " + commands + "; see bitsplit --help)");
    }
    const CLI::App* sub = chosen_subcommand(app);
    std::string message = one_line(e.what());
    return bitsplit::cli::report_error(message + " (see bitsplit " + (sub ? command_path(sub) + " " : std::string()) + "--help)");
  }
  return exit_code;
}
