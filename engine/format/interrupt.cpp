// Interrupt handling (interrupt.h). The handler touches only lock-free atomics and fixed
// buffers, and calls only async-signal-safe functions (unlink, write, _exit).
#include "bitsplit/interrupt.h"

#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstring>

namespace bitsplit {
namespace {

constexpr size_t kPathBytes = 4096;

struct Slot {
  std::atomic<bool> used{false};  // claimed by a registration
  std::atomic<bool> ready{false};  // path written, visible to the handler
  char path[kPathBytes] = {};
};

Slot g_slots[TempFileRegistration::kMaxTempFiles];
std::atomic<int> g_cooperative{0};
std::atomic<const char*> g_cooperative_message{nullptr};
std::atomic<int> g_signal{0};

static_assert(std::atomic<bool>::is_always_lock_free && std::atomic<int>::is_always_lock_free);

void say(const char* text) {
  const ssize_t ignored = ::write(STDERR_FILENO, text, std::strlen(text));
  (void)ignored;
}

}  // namespace

void on_interrupt_signal(int signal) {
  const int first = g_signal.exchange(signal);
  if (first == 0 && g_cooperative.load() > 0) {
    const char* message = g_cooperative_message.load();
    say(message ? message : "\ninterrupted: stopping after the current token (again to quit at once)\n");
    return;
  }
  bool removed = false;
  for (Slot& s : g_slots) {
    if (s.ready.load(std::memory_order_acquire) && ::unlink(s.path) == 0) removed = true;
  }
  say(signal == SIGTERM ? "\nerror: terminated (SIGTERM)" : "\nerror: interrupted (SIGINT)");
  say(removed ? "; the partial output was removed\n" : "\n");
  ::_exit(128 + signal);
}

void install_interrupt_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_interrupt_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  std::signal(SIGXFSZ, SIG_IGN);
}

TempFileRegistration::TempFileRegistration(const std::string& path) {
  if (path.size() >= kPathBytes) return;
  for (int i = 0; i < kMaxTempFiles; ++i) {
    bool expected = false;
    if (g_slots[i].used.compare_exchange_strong(expected, true)) {
      std::memcpy(g_slots[i].path, path.c_str(), path.size() + 1);
      g_slots[i].ready.store(true, std::memory_order_release);
      slot_ = i;
      return;
    }
  }
}

TempFileRegistration::~TempFileRegistration() {
  if (slot_ < 0) return;
  g_slots[slot_].ready.store(false, std::memory_order_release);
  g_slots[slot_].used.store(false, std::memory_order_release);
}

CooperativeInterrupt::CooperativeInterrupt(const char* first_signal_message) {
  if (first_signal_message) g_cooperative_message.store(first_signal_message);
  g_cooperative.fetch_add(1);
}
CooperativeInterrupt::~CooperativeInterrupt() {
  if (g_cooperative.fetch_sub(1) == 1) g_cooperative_message.store(nullptr);
}
int CooperativeInterrupt::signal_received() { return g_signal.load(); }
void CooperativeInterrupt::clear() { g_signal.store(0); }

}  // namespace bitsplit
