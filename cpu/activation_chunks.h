// cpu/ internal: how the tiers lay activations out for their kernels — every (row, group)
// quantised with a tier's own single-group quantiser, and the chunked re-layout of the AVX-512
// kernels. In an unnamed namespace on purpose, and included by a tier file inside its
// instruction-set region (bitsplit/isa_target.h): each tier gets its own copy compiled for it (the
// quantiser inlines), and the linker can never hand one tier, or generic code, another's
// instructions. The scalar tier and cpu_context.cpp include it as any header.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "bitsplit/cpu.h"

namespace bitsplit::cpu::detail {

// Quantises every (row, group) of x with an ISA tier's single-group quantiser.
namespace {
template <typename GroupQuantizer>
void quantize_rows(const float* x, int64_t rows, int64_t in, int group, QuantizedActivations& qa,
                   GroupQuantizer quantize_group, int64_t first = 0, int64_t out_row0 = 0) {
  for (int64_t r = first; r < rows; ++r) {
    const int64_t o = out_row0 + r;
    for (int64_t k = 0; k < qa.groups; ++k)
      quantize_group(x + r * in + k * group, std::min<int64_t>(group, in - k * group), group,
                     qa.q.data() + o * qa.padded + k * group, &qa.scale[size_t(o * qa.groups + k)],
                     &qa.sum[size_t(o * qa.groups + k)]);
  }
}

// The activations re-laid out for the AVX-512 kernels, in chunks of up to chunk_rows rows: for the
// chunk at row r0 (nr rows), group k, 4-code chunk c and row r the 4 int8 are the int32 at
// q[r0 * groups * chunks + (k * chunks + c) * nr + r]; s_x and sum(q) at [r0 * groups + k * nr + r].
// Each worker keeps one (thread_local), reused across calls.
struct ChunkedActivations {
  // One chunk's rows, indexed from its first: q[(k * chunks + c) * nr + r], scale / sum[k * nr + r].
  struct Chunk {
    const int32_t* q;
    const float* scale;
    const int32_t* sum;
  };
  std::vector<int32_t> q, sum;
  std::vector<float> scale;
  int64_t groups = 0, chunks = 0;
  Chunk chunk(int64_t r0) const {
    return {q.data() + r0 * groups * chunks, scale.data() + r0 * groups, sum.data() + r0 * groups};
  }
  void fill(const QuantizedActivations& qa, int64_t chunk_rows) {
    groups = qa.groups;
    chunks = qa.group / 4;
    const int64_t rows = qa.rows;
    q.resize(size_t(rows * groups * chunks));
    sum.resize(size_t(rows * groups));
    scale.resize(size_t(rows * groups));
    for (int64_t r0 = 0; r0 < rows; r0 += chunk_rows) {
      const int64_t nr = std::min(chunk_rows, rows - r0);
      for (int64_t r = 0; r < nr; ++r) {
        const int8_t* src = qa.row_q(r0 + r);
        for (int64_t k = 0; k < groups; ++k) {
          for (int64_t c = 0; c < chunks; ++c)
            std::memcpy(&q[size_t(r0 * groups * chunks + (k * chunks + c) * nr + r)], src + k * qa.group + 4 * c, 4);
          sum[size_t(r0 * groups + k * nr + r)] = qa.sum[size_t((r0 + r) * groups + k)];
          scale[size_t(r0 * groups + k * nr + r)] = qa.scale[size_t((r0 + r) * groups + k)];
        }
      }
    }
  }
};
}  // namespace

}  // namespace bitsplit::cpu::detail
