// Interrupts (SIGINT, SIGTERM) of a process running bitsplit work: files being written under a
// temporary name are removed, never left half-written, and a generation can stop cleanly.
//
// install_interrupt_handlers() is for programs (the CLI); a library user that installs its own
// handlers can call on_interrupt_signal() from them. The handler is async-signal-safe: it
// unlinks the registered temporary files, says so on stderr and exits with 128 + the signal
// number (130 for SIGINT, 143 for SIGTERM) — unless a CooperativeInterrupt is alive, in which
// case the first signal only raises a flag the work polls (a second one still exits at once).
#pragma once

#include <string>

namespace bitsplit {

// SIGINT and SIGTERM call on_interrupt_signal(); SIGXFSZ is ignored, so a write past a file
// size limit fails with an error (EFBIG) that the writer reports instead of killing the process.
void install_interrupt_handlers();
void on_interrupt_signal(int signal);

// A file being written: removed by the handler if a signal arrives while it is registered.
// At most kMaxTempFiles at once (more are not protected, never an error).
class TempFileRegistration {
 public:
  static constexpr int kMaxTempFiles = 16;
  explicit TempFileRegistration(const std::string& path);
  ~TempFileRegistration();
  TempFileRegistration(const TempFileRegistration&) = delete;
  TempFileRegistration& operator=(const TempFileRegistration&) = delete;

 private:
  int slot_ = -1;
};

// While one is alive, the first signal sets a flag instead of exiting (a generation stops after
// its current token and reports what it did).
class CooperativeInterrupt {
 public:
  // `first_signal_message`: what the handler writes on the first signal (a string that outlives
  // this object; default: "interrupted: stopping after the current token ...").
  explicit CooperativeInterrupt(const char* first_signal_message = nullptr);
  ~CooperativeInterrupt();
  CooperativeInterrupt(const CooperativeInterrupt&) = delete;
  CooperativeInterrupt& operator=(const CooperativeInterrupt&) = delete;
  // The signal received (0: none yet).
  static int signal_received();
  // Forgets it: the next signal is again a first one (an interactive chat stops one reply per Ctrl-C).
  static void clear();
};

}  // namespace bitsplit
