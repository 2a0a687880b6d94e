// Progress reporting for long CLI jobs: a redrawn bar on a terminal, plain lines otherwise.
#pragma once

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>

namespace bitsplit::cli {

class ProgressBar {
 public:
  explicit ProgressBar(std::string label) : label_(std::move(label)), tty_(isatty(STDERR_FILENO) == 1) {}

  // done/total in units; bytes (optional) for a rate; detail is shown after the numbers.
  void update(double done, double total, double bytes_done = -1, const std::string& detail = "") {
    const double elapsed = std::chrono::duration<double>(Clock::now() - start_).count();
    const double frac = total > 0 ? std::min(1.0, done / total) : 1.0;
    if (!tty_) {
      // Plain lines: at most one per 10% step, so logs stay short.
      const int step = int(frac * 10);
      if (step == last_step_ && frac < 1.0) return;
      last_step_ = step;
    } else if (elapsed - last_draw_ < 0.1 && frac < 1.0) {
      return;
    }
    last_draw_ = elapsed;
    char rate[64] = "";
    if (bytes_done >= 0 && elapsed > 0) std::snprintf(rate, sizeof(rate), ", %.1f MB/s", bytes_done / elapsed / 1e6);
    char eta[64] = "";
    if (frac > 0 && frac < 1.0) std::snprintf(eta, sizeof(eta), ", ETA %.0f s", elapsed * (1 - frac) / frac);
    if (tty_) {
      const int width = 30, filled = int(frac * width);
      std::string bar(size_t(filled), '#');
      bar.append(size_t(width - filled), '.');
      std::fprintf(stderr, "\r%s [%s] %.0f/%.0f%s%s %s\033[K", label_.c_str(), bar.c_str(), done, total, rate, eta,
                   detail.c_str());
      if (frac >= 1.0) std::fputc('\n', stderr);
    } else {
      std::fprintf(stderr, "%s: %.0f/%.0f (%.0f%%)%s%s %s\n", label_.c_str(), done, total, frac * 100, rate, eta,
                   detail.c_str());
    }
    std::fflush(stderr);
  }

 private:
  using Clock = std::chrono::steady_clock;
  std::string label_;
  bool tty_;
  Clock::time_point start_ = Clock::now();
  double last_draw_ = -1;
  int last_step_ = -1;
};

}  // namespace bitsplit::cli
