// bitsplit command-line entry point: dispatches to the subcommands.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>

#include "commands.h"

namespace bitsplit::cli {

int report_error(const std::string& message) {
  std::fprintf(stderr, "error: %s\n", message.c_str());
  return 1;
}

Result<LoadedModel> load_model(const std::string& path, const ModelLoadOptions& options,
                               std::optional<uint64_t> vram_budget) {
  return open_model(path, options, vram_budget, [](const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); });
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

int main(int argc, char** argv) {
  CLI::App app{"bitsplit: runs LLMs larger than GPU memory with bit-split weights and speculative decoding"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "bitsplit 0.1.0");
  int exit_code = 0;
  bitsplit::cli::add_run_command(app, &exit_code);
  bitsplit::cli::add_info_command(app, &exit_code);
  bitsplit::cli::add_convert_command(app, &exit_code);
  bitsplit::cli::add_eval_command(app, &exit_code);
  bitsplit::cli::add_bench_command(app, &exit_code);
  bitsplit::cli::add_synth_command(app, &exit_code);
  bitsplit::cli::add_delta_command(app, &exit_code);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  return exit_code;
}
