// Fuzz harness for the LoRA adapter reader: the input is a whole file, opened through a memfd
// path with open_lora. Every pair it accepts must have the shapes it promises (a [in, rank] and
// b [rank, out], or token_embd's [rank, n_vocab] / [rank, n_embd]); the small ones are read to
// f32 factors (read_lora_factors) whose sizes must be U out x rank and V rank x in.
#pragma once

#include <cmath>

#include "bitsplit/lora_format.h"
#include "harness_common.h"
#include "harness_gguf.h"

namespace bitsplit::fuzz {

inline int run_lora(const uint8_t* data, size_t size) {
  MemFile mem(data, size);
  auto lora = open_lora(mem.path());
  if (!lora) {
    BITSPLIT_FUZZ_ASSERT(!lora.status().message().empty(), "an error without a message");
    return 0;
  }
  uint64_t h = touch_tensors(*lora->file);
  BITSPLIT_FUZZ_ASSERT(!lora->tensors.empty(), "an adapter without tensors was accepted");
  BITSPLIT_FUZZ_ASSERT(lora->alpha >= 0.0f && std::isfinite(lora->alpha), "a bad alpha was accepted");
  for (const auto& [weight, t] : lora->tensors) {
    BITSPLIT_FUZZ_ASSERT(t.a && t.b && t.rank >= 1 && t.in >= 1 && t.out >= 1, "'" + weight + "' is incomplete");
    const std::vector<int64_t> want_a = t.embedding ? std::vector<int64_t>{t.rank, t.out} : std::vector<int64_t>{t.in, t.rank};
    const std::vector<int64_t> want_b = t.embedding ? std::vector<int64_t>{t.rank, t.in} : std::vector<int64_t>{t.rank, t.out};
    BITSPLIT_FUZZ_ASSERT(t.a->dims == want_a && t.b->dims == want_b, "'" + weight + "' has factors of other shapes");
    BITSPLIT_FUZZ_ASSERT(std::isfinite(lora->effective_scale(t, 1.0f)), "a non-finite scale");
    if (double(t.rank) * double(t.in + t.out) > double(kMaxElementsToRead)) continue;
    auto f = read_lora_factors(*lora, t);
    if (!f) {
      BITSPLIT_FUZZ_ASSERT(!f.status().message().empty(), "an error without a message");
      continue;
    }
    BITSPLIT_FUZZ_ASSERT(int64_t(f->up.size()) == t.out * t.rank && int64_t(f->down.size()) == t.rank * t.in,
                         "factors of '" + weight + "' have the wrong size");
    h += f->up.size() + f->down.size();
  }
  volatile uint64_t sink = h;
  (void)sink;
  return 0;
}

}  // namespace bitsplit::fuzz
