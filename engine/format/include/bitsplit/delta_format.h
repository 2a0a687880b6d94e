// BitDelta variants: `bitsplit delta` (a fine-tuned model stored as 1-bit sign planes plus
// scales relative to its base), reading delta files back and checking them against a base,
// and a byte-budgeted cache of loaded variants.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "bitsplit/gguf.h"
#include "bitsplit/quant.h"
#include "bitsplit/status.h"
#include "bitsplit/weights.h"

namespace bitsplit {

inline constexpr uint32_t kDeltaFormatVersion = 1;
inline constexpr const char* kDeltaFileType = "bitsplit.delta";

// Tensor names of a sign-plane delta for the weight `name` ("blk.3.ffn_up.weight" ->
// "blk.3.ffn_up.delta_signs" / ".delta_alpha").
std::string delta_signs_name(const std::string& weight_name);
std::string delta_alpha_name(const std::string& weight_name);

struct DeltaOptions {
  quant::DeltaAlpha alpha = quant::DeltaAlpha::kRow;
  // Scales to store instead of mean |Δ| (by weight name; from distill_delta_scales), and how
  // they were fitted (recorded as bitsplit.delta.alpha_fit).
  const std::map<std::string, std::vector<float>>* alpha_override = nullptr;
  std::string alpha_fit;
};

struct DeltaReport {
  int64_t sign_tensors = 0, full_tensors = 0, omitted_tensors = 0;
  int64_t sign_weights = 0;  // weights covered by sign planes
  uint64_t output_bytes = 0;  // tensor data written
  std::string base_sha256, finetuned_sha256;
  double seconds = 0.0;
};

// Writes the delta of `finetuned` against `base` to out_path (temporary name, renamed at the
// end), tensor by tensor. Projections (is_split_projection) and token_embd become sign planes
// when their shapes match; other tensors that differ are stored in full as f32; identical
// tensors are omitted. Errors name the tensor and both files.
Status make_delta(const WeightSource& base, const WeightSource& finetuned, const std::string& out_path,
                  const DeltaOptions& options, DeltaReport* report);

// One weight's entry in a delta file.
struct DeltaTensor {
  enum class Kind { kSigns, kFull };
  Kind kind = Kind::kSigns;
  std::string weight;             // "blk.0.attn_q.weight"
  int64_t out = 0, row_bytes = 0;  // kSigns: rows and sign bytes per row (in comes from the base)
  const gguf::TensorInfo* signs = nullptr;  // kSigns
  const gguf::TensorInfo* alpha = nullptr;  // kSigns: [out] or [1]
  const gguf::TensorInfo* full = nullptr;   // kFull
};

// An opened, validated delta file (tensor data stay mapped).
struct DeltaFile {
  std::string path;
  std::unique_ptr<gguf::File> file;
  quant::DeltaAlpha alpha = quant::DeltaAlpha::kRow;
  std::string base_sha256, finetuned_sha256, name;
  std::map<std::string, DeltaTensor> tensors;  // by weight name
  const DeltaTensor* find(const std::string& weight) const;
};

Result<DeltaFile> open_delta(const std::string& path);
// The delta's base identity against `base` (an original GGUF, or a converted bit-split file
// whose bitsplit.source_sha256 names its original). The error names both hashes.
Status check_delta_base(const DeltaFile& delta, const WeightSource& base);

// Δ̂ applied to one base matrix [out x in] (row-major): w + α ⊙ sign. Reference path.
std::vector<float> apply_sign_delta_ref(const std::vector<float>& base_w, int64_t out, int64_t in,
                                        const uint8_t* signs, const float* alpha, bool alpha_per_row);
// For tests (the engine applies deltas inside the kernels, never in f32): the fine-tuned
// approximation of the base tensor `weight`: base + Δ̂ for sign planes, the stored tensor for
// full entries, the base tensor where the delta has nothing.
Result<std::vector<float>> apply_delta_f32(const DeltaFile& delta, const WeightSource& base, const std::string& weight);
// The same for a base tensor already in f32 (as a Model holds it), shape [out x in].
Result<std::vector<float>> apply_delta_f32(const DeltaFile& delta, const std::string& weight,
                                           const std::vector<float>& base_w, int64_t out, int64_t in);

}  // namespace bitsplit
