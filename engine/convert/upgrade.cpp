// `bitsplit convert OLD.gguf NEW.gguf` on a bit-split file of format 1 or 2: the same planes
// rewritten as format 3 (each residual's codes and scales as one tensor in the kernels' packed
// layout), every other tensor and key kept — no fit, so at the speed of the disk.
#include <chrono>
#include <cstring>

#include "bitsplit/convert.h"

namespace bitsplit {

Status upgrade_split_model(const WeightSource& source, const std::string& out_path, const SplitLimits& output_split,
                           const std::function<void(size_t, size_t)>& on_progress, ConvertReport* report) {
  const auto t0 = std::chrono::steady_clock::now();
  auto split = read_split_format(source.metadata());
  if (!split) return split.status().with_context(source.path());
  if (!split->has_value()) return Status::error(source.path() + ": is not a bit-split model (nothing to upgrade)");
  SplitFormat format = **split;
  if (format.packed_residual()) {
    return Status::error(source.path() + ": is already bit-split format " + std::to_string(format.version) +
                         "; to convert it with other options, convert the original");
  }
  format.version = kSplitFormatVersion;
  ConvertReport local;
  ConvertReport& rep = report ? *report : local;
  rep = {};

  // The output tensors: each residual's codes become its packed tensor (in its place), its
  // scales go with them; the rest are copied. What a packed tensor is made from:
  struct Out {
    const gguf::TensorInfo* source;   // copied as is, or the residual's codes
    const gguf::TensorInfo* scales = nullptr;
    quant::PackedShape shape;
  };
  std::vector<Out> plan;
  gguf::Writer writer;
  writer.set_alignment(kPackedAlignment);
  for (const auto& [key, value] : source.metadata().entries()) {
    if (key != "general.alignment" && !is_split_set_key(key)) writer.metadata().set(key, value);
  }
  write_split_format(format, writer.metadata());
  for (const auto& t : source.tensors()) {
    rep.source_bytes += t.nbytes;
    if (t.name.ends_with(".resid_scales")) continue;  // packed with the codes
    if (!t.name.ends_with(".resid_codes")) {
      BITSPLIT_RETURN_IF_ERROR(writer.add_tensor_info(t.name, t.type, t.dims));
      plan.push_back({&t});
      continue;
    }
    const std::string base = t.name.substr(0, t.name.size() - std::string(".resid_codes").size());
    const SplitTensorNames names = split_tensor_names(base);
    const gguf::TensorInfo* scales = source.find_tensor(names.resid_scales);
    if (t.dims.size() != 2 || !scales || scales->dims.size() != 2 || scales->dims[1] != t.dims[1] ||
        t.dims[0] * 8 % format.residual_bits != 0 || t.dims[0] * 8 / format.residual_bits != scales->dims[0] * format.group ||
        t.type != gguf::TensorType::I8 || scales->type != gguf::TensorType::F16) {
      return Status::error(source.path() + ": the residual planes of '" + base +
                           "' do not match each other or bitsplit.group_size / residual_bits");
    }
    // The padded width stands for `in`: the layout depends on the groups only.
    const int64_t padded_in = t.dims[0] * 8 / format.residual_bits, out = t.dims[1];
    const quant::PackedShape shape = quant::packed_shape(out, padded_in, format.group, format.residual_bits, false);
    BITSPLIT_RETURN_IF_ERROR(writer.add_tensor_info(names.resid_packed, gguf::TensorType::I8, {shape.tile_bytes, shape.tiles}));
    plan.push_back({&t, scales, shape});
  }
  BITSPLIT_ASSIGN_OR_RETURN(rep.source_sha256, source.content_sha256());

  const auto produce = [&](size_t i, const gguf::TensorInfo&) -> Result<std::vector<uint8_t>> {
    const Out& o = plan[i];
    if (on_progress) on_progress(i, plan.size());
    BITSPLIT_ASSIGN_OR_RETURN(std::span<const uint8_t> bytes, source.raw_bytes(*o.source));
    if (!o.scales) {
      std::vector<uint8_t> copy(bytes.begin(), bytes.end());
      source.release(*o.source);
      return copy;
    }
    BITSPLIT_ASSIGN_OR_RETURN(std::span<const uint8_t> scale_bytes, source.raw_bytes(*o.scales));
    std::vector<uint16_t> scales(scale_bytes.size() / 2);
    std::memcpy(scales.data(), scale_bytes.data(), scales.size() * 2);
    std::vector<uint8_t> packed(size_t(o.shape.bytes()));
    quant::pack_tiles(o.shape, bytes.data(), scales.data(), nullptr, packed.data(), 0, o.shape.tiles);
    source.release(*o.source);
    source.release(*o.scales);
    return packed;
  };
  BITSPLIT_ASSIGN_OR_RETURN(rep.output_paths, write_model_file(writer, out_path, output_split, produce));
  if (on_progress) on_progress(plan.size(), plan.size());
  for (const auto& info : writer.tensor_infos()) rep.output_bytes += info.nbytes;
  rep.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return Status::ok();
}

}  // namespace bitsplit
