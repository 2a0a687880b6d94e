// The bitsplit CLI's subcommands: each registers its options on the app and runs when chosen.
#pragma once

#include <CLI/CLI.hpp>
#include <tbb/global_control.h>

#include <memory>
#include <optional>
#include <string>

#include "bitsplit/loaded_model.h"

namespace bitsplit::cli {

// Each returns the exit code through *exit_code when its subcommand ran.
void add_run_command(CLI::App& app, int* exit_code);
void add_info_command(CLI::App& app, int* exit_code);
void add_convert_command(CLI::App& app, int* exit_code);  // convert and imatrix
void add_eval_command(CLI::App& app, int* exit_code);
void add_bench_command(CLI::App& app, int* exit_code);
void add_synth_command(CLI::App& app, int* exit_code);
void add_delta_command(CLI::App& app, int* exit_code);
void add_merge_command(CLI::App& app, int* exit_code);
void add_serve_command(CLI::App& app, int* exit_code);
void add_chat_command(CLI::App& app, int* exit_code);

// "error: <message>" on stderr; returns the exit code for user errors.
int report_error(const std::string& message);

// One line on stderr: the log of loading, variants and the pool's decisions.
void log_line(const std::string& line);

// --vram-budget SIZE (empty: not given, nullopt); the error names the option.
Result<std::optional<uint64_t>> vram_budget_option(const std::string& text);

// open_model (engine/decode/loaded_model.h) with its log lines on stderr: a bit-split model gets the
// CUDA backend when there is a device (planes in VRAM under `vram_budget`, default: free memory
// minus a margin), else the CPU backend.
Result<LoadedModel> load_model(const std::string& path, const ModelLoadOptions& options = {},
                               std::optional<uint64_t> vram_budget = std::nullopt);

Result<std::string> read_text_file(const std::string& path);

// --mlock: Model::lock_planes with a line saying how much was locked; 0, or the exit code of
// the error (which names the locked-memory limit).
int lock_model_planes(const Model& model);

// --mlock and --no-mmap: where the model's planes live in RAM (run and serve).
void add_plane_memory_flags(CLI::App* cmd, bool* mlock, bool* no_mmap);

// --target-activations {int8,draft-remainder,remainder} (TargetActivations; the default stays when
// the option is not given).
void add_target_activations_option(CLI::App* cmd, TargetActivations* out);

// Caps oneTBB's worker count while the returned object lives (n <= 0: no cap).
std::optional<tbb::global_control> limit_threads(int n);

}  // namespace bitsplit::cli
