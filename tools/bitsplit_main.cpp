// bitsplit command-line entry point: dispatches to the subcommands.
#include <cstdio>
#include <iostream>

#include "commands.h"

namespace bitsplit::cli {

int report_error(const std::string& message) {
  std::fprintf(stderr, "error: %s\n", message.c_str());
  return 1;
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
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  return exit_code;
}
