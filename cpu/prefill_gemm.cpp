// Prompt prefill: plane tiles dequantised to f32, multiplied by oneDNN's sgemm.
#include <algorithm>
#include <cstring>
#include <vector>

#include "bitsplit/cpu.h"
#include "bitsplit/quant.h"
#include "bitsplit/status.h"

#ifdef BITSPLIT_HAVE_DNNL
#include <oneapi/dnnl/dnnl.h>
#endif

namespace bitsplit::cpu {
namespace {

// Output rows per dequantised tile: about 2 MiB of f32 weights, a multiple of 16.
int64_t tile_rows(int64_t in) { return std::max<int64_t>(16, (int64_t(1) << 19) / in / 16 * 16); }

// Row o of the variant's weights: d_i (+ r_i) (+ α s_i).
void dequantize_row(const DraftPlaneView& d, const ResidualPlaneView* r, const SignPlaneView* delta, int64_t o,
                    float* w, std::vector<float>& scratch) {
  const int64_t groups = quant::groups_per_row(d.in, d.group);
  quant::dequantize_draft_row_ref(d.codes + o * quant::code_row_bytes(d.in, d.group, d.bits), d.scales + o * groups,
                                  d.offsets + o * groups, d.in, d.group, d.bits, w);
  if (r) {
    scratch.resize(size_t(d.in));
    quant::dequantize_residual_row_ref(r->codes + o * quant::code_row_bytes(r->in, r->group, r->bits),
                                       r->scales + o * quant::groups_per_row(r->in, r->group), r->in, r->group, r->bits,
                                       scratch.data());
    for (int64_t i = 0; i < d.in; ++i) w[i] += scratch[size_t(i)];
  }
  if (delta) {
    const uint8_t* s = delta->signs + o * delta->row_bytes;
    const float a = delta->alpha[delta->alpha_per_row ? o : 0];
    for (int64_t i = 0; i < d.in; ++i) w[i] += (s[i / 8] >> (i % 8)) & 1 ? -a : a;
  }
}

}  // namespace

#ifdef BITSPLIT_HAVE_DNNL
bool prefill_available() { return true; }

bool prefill_matmul(CpuContext& ctx, const DraftPlaneView& d, const ResidualPlaneView* r, const SignPlaneView* delta,
                    const float* x, int64_t rows, float* y) {
  BITSPLIT_CHECK(!r || (r->out == d.out && r->in == d.in), "residual plane does not match the draft plane");
  BITSPLIT_CHECK(!delta || (delta->out == d.out && delta->in == d.in), "sign plane does not match the draft plane");
  const int64_t in = d.in, out = d.out, tile = tile_rows(in);
  const int64_t blocks = (rows + kPrefillBlockRows - 1) / kPrefillBlockRows;
  // Activations in whole blocks (zero padding), results per block before copying out.
  std::vector<float> xs(size_t(blocks * kPrefillBlockRows * in), 0.0f);
  std::memcpy(xs.data(), x, size_t(rows * in) * sizeof(float));
  std::vector<float> ys(size_t(blocks * kPrefillBlockRows * out));
  std::vector<float> w(size_t(tile * in));
  for (int64_t o0 = 0; o0 < out; o0 += tile) {
    const int64_t n = std::min(tile, out - o0);
    ctx.run_slices(n, 1, [&](int64_t b, int64_t e) {
      std::vector<float> scratch;
      for (int64_t t = b; t < e; ++t) dequantize_row(d, r, delta, o0 + t, w.data() + t * in, scratch);
    });
    for (int64_t blk = 0; blk < blocks; ++blk) {
      // C[64 x n] = X[64 x in] · W[n x in]^T, written into columns o0.. of the block's rows.
      const dnnl_status_t st = dnnl_sgemm('N', 'T', kPrefillBlockRows, n, in, 1.0f,
                                          xs.data() + blk * kPrefillBlockRows * in, in, w.data(), in, 0.0f,
                                          ys.data() + blk * kPrefillBlockRows * out + o0, out);
      BITSPLIT_CHECK(st == dnnl_success, "oneDNN sgemm failed");
    }
  }
  std::memcpy(y, ys.data(), size_t(rows * out) * sizeof(float));
  return true;
}
#else
bool prefill_available() { return false; }

bool prefill_matmul(CpuContext&, const DraftPlaneView&, const ResidualPlaneView*, const SignPlaneView*, const float*,
                    int64_t, float*) {
  return false;
}
#endif

}  // namespace bitsplit::cpu
