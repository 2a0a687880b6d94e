// The bit-split file format (docs/FORMAT.md): the bitsplit.* metadata of a converted file, the
// tensors a split projection becomes (four in format 3, five before), and which projections
// are split. The one place that answers "is this a bit-split file?" (read_split_format).
// engine/convert/ writes these files; planes.h in engine/backend/ reads a projection's planes back.
#pragma once

#include <array>
#include <vector>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "bitsplit/gguf.h"
#include "bitsplit/quant.h"
#include "bitsplit/status.h"

namespace bitsplit {

// 2 added per-tensor draft bits (bitsplit.draft_bits.tensors / .values); 3 stores each residual
// plane in the CPU kernels' packed layout (one tensor <base>.resid_packed instead of .resid_codes
// and .resid_scales), so it is used from the memory map without a copy. Versions 1 and 2 still
// load (their residual is repacked at load).
inline constexpr uint32_t kSplitFormatVersion = 3;
// Tensor data alignment of a version-3 file (general.alignment): the kernels' aligned loads.
inline constexpr uint64_t kPackedAlignment = 64;

// What a converted file's bitsplit.* metadata says about its planes.
struct SplitFormat {
  int group = 64;
  int draft_bits = 2;  // every projection's, unless draft_bits_by_tensor names it
  int residual_bits = 8;
  std::map<std::string, int> draft_bits_by_tensor;
  uint32_t version = kSplitFormatVersion;  // what the file says (write_split_format writes it)
  // Version 3 and later: the residual is one tensor in the packed layout.
  bool packed_residual() const { return version >= 3; }  // base name ("blk.3.attn_v") -> 2, 3 or 4
  int draft_bits_for(const std::string& base) const {
    auto it = draft_bits_by_tensor.find(base);
    return it == draft_bits_by_tensor.end() ? draft_bits : it->second;
  }
};

// "draft 2.98 bits/weight: 2-bit x150, 3-bit x40, 4-bit x21 (4-bit: output, blk.0.attn_v, ...)":
// the mix of draft bits over the projections (base name -> bits), for convert and info.
std::string describe_draft_bits(const std::map<std::string, int>& bits, double bits_per_weight);

// Writes f's bitsplit.* keys (format version, group, bits, per-tensor draft bits).
void write_split_format(const SplitFormat& f, gguf::Metadata& metadata);

// nullopt for an ordinary (unconverted) model; an error for inconsistent bitsplit.* keys.
Result<std::optional<SplitFormat>> read_split_format(const gguf::Metadata& metadata);

// The tensors a split projection `base` ("blk.3.ffn_up" for blk.3.ffn_up.weight) becomes; which
// of the residual's names a file uses depends on its version.
struct SplitTensorNames {
  std::string draft_codes, draft_scales, draft_offsets, resid_codes, resid_scales, resid_packed;
};
SplitTensorNames split_tensor_names(const std::string& base);
// True for a plane tensor of the residual (either layout): what lives in RAM, not VRAM.
bool is_residual_plane_tensor(const std::string& name);

// Those tensors in file order, with their type and dims: the draft's three, then the residual's
// two (versions 1, 2: I8 codes of code_row_bytes per row, F16 scales one per group; dims {row, out})
// or its one packed tensor (version 3: I8, dims {tile_bytes, tiles} of quant::packed_shape). The
// one description of the layout that convert, synth and the loader all follow.
enum class SplitPlane { kDraftCodes, kDraftScales, kDraftOffsets, kResidCodes, kResidScales, kResidPacked };
struct SplitPlaneTensor {
  std::string name;
  gguf::TensorType type;
  int64_t row, rows;  // dims {row, rows}
  SplitPlane plane;
};
std::vector<SplitPlaneTensor> split_plane_tensors(const std::string& base, int64_t in, int64_t out,
                                                  const SplitFormat& format);

// "blk.3.attn_v.weight" -> "blk.3.attn_v" (the base name plane tensors and per-tensor keys use).
inline std::string split_base_name(const std::string& weight) {
  return weight.ends_with(".weight") ? weight.substr(0, weight.size() - 7) : weight;
}

// "blk.12.ffn_up.weight" -> (12, "ffn_up.weight"); false for names outside the blocks (or
// whose block number is not all digits).
bool split_block_name(std::string_view name, int64_t* layer, std::string* rest);

// True for the 2-D projections that are split (attention, FFN, output head).
bool is_split_projection(const std::string& tensor_name);

}  // namespace bitsplit
