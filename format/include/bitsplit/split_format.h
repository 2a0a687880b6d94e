// The bit-split file format (docs/FORMAT.md): the bitsplit.* metadata of a converted file, the
// five tensors a split projection becomes, and which projections are split. The one place that
// answers "is this a bit-split file?" (read_split_format). convert/ writes these files;
// backend/planes.h reads a projection's planes back.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>

#include "bitsplit/gguf.h"
#include "bitsplit/quant.h"
#include "bitsplit/status.h"

namespace bitsplit {

inline constexpr uint32_t kSplitFormatVersion = 1;

// What a converted file's bitsplit.* metadata says about its planes.
struct SplitFormat {
  int group = 64;
  int draft_bits = 2;
  int residual_bits = 8;
};

// nullopt for an ordinary (unconverted) model; an error for inconsistent bitsplit.* keys.
Result<std::optional<SplitFormat>> read_split_format(const gguf::Metadata& metadata);

// The five tensors a split projection `base` ("blk.3.ffn_up" for blk.3.ffn_up.weight) becomes.
struct SplitTensorNames {
  std::string draft_codes, draft_scales, draft_offsets, resid_codes, resid_scales;
};
SplitTensorNames split_tensor_names(const std::string& base);

// Those five tensors in file order, with their type and row length: a tensor's dims are
// {row, out} (I8 codes: code_row_bytes per row; F16 scales/offsets: one per group). The one
// description of the layout that convert, synth and the loader all follow.
enum SplitPlane { kDraftCodes, kDraftScales, kDraftOffsets, kResidCodes, kResidScales, kSplitPlanes };
struct SplitPlaneTensor {
  std::string name;
  gguf::TensorType type;
  int64_t row;
};
std::array<SplitPlaneTensor, kSplitPlanes> split_plane_tensors(const std::string& base, int64_t in,
                                                                const SplitFormat& format);

// True for the 2-D projections that are split (attention, FFN, output head).
bool is_split_projection(const std::string& tensor_name);

}  // namespace bitsplit
