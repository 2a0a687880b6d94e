// `bitsplit delta`: a fine-tuned model as 1-bit sign planes + f32 scales relative to its base
// (BitDelta), reading such files back, checking their base, and applying them in f32.
#include <chrono>
#include <cstring>

#include "bitsplit/delta_format.h"

#include "bitsplit/file_kind.h"
#include "bitsplit/split_format.h"

namespace bitsplit {
namespace {

using gguf::TensorType;

constexpr std::string_view kWeightSuffix = ".weight";
constexpr std::string_view kSignsSuffix = ".delta_signs";
constexpr std::string_view kAlphaSuffix = ".delta_alpha";

std::string strip_weight(const std::string& name) {
  return name.ends_with(kWeightSuffix) ? name.substr(0, name.size() - kWeightSuffix.size()) : name;
}

const char* alpha_name(quant::DeltaAlpha a) { return a == quant::DeltaAlpha::kRow ? "row" : "matrix"; }

std::vector<uint8_t> f32_bytes(const std::vector<float>& v) {
  std::vector<uint8_t> b(v.size() * 4);
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

// A sign plane only makes sense for the matrices whose fine-tuning delta is dense and
// low-magnitude: the projections and the token embedding.
bool sign_candidate(const std::string& name) { return is_split_projection(name) || name == "token_embd.weight"; }

enum class PlanKind { kSigns, kAlpha, kFull };
struct PlanItem {
  PlanKind kind;
  const gguf::TensorInfo* ft;
  const gguf::TensorInfo* base;  // null for kFull
};

Status reject_derived(const WeightSource& s, const char* role) {
  auto split = read_split_format(s.metadata());
  if (!split) return split.status().with_context(s.path());
  if (split->has_value()) {
    return Status::error(s.path() + ": the " + std::string(role) +
                         " model is a converted bit-split file; make deltas from the original GGUFs");
  }
  return require_model(s, ModelUse::kAny).with_context(std::string("the ") + role + " model");
}

// Both models are originals (not converted files), and the fine-tune has every base tensor.
Status check_delta_inputs(const WeightSource& base, const WeightSource& ft) {
  BITSPLIT_RETURN_IF_ERROR(reject_derived(base, "base"));
  BITSPLIT_RETURN_IF_ERROR(reject_derived(ft, "fine-tuned"));
  for (const auto& bt : base.tensors()) {
    if (!ft.find_tensor(bt.name)) {
      return Status::error("tensor '" + bt.name + "' of the base " + base.path() + " is missing from the fine-tuned " +
                           ft.path() + "; a delta cannot remove tensors");
    }
  }
  return Status::ok();
}

// Whether the fine-tune left tensor t as it is in the base (the same shape and the same values).
Result<bool> unchanged(const WeightSource& base, const WeightSource& ft, const gguf::TensorInfo& t,
                       const gguf::TensorInfo& bt) {
  BITSPLIT_ASSIGN_OR_RETURN(std::vector<float> w, ft.load_f32(t));
  BITSPLIT_ASSIGN_OR_RETURN(std::vector<float> b, base.load_f32(bt));
  ft.release(t);
  base.release(bt);
  return w == b;
}

// Plans every output tensor first (the writer needs them all before the data): a sign plane and
// its scales for a changed projection, the whole tensor for anything else that changed. Comparing
// the tensors here costs one extra read of both models but keeps identical tensors out.
Result<std::vector<PlanItem>> plan_delta(const WeightSource& base, const WeightSource& ft, bool per_row,
                                         gguf::Writer& writer, DeltaReport& rep) {
  std::vector<PlanItem> plan;
  for (const auto& t : ft.tensors()) {
    const gguf::TensorInfo* bt = base.find_tensor(t.name);
    for (const auto* info : {&t, bt}) {
      if (info && !gguf::File::can_read_f32(info->type)) {
        return Status::error("tensor '" + t.name + "' has type " + gguf::tensor_type_name(info->type) +
                             ", which cannot be read as f32");
      }
    }
    const bool same_shape = bt && bt->dims == t.dims;
    if (same_shape) {
      BITSPLIT_ASSIGN_OR_RETURN(bool same, unchanged(base, ft, t, *bt));
      if (same) {
        ++rep.omitted_tensors;
        continue;
      }
    }
    if (same_shape && t.dims.size() == 2 && sign_candidate(t.name)) {
      const int64_t in = t.dims[0], out = t.dims[1];
      BITSPLIT_RETURN_IF_ERROR(writer.add_tensor_info(delta_signs_name(t.name), TensorType::I8,
                                                      {quant::delta_sign_row_bytes(in), out}));
      BITSPLIT_RETURN_IF_ERROR(writer.add_tensor_info(delta_alpha_name(t.name), TensorType::F32, {per_row ? out : 1}));
      plan.push_back({PlanKind::kSigns, &t, bt});
      plan.push_back({PlanKind::kAlpha, &t, bt});
      ++rep.sign_tensors;
      rep.sign_weights += in * out;
    } else {
      BITSPLIT_RETURN_IF_ERROR(writer.add_tensor_info(t.name, TensorType::F32, t.dims));
      plan.push_back({PlanKind::kFull, &t, nullptr});
      ++rep.full_tensors;
    }
  }
  return plan;
}

// The delta's metadata: what it is, the base it binds to (by hash), how its scales were made.
Status write_delta_metadata(const WeightSource& base, const WeightSource& ft, const DeltaOptions& options,
                            const DeltaReport& rep, gguf::Metadata& m) {
  using gguf::Value;
  m.set("general.type", Value::string(kDeltaFileType));
  if (const Value* arch = ft.metadata().find("general.architecture")) m.set("general.architecture", *arch);
  BITSPLIT_ASSIGN_OR_RETURN(std::string ft_name, ft.metadata().get_string_or("general.name", ""));
  BITSPLIT_ASSIGN_OR_RETURN(std::string base_name, base.metadata().get_string_or("general.name", ""));
  m.set("general.name", Value::string(ft_name));
  m.set("bitsplit.delta.format_version", Value::u32(kDeltaFormatVersion));
  m.set("bitsplit.delta.alpha", Value::string(alpha_name(options.alpha)));
  m.set("bitsplit.delta.base_sha256", Value::string(rep.base_sha256));
  m.set("bitsplit.delta.base_name", Value::string(base_name));
  m.set("bitsplit.delta.finetuned_sha256", Value::string(rep.finetuned_sha256));
  if (options.alpha_override) m.set("bitsplit.delta.alpha_fit", Value::string(options.alpha_fit));
  return Status::ok();
}

// The planned tensors' bytes, in order: a sign plane's scales come right after its signs, so the
// scales of the plane just written are all it keeps.
class DeltaTensorWriter {
 public:
  DeltaTensorWriter(const WeightSource& base, const WeightSource& ft, const DeltaOptions& options,
                    const std::vector<PlanItem>& plan)
      : base_(base), ft_(ft), options_(options), plan_(plan) {}

  Result<std::vector<uint8_t>> tensor(size_t i) {
    const PlanItem& p = plan_[i];
    switch (p.kind) {
      case PlanKind::kFull: {
        BITSPLIT_ASSIGN_OR_RETURN(std::vector<float> w, ft_.load_f32(*p.ft));
        ft_.release(*p.ft);
        return f32_bytes(w);
      }
      case PlanKind::kSigns: return sign_plane(p);
      case PlanKind::kAlpha: return f32_bytes(pending_alpha_);
    }
    return Status::error("internal: unknown delta plan kind");
  }

 private:
  // The signs of W_ft - W_base, and their scales into pending_alpha_ (or the distilled ones).
  Result<std::vector<uint8_t>> sign_plane(const PlanItem& p) {
    BITSPLIT_ASSIGN_OR_RETURN(std::vector<float> delta, ft_.load_f32(*p.ft));
    BITSPLIT_ASSIGN_OR_RETURN(std::vector<float> b, base_.load_f32(*p.base));
    ft_.release(*p.ft);
    base_.release(*p.base);
    for (size_t k = 0; k < delta.size(); ++k) delta[k] -= b[k];
    const int64_t in = p.ft->dims[0], out = p.ft->dims[1];
    std::vector<uint8_t> signs(size_t(out * quant::delta_sign_row_bytes(in)));
    pending_alpha_.assign(size_t(options_.alpha == quant::DeltaAlpha::kRow ? out : 1), 0.0f);
    quant::bitdelta_encode_ref(delta.data(), out, in, options_.alpha, signs.data(), pending_alpha_.data());
    if (options_.alpha_override) {
      auto it = options_.alpha_override->find(p.ft->name);
      if (it != options_.alpha_override->end()) {
        if (it->second.size() != pending_alpha_.size()) {
          return Status::error("distilled scales of '" + p.ft->name + "' have the wrong length");
        }
        pending_alpha_ = it->second;
      }
    }
    return signs;
  }

  const WeightSource& base_;
  const WeightSource& ft_;
  const DeltaOptions& options_;
  const std::vector<PlanItem>& plan_;
  std::vector<float> pending_alpha_;  // the scales of the sign plane just written
};

}  // namespace

std::string delta_signs_name(const std::string& weight) { return strip_weight(weight) + std::string(kSignsSuffix); }
std::string delta_alpha_name(const std::string& weight) { return strip_weight(weight) + std::string(kAlphaSuffix); }

Status make_delta(const WeightSource& base, const WeightSource& ft, const std::string& out_path,
                  const DeltaOptions& options, DeltaReport* report) {
  const auto t0 = std::chrono::steady_clock::now();
  DeltaReport local;
  DeltaReport& rep = report ? *report : local;
  rep = {};
  BITSPLIT_RETURN_IF_ERROR(check_delta_inputs(base, ft));
  gguf::Writer writer;
  const bool per_row = options.alpha == quant::DeltaAlpha::kRow;
  BITSPLIT_ASSIGN_OR_RETURN(const std::vector<PlanItem> plan, plan_delta(base, ft, per_row, writer, rep));
  BITSPLIT_ASSIGN_OR_RETURN(rep.base_sha256, base.content_sha256());
  BITSPLIT_ASSIGN_OR_RETURN(rep.finetuned_sha256, ft.content_sha256());
  BITSPLIT_RETURN_IF_ERROR(write_delta_metadata(base, ft, options, rep, writer.metadata()));
  DeltaTensorWriter tensors(base, ft, options, plan);
  BITSPLIT_RETURN_IF_ERROR(writer.write_file_streaming(
      out_path, [&](size_t i, const gguf::TensorInfo&) { return tensors.tensor(i); }));
  for (const auto& info : writer.tensor_infos()) rep.output_bytes += info.nbytes;
  rep.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return Status::ok();
}

const DeltaTensor* DeltaFile::find(const std::string& weight) const {
  auto it = tensors.find(weight);
  return it == tensors.end() ? nullptr : &it->second;
}

Result<DeltaFile> open_delta(const std::string& path) {
  BITSPLIT_ASSIGN_OR_RETURN(gguf::File parsed, gguf::File::open(path));
  DeltaFile d;
  d.path = path;
  d.file = std::make_unique<gguf::File>(std::move(parsed));
  const gguf::Metadata& m = d.file->metadata();
  auto fail = [&](const std::string& what) { return Status::error(path + ": " + what); };
  BITSPLIT_ASSIGN_OR_RETURN(std::string type, m.get_string_or("general.type", ""));
  if (type != kDeltaFileType) {
    return fail("not a delta file (general.type is '" + type + "', expected '" + kDeltaFileType +
                "'); make one with `bitsplit delta`");
  }
  auto version = m.get_int("bitsplit.delta.format_version");
  if (!version) return version.status().with_context(path);
  if (*version != kDeltaFormatVersion) {
    return fail("bitsplit.delta.format_version " + std::to_string(*version) + " is not supported (this build reads " +
                std::to_string(kDeltaFormatVersion) + ")");
  }
  auto alpha = m.get_string("bitsplit.delta.alpha");
  auto base_sha = m.get_string("bitsplit.delta.base_sha256");
  auto ft_sha = m.get_string("bitsplit.delta.finetuned_sha256");
  for (const Status* s : {&alpha.status(), &base_sha.status(), &ft_sha.status()})
    if (!s->is_ok()) return s->with_context(path);
  if (*alpha != "row" && *alpha != "matrix") return fail("bitsplit.delta.alpha must be 'row' or 'matrix', not '" + *alpha + "'");
  d.alpha = *alpha == "row" ? quant::DeltaAlpha::kRow : quant::DeltaAlpha::kMatrix;
  d.base_sha256 = *base_sha;
  d.finetuned_sha256 = *ft_sha;
  BITSPLIT_ASSIGN_OR_RETURN(d.name, m.get_string_or("general.name", ""));

  for (const auto& t : d.file->tensors()) {
    const std::string_view n = t.name;
    if (n.ends_with(kAlphaSuffix)) {
      const std::string signs = t.name.substr(0, n.size() - kAlphaSuffix.size()) + std::string(kSignsSuffix);
      if (!d.file->find_tensor(signs)) return fail("tensor '" + t.name + "' has no sign plane '" + signs + "'");
      continue;
    }
    if (!n.ends_with(kSignsSuffix)) {
      if (!gguf::File::can_read_f32(t.type)) {
        return fail("tensor '" + t.name + "' has type " + gguf::tensor_type_name(t.type) + ", which cannot be read");
      }
      d.tensors[t.name] = DeltaTensor{DeltaTensor::Kind::kFull, t.name, 0, 0, nullptr, nullptr, &t};
      continue;
    }
    const std::string weight = t.name.substr(0, n.size() - kSignsSuffix.size()) + std::string(kWeightSuffix);
    const gguf::TensorInfo* a = d.file->find_tensor(delta_alpha_name(weight));
    if (!a) return fail("sign plane '" + t.name + "' has no scales '" + delta_alpha_name(weight) + "'");
    if (t.type != TensorType::I8 || t.dims.size() != 2) {
      return fail("sign plane '" + t.name + "' is " + gguf::tensor_type_name(t.type) + " " + t.shape_string() +
                  ", expected I8 [ceil(in/8), out]");
    }
    const int64_t out = t.dims[1];
    const int64_t want = d.alpha == quant::DeltaAlpha::kRow ? out : 1;
    if (a->type != TensorType::F32 || a->dims != std::vector<int64_t>{want}) {
      return fail("scales '" + a->name + "' are " + gguf::tensor_type_name(a->type) + " " + a->shape_string() +
                  ", expected F32 [" + std::to_string(want) + "] (alpha per " + *alpha + ")");
    }
    if (d.tensors.contains(weight)) return fail("weight '" + weight + "' has both a sign plane and a full tensor");
    d.tensors[weight] = DeltaTensor{DeltaTensor::Kind::kSigns, weight, out, t.dims[0], &t, a, nullptr};
  }
  return d;
}

Status check_delta_base(const DeltaFile& delta, const WeightSource& base) {
  std::string id;
  std::string how = "sha256";
  if (base.metadata().contains("bitsplit.source_sha256")) {
    auto s = base.metadata().get_string("bitsplit.source_sha256");
    if (!s) return s.status().with_context(base.path());
    id = *s;
    how = "bitsplit.source_sha256 (the sha256 of the model it was converted from)";
  } else {
    BITSPLIT_ASSIGN_OR_RETURN(id, base.content_sha256());
  }
  if (id != delta.base_sha256) {
    return Status::error("delta " + delta.path + " was made against a base with sha256 " + delta.base_sha256 + ", but " +
                         base.path() + " has " + how + " " + id + "; load it with the base it was made from");
  }
  return Status::ok();
}

std::vector<float> apply_sign_delta_ref(const std::vector<float>& base_w, int64_t out, int64_t in, const uint8_t* signs,
                                        const float* alpha, bool alpha_per_row) {
  BITSPLIT_CHECK(int64_t(base_w.size()) == out * in);
  std::vector<float> w(base_w.size());
  const int64_t row_bytes = quant::delta_sign_row_bytes(in);
  for (int64_t r = 0; r < out; ++r) {
    float* row = w.data() + r * in;
    quant::bitdelta_decode_row_ref(signs + r * row_bytes, alpha[alpha_per_row ? r : 0], in, row);
    for (int64_t i = 0; i < in; ++i) row[i] += base_w[size_t(r * in + i)];
  }
  return w;
}

Result<std::vector<float>> apply_delta_f32(const DeltaFile& delta, const std::string& weight,
                                           const std::vector<float>& base_w, int64_t out, int64_t in) {
  const DeltaTensor* e = delta.find(weight);
  if (!e) return base_w;
  if (e->kind == DeltaTensor::Kind::kFull) return delta.file->read_f32(*e->full);
  if (e->out != out || e->row_bytes != quant::delta_sign_row_bytes(in) || int64_t(base_w.size()) != out * in) {
    return Status::error(delta.path + ": sign plane of '" + weight + "' is " + e->signs->shape_string() +
                         ", which does not fit the base's [" + std::to_string(in) + ", " + std::to_string(out) + "]");
  }
  const auto signs = delta.file->tensor_bytes(*e->signs);
  BITSPLIT_ASSIGN_OR_RETURN(std::vector<float> alpha, delta.file->read_f32(*e->alpha));
  return apply_sign_delta_ref(base_w, out, in, signs.data(), alpha.data(), delta.alpha == quant::DeltaAlpha::kRow);
}

Result<std::vector<float>> apply_delta_f32(const DeltaFile& delta, const WeightSource& base, const std::string& weight) {
  const gguf::TensorInfo* bt = base.find_tensor(weight);
  const DeltaTensor* e = delta.find(weight);
  if (!bt) {
    if (e && e->kind == DeltaTensor::Kind::kFull) return delta.file->read_f32(*e->full);
    return Status::error(base.path() + ": tensor '" + weight + "' is missing");
  }
  BITSPLIT_ASSIGN_OR_RETURN(std::vector<float> w, base.load_f32(*bt));
  return apply_delta_f32(delta, weight, w, bt->rows(), bt->dims.empty() ? 1 : bt->dims[0]);
}

}  // namespace bitsplit
