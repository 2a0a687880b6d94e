// Bit-split model files: `bitsplit convert` (source GGUF -> D + R planes in a GGUF), the
// tensor naming and metadata of converted files, and reading split weights back.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "bitsplit/model.h"
#include "bitsplit/quant.h"
#include "bitsplit/status.h"
#include "bitsplit/weights.h"

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

// Reads one split projection's planes (checking every tensor's type and shape).
Result<SplitProjection> load_split_planes(const WeightSource& source, const std::string& base, int64_t in, int64_t out,
                                          const SplitFormat& format);

// Reconstructs one split projection as f32 [out x in]: D + R, or D alone.
Result<std::vector<float>> load_split_f32(const WeightSource& source, const std::string& base, int64_t in,
                                          int64_t out, const SplitFormat& format, bool with_residual);

// Per-column importance (mean squared activation) of each projection, by weight name.
using ImportanceMatrix = std::map<std::string, std::vector<float>>;
Result<ImportanceMatrix> read_imatrix(const std::string& path);
Status write_imatrix(const ImportanceMatrix& imatrix, int64_t n_tokens, const std::string& source_text,
                     const std::string& path);

struct ConvertOptions {
  quant::SplitParams split;
  const ImportanceMatrix* imatrix = nullptr;
  std::string imatrix_path;  // recorded in the metadata
};

struct ConvertProgress {
  size_t tensors_done = 0, tensors_total = 0;
  uint64_t bytes_done = 0, bytes_total = 0;  // source tensor bytes
  std::string current;                       // tensor being converted
};

struct ConvertReport {
  uint64_t source_bytes = 0, output_bytes = 0;
  uint64_t largest_tensor_f32_bytes = 0;
  uint64_t peak_rss_bytes = 0;
  int64_t split_weights = 0;  // weights in split projections
  std::map<std::string, int64_t> source_types;  // type name -> weights, over split projections
  std::string source_sha256;
  double seconds = 0.0;
};

// Converts `source` into a bit-split GGUF at out_path (written under a temporary name and
// renamed at the end). Streams tensor by tensor; rows are quantised in parallel.
Status convert_model(const WeightSource& source, const std::string& out_path, const ConvertOptions& options,
                     const std::function<void(const ConvertProgress&)>& on_progress, ConvertReport* report);

// `bitsplit quantize`: a plain Q8_0 model, the llama.cpp-style baseline we measure against.
// Projections whose rows are a multiple of 32 become Q8_0 (quant::quantize_q8_0_ref, as
// llama.cpp's quantize does); everything else is copied as f32. Streams tensor by tensor.
Status quantize_model_q8_0(const WeightSource& source, const std::string& out_path,
                           const std::function<void(size_t done, size_t total)>& on_progress, uint64_t* output_bytes);

}  // namespace bitsplit

