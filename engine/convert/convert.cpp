// `bitsplit convert`: streams a source model tensor by tensor into a bit-split GGUF —
// projections become D + R planes, token embeddings Q8_0 (the residual tier at 8 bits),
// everything else f32.
#include <cblas.h>
#include <sys/resource.h>
#include <tbb/parallel_for.h>
#include <tbb/parallel_reduce.h>
#include <tbb/task_group.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <optional>

#include "bitsplit/convert.h"
#include "bitsplit/model.h"

namespace bitsplit {
namespace {

using gguf::TensorType;

enum class OutKind { kF32, kQ8_0, kDraftCodes, kDraftScales, kDraftOffsets, kResidCodes, kResidScales, kResidPacked };

struct OutTensor {
  OutKind kind;
  const gguf::TensorInfo* source;  // the tensor whose data this comes from
  std::string base;                // split projections: "blk.0.attn_q" or "output"
  int64_t in = 0, out = 0;
  int draft_bits = 2;
};

struct SplitPlanes {
  std::string base;
  std::vector<uint8_t> draft_codes, draft_scales, draft_offsets, resid_codes, resid_scales, resid_packed;
  // Fitted against calibration moments: the draft's output error on sampled rows (ConvertReport).
  std::optional<std::pair<double, double>> output_error;
};

OutKind out_kind(SplitPlane plane) {
  switch (plane) {
    case SplitPlane::kDraftCodes: return OutKind::kDraftCodes;
    case SplitPlane::kDraftScales: return OutKind::kDraftScales;
    case SplitPlane::kDraftOffsets: return OutKind::kDraftOffsets;
    case SplitPlane::kResidCodes: return OutKind::kResidCodes;
    case SplitPlane::kResidScales: return OutKind::kResidScales;
    case SplitPlane::kResidPacked: return OutKind::kResidPacked;
  }
  return OutKind::kF32;
}

std::vector<uint8_t> f32_bytes(const std::vector<float>& v) {
  std::vector<uint8_t> b(v.size() * 4);
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

// The importance-matrix columns for projection `base` (null without a matrix).
Result<const float*> importance_for(const ConvertOptions& options, const std::string& base, int64_t in) {
  if (!options.imatrix) return static_cast<const float*>(nullptr);
  auto it = options.imatrix->find(base + ".weight");
  if (it == options.imatrix->end()) {
    return Status::error("importance matrix has no entry for '" + base + ".weight' (was it made for another model?)");
  }
  if (int64_t(it->second.size()) != in) {
    return Status::error("importance matrix entry '" + base + ".weight' has " + std::to_string(it->second.size()) +
                         " columns, the weight has " + std::to_string(in));
  }
  return static_cast<const float*>(it->second.data());
}

// The input covariance for projection `base` when the importance file has covariances and
// error feedback applies (null otherwise); like importance_for, a missing or mismatched entry is
// an error rather than a silent fall back to the ordinary fit.
Result<const float*> covariance_for(const ConvertOptions& options, const quant::SplitParams& p, const std::string& base,
                                    int64_t in) {
  if (!options.covariances || options.covariances->empty() || !quant::uses_error_feedback(p)) {
    return static_cast<const float*>(nullptr);
  }
  auto it = options.covariances->find(base + ".weight");
  if (it == options.covariances->end()) {
    return Status::error("importance matrix has no input covariance for '" + base +
                         ".weight' (was it made for another model?)");
  }
  if (it->second->n != in) {
    return Status::error("importance matrix covariance of '" + base + ".weight' is " + std::to_string(it->second->n) +
                         " x " + std::to_string(it->second->n) + ", the weight has " + std::to_string(in) + " columns");
  }
  return it->second->data;
}

// A source tensor's weights in f32, refused when one is NaN or infinite (a corrupt or overflowed
// source would otherwise become a file of garbage codes without a word).
Result<std::vector<float>> load_finite(const WeightSource& source, const gguf::TensorInfo& t) {
  BITSPLIT_ASSIGN_OR_RETURN(std::vector<float> w, source.load_f32(t));
  // Checked in parallel (a large tensor's scan would otherwise be one thread's work); the first
  // bad value is then found in order for the message.
  const bool all_finite = tbb::parallel_reduce(
      tbb::blocked_range<size_t>(0, w.size(), 1 << 16), true,
      [&](const tbb::blocked_range<size_t>& r, bool ok) {
        for (size_t i = r.begin(); ok && i < r.end(); ++i) ok = std::isfinite(w[i]);
        return ok;
      },
      [](bool a, bool b) { return a && b; });
  const auto bad = all_finite ? w.end() : std::find_if(w.begin(), w.end(), [](float v) { return !std::isfinite(v); });
  if (bad != w.end()) {
    const int64_t i = bad - w.begin(), cols = t.dims.empty() ? 1 : t.dims[0];
    return Status::error("tensor '" + t.name + "' has a non-finite weight (" + std::to_string(*bad) + ") at row " +
                         std::to_string(i / cols) + ", column " + std::to_string(i % cols) +
                         ": the source file is corrupt or its values overflowed");
  }
  return w;
}

// The draft's squared output error on inputs with second moments h, over evenly spaced sampled
// rows: (Σ eᵀ H e, Σ wᵀ H w) with e = w - d, over H's diagonal blocks as `h` holds them.
std::pair<double, double> draft_output_error(const std::vector<float>& w, const SplitProjection& split, int64_t rows,
                                             int64_t cols, const quant::SplitParams& p, const Covariance& h) {
  const int64_t step = std::max<int64_t>(1, rows / 128), m = (rows + step - 1) / step;
  const int64_t groups = quant::groups_per_row(cols, p.group), row_bytes = quant::code_row_bytes(cols, p.group, p.draft_bits);
  std::vector<float> e(size_t(m * cols)), x(size_t(m * cols));
  tbb::parallel_for(int64_t{0}, m, [&](int64_t i) {
    const int64_t r = i * step;
    float* er = e.data() + i * cols;
    quant::dequantize_draft_row_ref(split.draft_codes.data() + r * row_bytes, split.draft_scales.data() + r * groups,
                                    split.draft_offsets.data() + r * groups, cols, p.group, p.draft_bits, er);
    for (int64_t j = 0; j < cols; ++j) {
      x[size_t(i * cols + j)] = w[size_t(r * cols + j)];
      er[j] = w[size_t(r * cols + j)] - er[j];
    }
  });
  const std::vector<quant::DiagonalBlock> blocks = quant::diagonal_blocks(cols, h.block);
  auto quadratic = [&](const std::vector<float>& v) {
    double sum = 0.0;
    std::vector<float> y(size_t(m * blocks[0].n));
    for (const quant::DiagonalBlock& b : blocks) {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(m), int(b.n), int(b.n), 1.0f, v.data() + b.c0,
                  int(cols), h.data + b.offset, int(b.n), 0.0f, y.data(), int(b.n));
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < b.n; ++j) sum += double(v[size_t(i * cols + b.c0 + j)]) * double(y[size_t(i * b.n + j)]);
    }
    return sum;
  };
  return {quadratic(e), quadratic(x)};
}

Result<SplitPlanes> split_tensor(const WeightSource& source, const OutTensor& t, const ConvertOptions& options,
                                 const SplitFormat& format, LayerCalibration* calibration) {
  quant::SplitParams p = options.split;
  p.draft_bits = t.draft_bits;
  BITSPLIT_ASSIGN_OR_RETURN(std::vector<float> w, load_finite(source, *t.source));
  source.release(*t.source);
  BITSPLIT_ASSIGN_OR_RETURN(const float* importance, importance_for(options, t.base, t.in));
  BITSPLIT_ASSIGN_OR_RETURN(const float* covariance, covariance_for(options, p, t.base, t.in));
  std::shared_ptr<const Covariance> moments;  // the calibration's, alive while this fit reads them
  int64_t block = 0;
  if (calibration) {
    BITSPLIT_ASSIGN_OR_RETURN(moments, calibration->covariance(t.base + ".weight"));
    if (moments && moments->n != t.in) {
      return Status::error("internal: the calibration's moments of '" + t.base + "' are " + std::to_string(moments->n) +
                           " wide, the weight has " + std::to_string(t.in) + " columns");
    }
    if (moments) covariance = moments->data, block = moments->block;
  }
  auto fitted = fit_projection(w, t.out, t.in, p, importance, covariance, block);
  if (!fitted) return fitted.status().with_context(t.base);
  SplitProjection split = std::move(*fitted);
  std::optional<std::pair<double, double>> output_error;
  if (moments) output_error = draft_output_error(w, split, t.out, t.in, p, *moments);
  auto half_bytes = [](const std::vector<uint16_t>& h) {
    std::vector<uint8_t> b(h.size() * 2);
    std::memcpy(b.data(), h.data(), b.size());
    return b;
  };
  SplitPlanes planes;
  planes.base = t.base;
  planes.output_error = output_error;
  planes.draft_codes = std::move(split.draft_codes);
  planes.draft_scales = half_bytes(split.draft_scales);
  planes.draft_offsets = half_bytes(split.draft_offsets);
  if (format.packed_residual()) {  // the CPU kernels' layout, used from the map at load
    const quant::PackedShape shape = quant::packed_shape(t.out, t.in, p.group, p.residual_bits, false);
    planes.resid_packed.resize(size_t(shape.bytes()));
    tbb::parallel_for(tbb::blocked_range<int64_t>(0, shape.tiles, 16), [&](const tbb::blocked_range<int64_t>& r) {
      quant::pack_tiles(shape, split.resid_codes.data(), split.resid_scales.data(), nullptr, planes.resid_packed.data(),
                        r.begin(), r.end());
    });
  } else {
    planes.resid_codes = std::move(split.resid_codes);
    planes.resid_scales = half_bytes(split.resid_scales);
  }
  return planes;
}

// Splits the projections ahead of the writer: when the writer takes projection k's planes, the
// next kDepth projections are being loaded and fitted by background tasks on the TBB workers, so
// writing k's planes and the tensors after it (page-cache copies, the Q8_0 embedding) overlaps
// with the fits instead of leaving cores idle. Holds at most kDepth + 1 projections in memory.
class SplitAhead {
 public:
  static constexpr size_t kDepth = 2;

  SplitAhead(const WeightSource& source, const std::vector<OutTensor>& plan, const ConvertOptions& options,
             const SplitFormat& format, LayerCalibration* calibration)
      : source_(source), plan_(plan), options_(options), format_(format), calibration_(calibration) {
    for (size_t i = 0; i < plan.size(); ++i)
      if (plan[i].kind == OutKind::kDraftCodes) order_.push_back(i);
  }
  SplitAhead(const SplitAhead&) = delete;
  SplitAhead& operator=(const SplitAhead&) = delete;
  ~SplitAhead() {  // a write stopped by an error still waits for the fits it started
    for (Slot& slot : slots_) slot.tasks.wait();
  }

  // Starts the first projections now (while the source is hashed and the tensors before them
  // are written).
  void start() { refill(); }

  // The planes of the projection whose first plane is plan[i].
  Result<SplitPlanes> take(size_t i) {
    std::optional<Result<SplitPlanes>> result;
    for (Slot& slot : slots_) {
      if (slot.index != i) continue;
      slot.tasks.wait();
      result = std::move(slot.result);
      slot.result.reset();
      slot.index = kNone;
    }
    if (!result) result = split_tensor(source_, plan_[i], options_, format_, calibration_);  // not started ahead
    const size_t pos = size_t(std::lower_bound(order_.begin(), order_.end(), i) - order_.begin());
    next_ = std::max(next_, pos + 1);
    if (result->is_ok()) refill();
    return std::move(*result);
  }

 private:
  static constexpr size_t kNone = ~size_t{0};
  struct Slot {
    size_t index = kNone;  // the plan index of the projection it fits, kNone when free
    std::optional<Result<SplitPlanes>> result;
    tbb::task_group tasks;
  };

  // Starts the next projections in the free slots.
  void refill() {
    for (Slot& slot : slots_) {
      if (slot.index != kNone) continue;
      if (next_ >= order_.size()) return;
      const size_t n = order_[next_++];
      slot.index = n;
      slot.tasks.run([this, &slot, n] { slot.result = split_tensor(source_, plan_[n], options_, format_, calibration_); });
    }
  }

  const WeightSource& source_;
  const std::vector<OutTensor>& plan_;
  const ConvertOptions& options_;
  const SplitFormat& format_;
  LayerCalibration* calibration_;
  std::vector<size_t> order_;  // plan indices of every projection's first plane
  size_t next_ = 0;            // position in order_ of the next projection to start
  Slot slots_[kDepth];
};

Result<std::vector<uint8_t>> q8_0_tensor(const WeightSource& source, const gguf::TensorInfo& t) {
  BITSPLIT_ASSIGN_OR_RETURN(std::vector<float> w, load_finite(source, t));
  source.release(t);
  std::vector<quant::BlockQ8_0> blocks(w.size() / quant::BlockQ8_0::kWeights);
  const int64_t row_blocks = t.dims[0] / quant::BlockQ8_0::kWeights;
  tbb::parallel_for(int64_t{0}, int64_t(blocks.size()) / row_blocks, [&](int64_t r) {
    quant::quantize_q8_0_ref(std::span<const float>(w).subspan(size_t(r * t.dims[0]), size_t(t.dims[0])),
                             std::span(blocks).subspan(size_t(r * row_blocks), size_t(row_blocks)));
  });
  std::vector<uint8_t> bytes(blocks.size() * sizeof(quant::BlockQ8_0));
  std::memcpy(bytes.data(), blocks.data(), bytes.size());
  return bytes;
}

std::string params_description(const ConvertOptions& o) {
  const quant::SplitParams& p = o.split;
  return std::string("fit=") + (p.fit == quant::DraftFit::kOptimized ? "optimized" : "minmax") +
         " search_steps=" + std::to_string(p.search_steps) + " refine_iters=" + std::to_string(p.refine_iters) +
         " draft_objective=" + (p.residual_bits == 6 ? "draft+residual" : "draft") +
         " imatrix=" + (o.imatrix ? o.imatrix_path : "none") +
         (o.covariances && !o.covariances->empty() && quant::uses_error_feedback(p) ? " draft_fit=gptq" : "") +
         (o.draft_bpw > 0 ? " draft_bpw=" + std::to_string(o.draft_bpw) : std::string());
}

// The split projections in conversion order: (source tensor, base name); a tied head last.
std::vector<std::pair<const gguf::TensorInfo*, std::string>> split_sources(const WeightSource& source, bool tied_output) {
  std::vector<std::pair<const gguf::TensorInfo*, std::string>> v;
  const gguf::TensorInfo* embd = nullptr;
  for (const auto& t : source.tensors()) {
    if (is_split_projection(t.name)) v.emplace_back(&t, split_base_name(t.name));
    if (t.name == "token_embd.weight") embd = &t;
  }
  if (tied_output && embd) v.emplace_back(embd, "output");
  return v;
}

// Measures every projection's draft error at 2, 3 and 4 bits and spends the budget.
Result<quant::DraftAllocation> plan_draft_bits(const WeightSource& source, const ModelConfig& config,
                                               const ConvertOptions& options,
                                               const std::function<void(const ConvertProgress&)>& on_progress) {
  const auto sources = split_sources(source, config.tied_output);
  ConvertProgress progress;
  progress.measuring = true;
  progress.tensors_total = sources.size();
  for (const auto& [t, base] : sources) progress.bytes_total += t->nbytes;
  std::vector<quant::DraftTensorErrors> errors;
  // An impossible budget is refused from the shapes alone, before any weight is read.
  for (const auto& [t, base] : sources) {
    if (t->dims.size() != 2) return Status::error("tensor '" + t->name + "' should be 2-D to be split");
    quant::DraftTensorErrors shape;
    shape.name = base;
    shape.rows = t->dims[1];
    shape.cols = t->dims[0];
    errors.push_back(shape);
  }
  BITSPLIT_RETURN_IF_ERROR(quant::allocate_draft_bits(errors, options.split.group, options.draft_bpw).status());
  errors.clear();
  for (const auto& [t, base] : sources) {
    progress.current = base;
    if (on_progress) on_progress(progress);
    BITSPLIT_ASSIGN_OR_RETURN(std::vector<float> w, load_finite(source, *t));
    source.release(*t);
    BITSPLIT_ASSIGN_OR_RETURN(const float* importance, importance_for(options, base, t->dims[0]));
    errors.push_back(measure_draft_errors(base, w, t->dims[1], t->dims[0], config.n_layers, options.split, importance));
    ++progress.tensors_done;
    progress.bytes_done += t->nbytes;
  }
  progress.current.clear();
  if (on_progress) on_progress(progress);
  return quant::allocate_draft_bits(errors, options.split.group, options.draft_bpw);
}

Status check_split_params(const quant::SplitParams& p) {
  if (p.group != 32 && p.group != 64 && p.group != 128) return Status::error("the group size must be 32, 64 or 128 (got " + std::to_string(p.group) + ")");
  if (p.residual_bits != 6 && p.residual_bits != 8) return Status::error("the residual plane must have 6 or 8 bits (got " + std::to_string(p.residual_bits) + ")");
  if (p.draft_bits != 2 && p.draft_bits != 3 && p.draft_bits != 4) return Status::error("the draft plane must have 2, 3 or 4 bits (got " + std::to_string(p.draft_bits) + ")");
  return Status::ok();
}

// The output's layout: the options' planes and version; under a draft budget, each projection's
// draft bits, from the errors measured on the source (their time goes in the report).
Result<SplitFormat> output_format(const WeightSource& source, const ModelConfig& config, const ConvertOptions& options,
                                  const std::function<void(const ConvertProgress&)>& on_progress, ConvertReport& rep,
                                  std::chrono::steady_clock::time_point t0) {
  if (options.format_version != 2 && options.format_version != kSplitFormatVersion) {
    return Status::error("cannot write bit-split format version " + std::to_string(options.format_version) +
                         " (this build writes 2 or " + std::to_string(kSplitFormatVersion) + ")");
  }
  const quant::SplitParams& p = options.split;
  SplitFormat format{p.group, p.draft_bits, p.residual_bits, {}, options.format_version};
  if (options.draft_bpw > 0.0) {
    // Every projection's bits are chosen; 2 is the default the per-tensor keys override.
    format.draft_bits = quant::kMinDraftBits;
    BITSPLIT_ASSIGN_OR_RETURN(rep.draft, plan_draft_bits(source, config, options, on_progress));
    for (const auto& [base, bits] : rep.draft->bits)
      if (bits != format.draft_bits) format.draft_bits_by_tensor[base] = bits;
    rep.measure_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  return format;
}

// One conversion's writing: the plan of every output tensor (the writer's tensor infos and what
// each is made from), then the metadata, then the tensors in order with the projections split
// ahead, reporting progress per source tensor.
class Conversion {
 public:
  Conversion(const WeightSource& source, const ModelConfig& config, const ConvertOptions& options,
             const SplitFormat& format, const std::function<void(const ConvertProgress&)>& on_progress,
             ConvertReport& rep, LayerCalibration* calibration)
      : source_(source), config_(config), options_(options), format_(format), on_progress_(on_progress), rep_(rep),
        calibration_(calibration) {}

  // The output's tensors, their sizes in the report (all a dry run does).
  Status plan() {
    BITSPLIT_RETURN_IF_ERROR(plan_tensors());
    for (const auto& info : writer_.tensor_infos()) rep_.output_bytes += info.nbytes;
    return Status::ok();
  }

  Status write(const std::string& out_path) {
    BITSPLIT_RETURN_IF_ERROR(plan());
    SplitAhead ahead(source_, plan_, options_, format_, calibration_);
    ahead.start();
    BITSPLIT_RETURN_IF_ERROR(set_metadata());
    progress_.tensors_total = source_.tensors().size() + (config_.tied_output ? 1 : 0);
    progress_.bytes_total = rep_.source_bytes;
    const auto produce = [&](size_t i, const gguf::TensorInfo&) { return tensor_bytes(i, ahead); };
    BITSPLIT_ASSIGN_OR_RETURN(rep_.output_paths, write_model_file(writer_, out_path, options_.output_split, produce));
    finish_source_tensor();
    progress_.current.clear();
    if (on_progress_) on_progress_(progress_);
    return Status::ok();
  }

 private:
  // Every output tensor, before anything is written, so a bad tensor fails early.
  Status plan_tensors() {
    if (format_.packed_residual()) writer_.set_alignment(kPackedAlignment);
    const gguf::TensorInfo* embd = nullptr;
    for (const gguf::TensorInfo* tensor : tensor_order()) {
      const gguf::TensorInfo& t = *tensor;
      if (!gguf::File::can_read_f32(t.type)) {
        return Status::error(source_.path() + ": tensor '" + t.name + "' has type " + gguf::tensor_type_name(t.type) +
                             ", which cannot be converted");
      }
      rep_.source_bytes += t.nbytes;
      if (is_split_projection(t.name)) {
        BITSPLIT_RETURN_IF_ERROR(add_split(t, split_base_name(t.name)));
      } else if (t.name == "token_embd.weight" && t.dims[0] % quant::BlockQ8_0::kWeights == 0) {
        embd = &t;
        BITSPLIT_RETURN_IF_ERROR(writer_.add_tensor_info(t.name, TensorType::Q8_0, t.dims));
        plan_.push_back({OutKind::kQ8_0, &t, "", 0, 0});
      } else {
        if (t.name == "token_embd.weight") embd = &t;
        BITSPLIT_RETURN_IF_ERROR(writer_.add_tensor_info(t.name, TensorType::F32, t.dims));
        plan_.push_back({OutKind::kF32, &t, "", 0, 0});
      }
    }
    // A tied output head gets its own split planes (the embedding itself stays 8-bit).
    if (config_.tied_output) BITSPLIT_RETURN_IF_ERROR(add_split(*embd, "output"));
    return Status::ok();
  }

  // The source's tensors in writing order: as the source has them, or, when calibrating, block by
  // block (the calibration runs blocks in order, as the fits ask for them): tensors before the
  // first block's first, then each block's in source order, then the rest (output_norm, output).
  std::vector<const gguf::TensorInfo*> tensor_order() const {
    std::vector<std::pair<int64_t, const gguf::TensorInfo*>> keyed;
    bool seen_block = false;
    for (const auto& t : source_.tensors()) {
      int64_t key = -1;
      std::string rest;
      if (calibration_ && split_block_name(t.name, &key, &rest)) {
        seen_block = true;
      } else if (calibration_ && (seen_block || t.name.starts_with("output"))) {
        key = config_.n_layers;
      }
      keyed.emplace_back(key, &t);
    }
    std::stable_sort(keyed.begin(), keyed.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    std::vector<const gguf::TensorInfo*> order;
    for (const auto& [key, t] : keyed) order.push_back(t);
    return order;
  }

  // The planes of projection `base`, split from source tensor `t`.
  Status add_split(const gguf::TensorInfo& t, const std::string& base) {
    if (t.dims.size() != 2) return Status::error("tensor '" + t.name + "' should be 2-D to be split");
    const int64_t in = t.dims[0], out = t.dims[1];
    for (const SplitPlaneTensor& st : split_plane_tensors(base, in, out, format_)) {
      BITSPLIT_RETURN_IF_ERROR(writer_.add_tensor_info(st.name, st.type, {st.row, st.rows}));
      BITSPLIT_ASSIGN_OR_RETURN(const uint64_t bytes, gguf::tensor_nbytes(uint32_t(st.type), std::vector<int64_t>{st.row, st.rows}));
      const bool draft = st.plane == SplitPlane::kDraftCodes || st.plane == SplitPlane::kDraftScales ||
                         st.plane == SplitPlane::kDraftOffsets;
      (draft ? rep_.draft_bytes : rep_.residual_bytes) += bytes;
      plan_.push_back({out_kind(st.plane), &t, base, in, out, format_.draft_bits_for(base)});
    }
    rep_.split_weights += in * out;
    rep_.source_types[gguf::tensor_type_name(t.type)] += in * out;
    rep_.largest_tensor_f32_bytes = std::max<uint64_t>(rep_.largest_tensor_f32_bytes, uint64_t(in * out) * 4);
    return Status::ok();
  }

  // The source's keys (but its alignment and split-set keys) and the bit-split ones; hashes the source.
  Status set_metadata() {
    BITSPLIT_ASSIGN_OR_RETURN(rep_.source_sha256, source_.content_sha256());
    gguf::Metadata& m = writer_.metadata();
    for (const auto& [key, value] : source_.metadata().entries()) {
      if (key != "general.alignment" && !is_split_set_key(key)) m.set(key, value);
    }
    using gguf::Value;
    write_split_format(format_, m);
    m.set("bitsplit.quantizer", Value::string(params_description(options_)));
    m.set("bitsplit.source_sha256", Value::string(rep_.source_sha256));
    // The head's planes were split from the embedding: a BitDelta variant's embedding delta
    // applies to both (engine/variant.cpp).
    if (config_.tied_output) m.set("bitsplit.output_from_embedding", Value::boolean(true));
    std::string types;
    for (const auto& [type, n] : rep_.source_types) types += (types.empty() ? "" : ",") + type;
    m.set("bitsplit.source_types", Value::string(types));
    // How the draft was calibrated (`info` prints it); no keys without a calibration.
    if (calibration_) {
      const CalibrationTokens& c = calibration_->tokens();
      m.set("bitsplit.calibration.text", Value::string(c.name));
      m.set("bitsplit.calibration.sha256", Value::string(c.sha256));
      m.set("bitsplit.calibration.tokens", Value::u32(uint32_t(c.tokens)));
      m.set("bitsplit.calibration.sequences", Value::u32(uint32_t(c.sequences.size())));
      m.set("bitsplit.calibration.covariance_block", Value::u32(uint32_t(calibration_->covariance_block())));
    }
    return Status::ok();
  }

  // Output tensor i's bytes; a projection's planes come from one split, taken at its first plane.
  Result<std::vector<uint8_t>> tensor_bytes(size_t i, SplitAhead& ahead) {
    const OutTensor& t = plan_[i];
    start_source_tensor(t);
    switch (t.kind) {
      case OutKind::kF32: {
        BITSPLIT_ASSIGN_OR_RETURN(auto w, load_finite(source_, *t.source));
        source_.release(*t.source);
        return f32_bytes(w);
      }
      case OutKind::kQ8_0:
        return q8_0_tensor(source_, *t.source);
      case OutKind::kDraftCodes: {
        BITSPLIT_ASSIGN_OR_RETURN(planes_, ahead.take(i));
        if (planes_.output_error) {
          const size_t dot = planes_.base.rfind('.');
          auto& [err, ref] = rep_.draft_output_error[planes_.base == "output" ? "output" : planes_.base.substr(dot + 1)];
          err += planes_.output_error->first;
          ref += planes_.output_error->second;
        }
        return std::move(planes_.draft_codes);
      }
      case OutKind::kDraftScales: return std::move(planes_.draft_scales);
      case OutKind::kDraftOffsets: return std::move(planes_.draft_offsets);
      case OutKind::kResidCodes: return std::move(planes_.resid_codes);
      case OutKind::kResidScales: return std::move(planes_.resid_scales);
      case OutKind::kResidPacked: return std::move(planes_.resid_packed);
    }
    return Status::error("internal: unknown output kind");
  }

  // Progress: output tensor t starts a source tensor (a tied head's planes start the embedding again).
  void start_source_tensor(const OutTensor& t) {
    if (t.source == last_source_ && t.kind != OutKind::kDraftCodes) return;
    finish_source_tensor();
    last_source_ = t.source;
    progress_.current = t.base.empty() ? t.source->name : t.base + " (split)";
    if (on_progress_) on_progress_(progress_);
  }

  void finish_source_tensor() {
    if (!last_source_) return;
    ++progress_.tensors_done;
    progress_.bytes_done += last_source_->nbytes;
  }

  const WeightSource& source_;
  const ModelConfig& config_;
  const ConvertOptions& options_;
  const SplitFormat& format_;
  const std::function<void(const ConvertProgress&)>& on_progress_;
  ConvertReport& rep_;
  gguf::Writer writer_;
  std::vector<OutTensor> plan_;
  ConvertProgress progress_;
  SplitPlanes planes_;  // the projection being written
  const gguf::TensorInfo* last_source_ = nullptr;
  LayerCalibration* calibration_;  // null: no calibration
};

// The machine's available memory (MemAvailable), 0 when unknown.
uint64_t available_memory() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  uint64_t kb = 0;
  while (in >> key >> kb) {
    if (key == "MemAvailable:") return kb * 1024;
    in.ignore(1 << 10, '\n');
  }
  return 0;
}

std::string gib(uint64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f GiB", double(bytes) / double(uint64_t{1} << 30));
  return buf;
}

// The calibration the options ask for, planned: its tokens, with the plan and the memory it is
// checked against in the report; none when none was asked for or it does not apply (the reason
// goes in the report).
Result<std::optional<CalibrationTokens>> planned_calibration(const WeightSource& source, const ModelConfig& config,
                                                             const ConvertOptions& options, ConvertReport& rep) {
  if (!options.calibration) return std::optional<CalibrationTokens>();
  if (!quant::uses_error_feedback(options.split)) {
    rep.calibration_skipped = "a " + std::to_string(options.split.residual_bits) +
                              "-bit residual keeps the ordinary draft fit (a fed-back draft leaves a residual wider "
                              "than 6 bits cover; docs/QUALITY.md)";
    return std::optional<CalibrationTokens>();
  }
  if (options.covariances && !options.covariances->empty()) {
    rep.calibration_skipped = "the importance file's covariances are used instead";
    return std::optional<CalibrationTokens>();
  }
  if (config.is_moe()) {
    rep.calibration_skipped = "a mixture of experts is not calibrated layer by layer yet";
    return std::optional<CalibrationTokens>();
  }
  const CalibrationOptions& co = *options.calibration;
  if (co.covariance_block > 0 && co.covariance_block % options.split.group != 0) {
    return Status::error("the calibration's covariance block (" + std::to_string(co.covariance_block) +
                         ") must be a multiple of the group size " + std::to_string(options.split.group));
  }
  BITSPLIT_ASSIGN_OR_RETURN(CalibrationTokens tokens, calibration_tokens(source, co));
  rep.calibration_plan = plan_calibration(config, tokens.tokens, co.ctx, co.covariance_block, int(SplitAhead::kDepth) + 1);
  rep.calibration_memory_available = options.memory_limit ? options.memory_limit : available_memory();
  return std::optional<CalibrationTokens>(std::move(tokens));
}

// The layer-by-layer calibration the options ask for, started (tokens read, plan checked), or
// null: none asked for, or one that does not apply.
Result<std::unique_ptr<LayerCalibration>> start_calibration(const WeightSource& source, const ModelConfig& config,
                                                            const ConvertOptions& options, ConvertReport& rep) {
  BITSPLIT_ASSIGN_OR_RETURN(std::optional<CalibrationTokens> tokens, planned_calibration(source, config, options, rep));
  if (!tokens) return std::unique_ptr<LayerCalibration>();
  const uint64_t limit = rep.calibration_memory_available;
  if (limit && rep.calibration_plan.total() > limit) {
    return Status::error("the calibration needs about " + gib(rep.calibration_plan.total()) + " (" +
                         std::to_string(tokens->tokens) + " tokens; docs/FORMAT.md, \"Calibration layer by layer\") and " +
                         gib(limit) + " is available: use fewer --calibration-tokens, or --no-calibration");
  }
  if (options.on_calibration_plan) BITSPLIT_RETURN_IF_ERROR(options.on_calibration_plan(*tokens, rep.calibration_plan));
  rep.calibration = *tokens;
  return LayerCalibration::start(source, config, std::move(*tokens), *options.calibration);
}

// ConvertOptions::dry_run: the calibration's plan and the output's tensors, nothing read or written.
Status plan_conversion(const WeightSource& source, const ModelConfig& config, const ConvertOptions& options,
                       ConvertReport& rep) {
  BITSPLIT_ASSIGN_OR_RETURN(std::optional<CalibrationTokens> tokens, planned_calibration(source, config, options, rep));
  if (tokens && options.on_calibration_plan) {
    BITSPLIT_RETURN_IF_ERROR(options.on_calibration_plan(*tokens, rep.calibration_plan));
  }
  if (tokens) rep.calibration = std::move(*tokens);
  const quant::SplitParams& p = options.split;
  const bool budget = options.draft_bpw > 0.0;
  SplitFormat format{p.group, budget ? quant::kMinDraftBits : p.draft_bits, p.residual_bits, {}, options.format_version};
  BITSPLIT_RETURN_IF_ERROR(Conversion(source, config, options, format, nullptr, rep, nullptr).plan());
  if (budget) {
    // The budget is the draft's VRAM bits per weight, scales and offsets included.
    const uint64_t at_budget = uint64_t(double(rep.split_weights) * options.draft_bpw / 8.0);
    rep.output_bytes = rep.output_bytes - rep.draft_bytes + at_budget;
    rep.draft_bytes = at_budget;
  }
  return Status::ok();
}

}  // namespace

Status convert_model(const WeightSource& source, const std::string& out_path, const ConvertOptions& options,
                     const std::function<void(const ConvertProgress&)>& on_progress, ConvertReport* report) {
  const auto t0 = std::chrono::steady_clock::now();
  BITSPLIT_RETURN_IF_ERROR(check_split_params(options.split));
  auto existing = read_split_format(source.metadata());
  if (!existing) return existing.status().with_context(source.path());
  if (existing->has_value()) return Status::error(source.path() + ": is already a bit-split model; convert the original");
  BITSPLIT_ASSIGN_OR_RETURN(ModelConfig config, read_model_config(source));
  ConvertReport local;
  ConvertReport& rep = report ? *report : local;
  rep = {};
  if (options.dry_run) return plan_conversion(source, config, options, rep);
  BITSPLIT_ASSIGN_OR_RETURN(auto calibration, start_calibration(source, config, options, rep));
  BITSPLIT_ASSIGN_OR_RETURN(const SplitFormat format, output_format(source, config, options, on_progress, rep, t0));
  if (calibration) {
    calibration->on_block([&](int64_t done, int64_t total) {
      ConvertProgress p;
      p.calibration_blocks_done = done;
      p.calibration_blocks_total = total;
      if (on_progress) on_progress(p);
    });
  }
  BITSPLIT_RETURN_IF_ERROR(
      Conversion(source, config, options, format, on_progress, rep, calibration.get()).write(out_path));
  struct rusage usage {};
  getrusage(RUSAGE_SELF, &usage);
  rep.peak_rss_bytes = uint64_t(usage.ru_maxrss) * 1024;
  rep.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return Status::ok();
}

Status quantize_model_q8_0(const WeightSource& source, const std::string& out_path,
                           const std::function<void(size_t, size_t)>& on_progress, uint64_t* output_bytes) {
  auto split = read_split_format(source.metadata());
  if (!split) return split.status().with_context(source.path());
  if (split->has_value()) return Status::error(source.path() + ": is a converted bit-split model; quantize the original");
  // The output must be a model `run` accepts: a side file or an unsupported architecture stops here.
  BITSPLIT_RETURN_IF_ERROR(read_model_config(source).status());
  gguf::Writer writer;
  std::vector<bool> to_q8;
  for (const auto& t : source.tensors()) {
    if (!gguf::File::can_read_f32(t.type)) {
      return Status::error(source.path() + ": tensor '" + t.name + "' has type " + gguf::tensor_type_name(t.type) +
                           ", which cannot be read");
    }
    // The projections and the token embedding (a tied head reads it), as llama.cpp's Q8_0 has them.
    const bool q8 = (is_split_projection(t.name) || t.name == "token_embd.weight") && t.dims.size() == 2 &&
                    t.dims[0] % quant::BlockQ8_0::kWeights == 0;
    BITSPLIT_RETURN_IF_ERROR(writer.add_tensor_info(t.name, q8 ? TensorType::Q8_0 : TensorType::F32, t.dims));
    to_q8.push_back(q8);
  }
  for (const auto& [key, value] : source.metadata().entries()) {
    if (key != "general.alignment" && key != "general.file_type" && !is_split_set_key(key)) writer.metadata().set(key, value);
  }
  writer.metadata().set("general.file_type", gguf::Value::u32(7));  // llama.cpp's MOSTLY_Q8_0
  BITSPLIT_RETURN_IF_ERROR(writer.write_file_streaming(out_path, [&](size_t i, const gguf::TensorInfo&) -> Result<std::vector<uint8_t>> {
    const gguf::TensorInfo& t = source.tensors()[i];
    if (on_progress) on_progress(i + 1, source.tensors().size());
    if (to_q8[i]) return q8_0_tensor(source, t);
    BITSPLIT_ASSIGN_OR_RETURN(auto w, load_finite(source, t));
    source.release(t);
    std::vector<uint8_t> bytes(w.size() * 4);
    std::memcpy(bytes.data(), w.data(), bytes.size());
    return bytes;
  }));
  if (output_bytes) {
    *output_bytes = 0;
    for (const auto& info : writer.tensor_infos()) *output_bytes += info.nbytes;
  }
  return Status::ok();
}

}  // namespace bitsplit
