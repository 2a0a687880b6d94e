// The bitsplit CLI's subcommands: each registers its options on the app and runs when chosen.
#pragma once

#include <CLI/CLI.hpp>

namespace bitsplit::cli {

// Each returns the exit code through *exit_code when its subcommand ran.
void add_run_command(CLI::App& app, int* exit_code);
void add_info_command(CLI::App& app, int* exit_code);
void add_convert_command(CLI::App& app, int* exit_code);  // convert and imatrix
void add_eval_command(CLI::App& app, int* exit_code);

// "error: <message>" on stderr; returns the exit code for user errors.
int report_error(const std::string& message);

}  // namespace bitsplit::cli
