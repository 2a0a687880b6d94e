// Running the bitsplit CLI from tests: its exit code and output, bounded in time.
#pragma once

#include <signal.h>
#include <spawn.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace bitsplit::testing {

struct CliOutput {
  int code;         // exit status; -1 when killed by a signal (a crash) or not run
  std::string out;  // stdout and stderr together
};

// A shell command line; `out` is what it wrote to stdout (redirect stderr in the command).
inline CliOutput run_shell(const std::string& cmd) {
  CliOutput o{-1, {}};
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return o;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) o.out.append(buf.data(), n);
  const int status = pclose(p);
  o.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return o;
}

// The shell command for `bitsplit ARGS` (ARGS are shell words) killed after `seconds` (a hang
// is then code 124 from timeout(1)), with no redirection of its own: for a caller that sends
// stderr elsewhere.
inline std::string cli_command(const std::string& args, int seconds = 300) {
  return "timeout -s KILL " + std::to_string(seconds) + " " + std::string(BITSPLIT_CLI) + " " + args;
}

// cli_command run through the shell; `out` holds stdout and stderr, or stdout alone.
inline CliOutput run_cli(const std::string& args, int seconds = 300, bool with_stderr = true) {
  return run_shell(cli_command(args, seconds) + (with_stderr ? " 2>&1" : " 2>/dev/null"));
}

// A whole file as text ("" when it cannot be read).
inline std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// The lines of `text` that start with `prefix`.
inline int count_lines_starting_with(const std::string& text, const std::string& prefix) {
  int n = 0;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    if (text.compare(start, prefix.size(), prefix) == 0) ++n;
    start = end + 1;
  }
  return n;
}

// `bitsplit ARGS...` started in the background with stdout and stderr to `log`; returns its pid
// (-1 on failure).
inline pid_t spawn_cli(const std::vector<std::string>& args, const std::string& log) {
  std::vector<std::string> argv_s{BITSPLIT_CLI};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  pid_t pid = -1;
  if (posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ) != 0) pid = -1;
  posix_spawn_file_actions_destroy(&actions);
  return pid;
}

}  // namespace bitsplit::testing
