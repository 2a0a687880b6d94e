// Fuzz harness for the BitDelta delta-file loader: the input is a whole file, opened through a
// memfd path with open_delta. For every entry it finds, the sign plane and scales are read end to
// end and, when small, applied to a zero base matrix of the shape the entry claims
// (apply_delta_f32), full tensors converted to f32. Asserts that each entry's tensors have the
// shapes open_delta promises (signs I8 [row_bytes, out], scales F32 [out] or [1]).
#pragma once

#include "bitsplit/delta_format.h"
#include "harness_common.h"
#include "harness_gguf.h"

namespace bitsplit::fuzz {

inline int run_delta(const uint8_t* data, size_t size) {
  MemFile mem(data, size);
  auto delta = open_delta(mem.path());
  if (!delta) {
    BITSPLIT_FUZZ_ASSERT(!delta.status().message().empty(), "an error without a message");
    return 0;
  }
  uint64_t h = touch_tensors(*delta->file);
  for (const auto& [weight, e] : delta->tensors) {
    BITSPLIT_FUZZ_ASSERT(delta->find(weight) == &e, "entry '" + weight + "' does not find itself");
    if (e.kind == DeltaTensor::Kind::kFull) {
      BITSPLIT_FUZZ_ASSERT(e.full != nullptr, "full entry without a tensor");
      if (e.full->n_elements() <= kMaxElementsToRead) {
        auto base = std::vector<float>(size_t(e.full->n_elements()));
        auto w = apply_delta_f32(*delta, weight, base, e.full->rows(), e.full->dims[0]);
        if (w) h += w->size();
      }
      continue;
    }
    BITSPLIT_FUZZ_ASSERT(e.signs && e.alpha, "sign entry without its tensors");
    BITSPLIT_FUZZ_ASSERT(e.signs->type == gguf::TensorType::I8 && e.signs->dims.size() == 2 &&
                             e.signs->dims[0] == e.row_bytes && e.signs->dims[1] == e.out,
                         "sign plane of '" + weight + "' is not I8 [row_bytes, out]");
    const int64_t want_alpha = delta->alpha == quant::DeltaAlpha::kRow ? e.out : 1;
    BITSPLIT_FUZZ_ASSERT(e.alpha->type == gguf::TensorType::F32 && e.alpha->dims == std::vector<int64_t>{want_alpha},
                         "scales of '" + weight + "' have the wrong shape");
    // The widest base row these sign bytes can cover; apply to a zero base of that shape.
    const int64_t in = e.row_bytes * 8;
    if (double(in) * double(e.out) > double(kMaxElementsToRead)) continue;
    std::vector<float> base(size_t(in * e.out), 0.0f);
    auto w = apply_delta_f32(*delta, weight, base, e.out, in);
    BITSPLIT_FUZZ_ASSERT(w.is_ok(), "a validated sign entry failed to apply: " + w.status().message());
    BITSPLIT_FUZZ_ASSERT(int64_t(w->size()) == in * e.out, "applied delta of the wrong size");
    h += w->size();
  }
  volatile uint64_t sink = h;
  (void)sink;
  return 0;
}

}  // namespace bitsplit::fuzz
