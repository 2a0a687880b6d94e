// Fused projections as separate tensors: phi3 files store q, k and v as one `attn_qkv` tensor
// and gate and up as one `ffn_up` of 2·n_ff rows; mixture-of-experts files stack every expert's
// projection in one 3-D `ffn_{gate,up,down}_exps` tensor. unfuse_projections() presents such a
// file with `attn_q`/`attn_k`/`attn_v`, `ffn_gate`/`ffn_up` and per-expert `ffn_gate.<e>` (…)
// views (row ranges of the fused tensor, no copy), so every consumer (load, convert, eval,
// delta) sees one 2-D tensor per projection. A converted file stores the separate tensors.
#pragma once

#include <memory>

#include "bitsplit/weights.h"

namespace bitsplit {

// The source as it is when nothing is fused; an error naming the tensor when a fused tensor's
// rows do not add up to the configuration's widths.
Result<std::unique_ptr<WeightSource>> unfuse_projections(std::unique_ptr<WeightSource> source);

}  // namespace bitsplit
