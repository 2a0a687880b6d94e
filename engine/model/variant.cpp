// Variants: a delta file's sign planes or a LoRA adapter's factors read into memory and
// checked against the loaded base.
#include "bitsplit/variant.h"

#include <sys/stat.h>
#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>

#include "bitsplit/file_kind.h"

#include "bitsplit/model.h"

namespace bitsplit {
namespace {

// The element count of a small tensor the variant may replace in full, or an error.
Result<int64_t> full_tensor_size(const Model& model, const std::string& name) {
  const ModelConfig& c = model.config();
  if (name == "output_norm.weight") return c.n_embd;
  if (name == "token_embd.weight") return c.n_vocab * c.n_embd;
  int64_t layer = 0;
  std::string rest;
  if (split_block_name(name, &layer, &rest) && layer < c.n_layers) {
    if (rest == "attn_norm.weight" || rest == "ffn_norm.weight") return c.n_embd;
    if (c.has_post_norms && (rest == "post_attention_norm.weight" || rest == "post_ffw_norm.weight")) return c.n_embd;
    if (c.is_moe() && rest == "ffn_gate_inp.weight") return c.n_expert * c.n_embd;
    if (c.n_ff_shexp > 0 && rest == "ffn_gate_inp_shexp.weight") return c.n_embd;
    if (c.has_qk_norm && (rest == "attn_q_norm.weight" || rest == "attn_k_norm.weight")) return c.head_dim;
    if (c.has_qkv_bias && rest == "attn_q.bias") return c.q_dim();
    if (c.has_qkv_bias && (rest == "attn_k.bias" || rest == "attn_v.bias")) return c.kv_dim();
  }
  return Status::error("tensor '" + name + "' is not one a variant can replace in full");
}

}  // namespace

Result<WeightShape> weight_shape(const Model& model, const std::string& weight) {
  const ModelConfig& c = model.config();
  if (weight == "token_embd.weight" || weight == "output.weight") return WeightShape{c.n_vocab, c.n_embd};
  int64_t layer = 0;
  std::string rest;
  if (split_block_name(weight, &layer, &rest) && layer < c.n_layers) {
    for (const ProjectionSlot& p : layer_projections(c)) {
      if (rest == p.kind + ".weight") return WeightShape{p.rows, p.cols};
    }
  }
  return Status::error("the model has no projection named '" + weight + "'");
}

Result<std::shared_ptr<const Variant>> Variant::make(const Model& base, std::string name,
                                                     std::map<std::string, VariantSigns> signs,
                                                     std::map<std::string, std::vector<float>> full,
                                                     std::map<std::string, VariantLora> lora) {
  auto v = std::shared_ptr<Variant>(new Variant());
  v->name_ = std::move(name);
  for (auto& [weight, s] : signs) {
    BITSPLIT_ASSIGN_OR_RETURN(WeightShape shape, weight_shape(base, weight));
    if (s.out != shape.out || s.in != shape.in || s.row_bytes != quant::delta_sign_row_bytes(s.in) ||
        s.signs.size() != size_t(s.out * s.row_bytes) || s.alpha.size() != size_t(s.alpha_per_row ? s.out : 1)) {
      return Status::error("variant '" + v->name_ + "': sign plane of '" + weight + "' is [" + std::to_string(s.in) + ", " +
                           std::to_string(s.out) + "] with " + std::to_string(s.alpha.size()) +
                           " scales; the base's weight is [" + std::to_string(shape.in) + ", " + std::to_string(shape.out) +
                           "]");
    }
    v->bytes_ += s.signs.size() + 4 * s.alpha.size();
    v->sign_weights_ += s.out * s.in;
    v->signs_[weight] = std::make_shared<const VariantSigns>(std::move(s));
  }
  // A model whose output head is the embedding (tied, or split from it by convert) reads the
  // embedding's delta in the head too, unless the delta has one for the head itself.
  const bool head_is_embedding = base.config().tied_output || base.output_from_embedding();
  if (head_is_embedding && !v->signs_.contains("output.weight")) {
    if (auto it = v->signs_.find("token_embd.weight"); it != v->signs_.end()) v->signs_["output.weight"] = it->second;
  }
  for (auto& [weight, l] : lora) {
    BITSPLIT_ASSIGN_OR_RETURN(WeightShape shape, weight_shape(base, weight));
    if (!std::isfinite(l.scale)) {
      return Status::error("variant '" + v->name_ + "': the LoRA scale of '" + weight +
                           "' is not finite (scale x alpha / rank overflows)");
    }
    if (l.out != shape.out || l.in != shape.in || l.rank < 1 || l.up.size() != size_t(l.out * l.rank) ||
        l.down.size() != size_t(l.rank * l.in)) {
      return Status::error("variant '" + v->name_ + "': the LoRA factors of '" + weight + "' are for a [" +
                           std::to_string(l.in) + ", " + std::to_string(l.out) + "] weight of rank " +
                           std::to_string(l.rank) + "; the base's weight is [" + std::to_string(shape.in) + ", " +
                           std::to_string(shape.out) + "]");
    }
    v->bytes_ += l.bytes();
    v->lora_[weight] = std::make_shared<const VariantLora>(std::move(l));
  }
  if (head_is_embedding && !v->lora_.contains("output.weight")) {
    if (auto it = v->lora_.find("token_embd.weight"); it != v->lora_.end()) v->lora_["output.weight"] = it->second;
  }
  for (auto& [weight, t] : full) {
    auto size = full_tensor_size(base, weight);
    if (!size) return size.status().with_context("variant '" + v->name_ + "'");
    if (int64_t(t.size()) != *size) {
      return Status::error("variant '" + v->name_ + "': tensor '" + weight + "' has " + std::to_string(t.size()) +
                           " values; the base's has " + std::to_string(*size));
    }
    if (weight == "token_embd.weight" && v->signs_.contains(weight)) {
      return Status::error("variant '" + v->name_ + "': token_embd.weight has both a sign plane and a full tensor");
    }
    v->bytes_ += 4 * t.size();
    v->full_[weight] = std::move(t);
  }
  v->resolve_layers(base.config());
  return std::shared_ptr<const Variant>(std::move(v));
}

const char* layer_tensor_name(LayerTensor t) {
  switch (t) {
    case LayerTensor::kAttnNorm: return "attn_norm.weight";
    case LayerTensor::kBiasQ: return "attn_q.bias";
    case LayerTensor::kBiasK: return "attn_k.bias";
    case LayerTensor::kBiasV: return "attn_v.bias";
    case LayerTensor::kQNorm: return "attn_q_norm.weight";
    case LayerTensor::kKNorm: return "attn_k_norm.weight";
    case LayerTensor::kFfnNorm: return "ffn_norm.weight";
    case LayerTensor::kPostAttnNorm: return "post_attention_norm.weight";
    case LayerTensor::kPostFfnNorm: return "post_ffw_norm.weight";
    case LayerTensor::kRouter: return "ffn_gate_inp.weight";
    case LayerTensor::kShexpGate: return "ffn_gate_inp_shexp.weight";
    case LayerTensor::kCount: break;
  }
  return "?";
}

// Once per variant, not per pass: a pass then reads its tables by index. (Resolving per pass
// would build every projection's name on every decode step, and for a mixture of experts every
// expert's, routed or not.)
void Variant::resolve_layers(const ModelConfig& c) {
  const std::vector<std::string> kinds = projection_kinds(c);
  layers_.assign(size_t(c.n_layers), VariantLayer{});
  for (int64_t l = 0; l < c.n_layers; ++l) {
    VariantLayer& layer = layers_[size_t(l)];
    const std::string b = "blk." + std::to_string(l) + ".";
    for (size_t t = 0; t < layer.full.size(); ++t) layer.full[t] = full(b + layer_tensor_name(LayerTensor(t)));
    layer.projections.resize(kinds.size());
    for (size_t slot = 0; slot < kinds.size(); ++slot) {
      const std::string weight = b + kinds[slot] + ".weight";
      layer.projections[slot] = {signs(weight), lora(weight)};
    }
  }
}

Result<std::shared_ptr<const Variant>> Variant::load(const DeltaFile& delta, const Model& base,
                                                     const WeightSource& base_source, std::string name) {
  BITSPLIT_RETURN_IF_ERROR(check_delta_base(delta, base_source));
  std::map<std::string, VariantSigns> signs;
  std::map<std::string, std::vector<float>> full;
  for (const auto& [weight, e] : delta.tensors) {
    if (e.kind == DeltaTensor::Kind::kFull) {
      BITSPLIT_ASSIGN_OR_RETURN(full[weight], delta.file->read_f32(*e.full));
      continue;
    }
    auto shape = weight_shape(base, weight);
    if (!shape) return shape.status().with_context(delta.path);
    VariantSigns s;
    s.out = e.out;
    s.in = shape->in;
    s.row_bytes = e.row_bytes;
    s.alpha_per_row = delta.alpha == quant::DeltaAlpha::kRow;
    const auto bytes = delta.file->tensor_bytes(*e.signs);
    s.signs.assign(bytes.begin(), bytes.end());
    BITSPLIT_ASSIGN_OR_RETURN(s.alpha, delta.file->read_f32(*e.alpha));
    signs[weight] = std::move(s);
  }
  auto v = make(base, std::move(name), std::move(signs), std::move(full));
  if (!v) return v.status().with_context(delta.path);
  return v;
}

Status check_lora_base(const LoraFile& lora, const Model& base) {
  if (lora.architecture != base.config().arch_name) {
    return Status::error(lora.path + ": the adapter is for a '" + lora.architecture + "' model; the base is '" +
                         base.config().arch_name + "'");
  }
  for (const auto& [weight, t] : lora.tensors) {
    // A tied head is the embedding (llama.cpp's tied models have no output.weight either).
    if (weight == "output.weight" && base.config().tied_output) {
      return Status::error(lora.path + ": the adapter changes 'output.weight', but the base ties its output head to "
                           "the token embedding (adapt token_embd.weight instead)");
    }
    auto shape = weight_shape(base, weight);
    if (!shape) return Status::error(lora.path + ": the adapter changes '" + weight + "', which the base does not have as a matrix");
    if (shape->out != t.out || shape->in != t.in) {
      return Status::error(lora.path + ": the adapter's '" + weight + "' is [" + std::to_string(t.in) + ", " +
                           std::to_string(t.out) + "] (rank " + std::to_string(t.rank) + "); the base's is [" +
                           std::to_string(shape->in) + ", " + std::to_string(shape->out) +
                           "]: an adapter for another model");
    }
    if (t.rank > std::min(t.in, t.out)) {
      return Status::error(lora.path + ": '" + weight + "' has rank " + std::to_string(t.rank) +
                           ", more than its matrix's smaller side (" + std::to_string(std::min(t.in, t.out)) + ")");
    }
  }
  return Status::ok();
}

Result<std::shared_ptr<const Variant>> Variant::load(const LoraFile& lora, const Model& base, std::string name,
                                                     float scale) {
  if (!std::isfinite(scale)) return Status::error(lora.path + ": the adapter's scale must be finite");
  BITSPLIT_RETURN_IF_ERROR(check_lora_base(lora, base));
  std::map<std::string, VariantLora> factors;
  for (const auto& [weight, t] : lora.tensors) {
    BITSPLIT_ASSIGN_OR_RETURN(LoraFactors f, read_lora_factors(lora, t));
    VariantLora l;
    l.out = t.out;
    l.in = t.in;
    l.rank = t.rank;
    l.scale = lora.effective_scale(t, scale);
    l.up = std::move(f.up);
    l.down = std::move(f.down);
    factors[weight] = std::move(l);
  }
  auto v = make(base, std::move(name), {}, {}, std::move(factors));
  if (!v) return v.status().with_context(lora.path);
  return v;
}

void VariantLora::apply(const float* x, int64_t rows, float* y) const {
  // Every element is one dot_f32 plus a zero bias, as cpu::matmul_f32 computes it (the device
  // draft's kernels repeat exactly this); the work is spread over threads only when there is
  // enough of it to pay for the dispatch (a decode step's products are a few thousand MACs).
  constexpr int64_t kParallelWork = int64_t(1) << 18;
  // The caller's scratch, reached through a pointer: inside the parallel loops a thread_local's
  // name would mean each worker's own copy.
  thread_local std::vector<float> scratch;
  scratch.resize(size_t(rows * rank));
  float* const tv = scratch.data();
  auto down_rows = [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      float* t = tv + r * rank;
      cpu::dot_f32_rows(x + r * in, down.data(), in, in, rank, t);
      for (int64_t k = 0; k < rank; ++k) t[k] = t[k] + 0.0f;
    }
  };
  auto up_cols = [&](int64_t o0, int64_t o1) {
    float u[64];
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t o = o0; o < o1; o += 64) {
        const int64_t count = std::min<int64_t>(64, o1 - o);
        cpu::dot_f32_rows(tv + r * rank, up.data() + o * rank, rank, rank, count, u);
        for (int64_t j = 0; j < count; ++j) y[r * out + o + j] += scale * (u[j] + 0.0f);
      }
  };
  if (rows * rank * in < kParallelWork) {
    down_rows(0, rows);
  } else {
    tbb::parallel_for(tbb::blocked_range<int64_t>(0, rows), [&](const auto& b) { down_rows(b.begin(), b.end()); });
  }
  if (rows * out * rank < kParallelWork) {
    up_cols(0, out);
  } else {
    tbb::parallel_for(tbb::blocked_range<int64_t>(0, out, 256), [&](const auto& b) { up_cols(b.begin(), b.end()); });
  }
}

void VariantLora::add_row(int64_t token, float* row) const {
  const float* u = up.data() + token * rank;
  for (int64_t j = 0; j < in; ++j) {
    float s = 0.0f;
    for (int64_t k = 0; k < rank; ++k) s += u[k] * down[size_t(k * in + j)];
    row[j] += scale * s;
  }
}

const VariantLora* Variant::lora(const std::string& weight) const {
  auto it = lora_.find(weight);
  return it == lora_.end() ? nullptr : it->second.get();
}

std::vector<std::string> Variant::lora_names() const {
  std::vector<std::string> names;
  for (const auto& [n, l] : lora_) names.push_back(n);
  return names;
}

std::string Variant::kind() const {
  if (!lora_.empty() && !signs_.empty()) return "BitDelta + LoRA";
  return lora_.empty() ? "BitDelta" : "LoRA";
}

const VariantSigns* Variant::signs(const std::string& weight) const {
  auto it = signs_.find(weight);
  return it == signs_.end() ? nullptr : it->second.get();
}

const std::vector<float>* Variant::full(const std::string& weight) const {
  auto it = full_.find(weight);
  return it == full_.end() ? nullptr : &it->second;
}

std::vector<std::string> Variant::sign_names() const {
  std::vector<std::string> names;
  for (const auto& [n, s] : signs_) names.push_back(n);
  return names;
}

std::vector<std::string> Variant::full_names() const {
  std::vector<std::string> names;
  for (const auto& [n, s] : full_) names.push_back(n);
  return names;
}

Result<std::vector<std::shared_ptr<const void>>> make_resident(const Model& base, const Variant& variant) {
  std::vector<std::shared_ptr<const void>> handles;
  if (!base.has_planes()) return handles;
  auto hold = [&](const SplitProjection* p, const VariantSigns* v) -> Status {
    if (!p || !v) return Status::ok();
    BITSPLIT_ASSIGN_OR_RETURN(auto h, base.backend().make_signs_resident(*p, v->view()));
    if (h) handles.push_back(std::move(h));
    return Status::ok();
  };
  for (const std::string& w : variant.sign_names()) BITSPLIT_RETURN_IF_ERROR(hold(base.split(w), variant.signs(w)));
  // A tied head takes the embedding's signs (forward_pass, describe_device_draft).
  if (base.config().tied_output) {
    BITSPLIT_RETURN_IF_ERROR(hold(base.split("output.weight"), variant.signs("token_embd.weight")));
  }
  return handles;
}

VariantRegistry::VariantRegistry(const Model& base, const WeightSource& base_source, VariantCacheOptions options,
                                 std::function<void(const std::string&)> log)
    : base_(base),
      base_source_(base_source),
      log_(std::move(log)),
      cache_(options, [this](const std::string& name) -> Result<VariantCache<Variant>::Loaded> {
        Registered file;
        {
          std::lock_guard<std::mutex> lock(mu_);
          auto it = files_.find(name);
          if (it == files_.end()) return Status::error("no variant named '" + name + "' is registered");
          file = it->second;
        }
        const auto t0 = std::chrono::steady_clock::now();
        if (file.resident) return VariantCache<Variant>::Loaded{file.resident, file.resident->bytes()};
        BITSPLIT_ASSIGN_OR_RETURN(std::shared_ptr<const Variant> loaded,
                                  file.delta ? Variant::load(*file.delta, base_, base_source_, name)
                                             : Variant::load(*file.lora, base_, name, file.scale));
        // The signs go where D lives (VRAM with a GPU backend) before the first request, and
        // leave it when the last owner of the variant (the cache, a running generation) lets go.
        BITSPLIT_ASSIGN_OR_RETURN(auto handles, make_resident(base_, *loaded));
        std::shared_ptr<const Variant> v(loaded.get(), [loaded, handles](const Variant*) {});
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (log_) {
          char line[256];
          std::snprintf(line, sizeof line, "variant '%s': loaded %.2f MiB of %s in %.1f ms (%s)", name.c_str(),
                        double(v->bytes()) / (1 << 20), v->kind().c_str(), 1e3 * s, file.path().c_str());
          log_(line);
        }
        return VariantCache<Variant>::Loaded{v, v->bytes()};
      }) {}

Status VariantRegistry::add(const std::string& name, const std::string& path, float scale) {
  if (name.empty()) return Status::error("a variant needs a name (NAME=FILE)");
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (files_.contains(name)) return Status::error("variant '" + name + "' is registered twice");
  }
  const std::string context = "variant '" + name + "'";
  BITSPLIT_ASSIGN_OR_RETURN(gguf::File peek, gguf::File::open(path));
  auto kind = file_kind(peek.metadata());
  if (!kind) return kind.status().with_context(path);
  Registered r;
  if (*kind == FileKind::kAdapter) {
    if (!std::isfinite(scale)) return Status::error(context + ": the adapter's scale must be a finite number");
    BITSPLIT_ASSIGN_OR_RETURN(LoraFile lora, open_lora(path));
    BITSPLIT_RETURN_IF_ERROR(check_lora_base(lora, base_).with_context(context));
    r.lora = std::make_shared<const LoraFile>(std::move(lora));
    r.scale = scale;
  } else if (*kind == FileKind::kDelta) {
    if (scale != 1.0f) return Status::error(context + ": a scale applies to LoRA adapters, not to BitDelta files");
    BITSPLIT_ASSIGN_OR_RETURN(DeltaFile delta, open_delta(path));
    BITSPLIT_RETURN_IF_ERROR(check_delta_base(delta, base_source_).with_context(context));
    r.delta = std::make_shared<const DeltaFile>(std::move(delta));
  } else {
    return Status::error(path + ": is " + file_kind_description(*kind) +
                         ", not a variant (a variant is a delta from `bitsplit delta` or a LoRA adapter)");
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (files_.contains(name)) return Status::error("variant '" + name + "' is registered twice");
  files_[name] = std::move(r);
  return Status::ok();
}

Status VariantRegistry::add_resident(const std::string& name, std::shared_ptr<const Variant> variant) {
  if (name.empty()) return Status::error("a variant needs a name");
  if (!variant) return Status::error("variant '" + name + "': nothing to register");
  std::lock_guard<std::mutex> lock(mu_);
  if (files_.contains(name)) return Status::error("variant '" + name + "' is registered twice");
  Registered r;
  r.resident = std::move(variant);
  files_[name] = std::move(r);
  return Status::ok();
}

Result<VariantSpec> parse_variant_spec(const std::string& spec) {
  const size_t eq = spec.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == spec.size()) {
    return Status::error("a variant is registered as NAME=FILE or NAME=FILE:SCALE, not '" + spec + "'");
  }
  VariantSpec v{spec.substr(0, eq), spec.substr(eq + 1), 1.0f};
  struct stat st {};
  const size_t colon = v.path.rfind(':');
  if (colon != std::string::npos && colon > 0 && ::stat(v.path.c_str(), &st) != 0) {
    const std::string tail = v.path.substr(colon + 1);
    float x = 0.0f;
    auto [end, ec] = std::from_chars(tail.data(), tail.data() + tail.size(), x);
    if (ec == std::errc() && end == tail.data() + tail.size() && !tail.empty()) {
      if (!std::isfinite(x)) return Status::error("the scale in '" + spec + "' must be a finite number");
      v.scale = x;
      v.path.resize(colon);
    }
  }
  return v;
}

Status VariantRegistry::add_spec(const std::string& spec) {
  BITSPLIT_ASSIGN_OR_RETURN(VariantSpec v, parse_variant_spec(spec));
  return add(v.name, v.path, v.scale);
}

Result<std::shared_ptr<const Variant>> VariantRegistry::get(const std::string& name) {
  if (!contains(name)) {
    std::string known;
    for (const auto& n : names()) known += (known.empty() ? "" : ", ") + n;
    return Status::error("no variant named '" + name + "' is registered (registered: " +
                         (known.empty() ? std::string("none; register one as NAME=FILE") : known) + ")");
  }
  return cache_.get(name);
}

Status VariantRegistry::remove(const std::string& name) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (files_.erase(name) == 0) return Status::error("no variant named '" + name + "' is registered");
  }
  cache_.drop(name);
  return Status::ok();
}

std::vector<std::string> VariantRegistry::names() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> n;
  for (const auto& [k, v] : files_) n.push_back(k);
  return n;
}

bool VariantRegistry::contains(const std::string& name) const {
  std::lock_guard<std::mutex> lock(mu_);
  return files_.contains(name);
}

}  // namespace bitsplit
