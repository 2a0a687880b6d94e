// `bitsplit merge` (merge.h): task vectors from models, deltas and LoRA adapters, the
// truncated SVD, and the streamed merge.
#include "bitsplit/merge.h"

#include <lapacke.h>

#include <chrono>
#include <cmath>
#include <cstring>

#include "bitsplit/delta_format.h"
#include "bitsplit/file_kind.h"
#include "bitsplit/lora_format.h"
#include "bitsplit/quant.h"

namespace bitsplit {
namespace {

// [rows, cols] of a base tensor as a matrix (a vector is one row).
struct Shape {
  int64_t rows = 1, cols = 0;
};
Shape shape_of(const gguf::TensorInfo& t) {
  if (t.dims.empty()) return {1, 1};
  return {t.rows(), t.dims[0]};
}
bool is_matrix(const gguf::TensorInfo& t) { return t.dims.size() == 2 && t.dims[0] > 1 && t.dims[1] > 1; }

class ModelTaskVector : public TaskVector {
 public:
  ModelTaskVector(std::unique_ptr<WeightSource> ft, std::string path, std::string sha)
      : ft_(std::move(ft)) {
    path_ = std::move(path);
    sha256_ = std::move(sha);
  }
  const char* kind() const override { return "model"; }
  Result<std::vector<float>> delta(const gguf::TensorInfo& t, const std::vector<float>& base_w) const override {
    const gguf::TensorInfo* f = ft_->find_tensor(t.name);
    if (!f) return Status::error(path_ + ": has no tensor '" + t.name + "'");
    BITSPLIT_ASSIGN_OR_RETURN(std::vector<float> w, ft_->load_f32(*f));
    ft_->release(*f);
    for (size_t i = 0; i < w.size(); ++i) w[i] -= base_w[i];
    return w;
  }
  const WeightSource& source() const { return *ft_; }

 private:
  std::unique_ptr<WeightSource> ft_;
};

class DeltaTaskVector : public TaskVector {
 public:
  DeltaTaskVector(DeltaFile d, std::string sha) : delta_(std::move(d)) {
    path_ = delta_.path;
    sha256_ = std::move(sha);
  }
  const char* kind() const override { return "BitDelta"; }
  Result<std::vector<float>> delta(const gguf::TensorInfo& t, const std::vector<float>& base_w) const override {
    if (!delta_.find(t.name)) return std::vector<float>{};
    const Shape s = shape_of(t);
    BITSPLIT_ASSIGN_OR_RETURN(std::vector<float> w, apply_delta_f32(delta_, t.name, base_w, s.rows, s.cols));
    if (w.size() != base_w.size()) return Status::error(path_ + ": '" + t.name + "' has the wrong size");
    for (size_t i = 0; i < w.size(); ++i) w[i] -= base_w[i];
    return w;
  }

 private:
  DeltaFile delta_;
};

class LoraTaskVector : public TaskVector {
 public:
  LoraTaskVector(LoraFile l, std::string sha) : lora_(std::move(l)) {
    path_ = lora_.path;
    sha256_ = std::move(sha);
  }
  const char* kind() const override { return "LoRA"; }
  Result<std::vector<float>> delta(const gguf::TensorInfo& t, const std::vector<float>& base_w) const override {
    auto it = lora_.tensors.find(t.name);
    if (it == lora_.tensors.end()) return std::vector<float>{};
    const LoraTensor& lt = it->second;
    BITSPLIT_ASSIGN_OR_RETURN(LoraFactors f, read_lora_factors(lora_, lt));
    const float s = lora_.effective_scale(lt, 1.0f);
    std::vector<float> d(base_w.size(), 0.0f);
    for (int64_t o = 0; o < lt.out; ++o) {
      float* row = d.data() + o * lt.in;
      for (int64_t k = 0; k < lt.rank; ++k) {
        const float u = s * f.up[size_t(o * lt.rank + k)];
        const float* v = f.down.data() + k * lt.in;
        for (int64_t i = 0; i < lt.in; ++i) row[i] += u * v[i];
      }
    }
    return d;
  }
  const LoraFile& file() const { return lora_; }

 private:
  LoraFile lora_;
};

// Every base tensor present in `ft` with the same shape, and nothing more.
Status check_same_tensors(const WeightSource& base, const WeightSource& ft) {
  for (const gguf::TensorInfo& t : base.tensors()) {
    const gguf::TensorInfo* f = ft.find_tensor(t.name);
    if (!f) return Status::error(ft.path() + ": has no tensor '" + t.name + "' (the base has): a fine-tune of another model");
    if (f->dims != t.dims) {
      return Status::error(ft.path() + ": '" + t.name + "' is " + f->shape_string() + ", the base's is " +
                           t.shape_string() + ": a fine-tune of another model");
    }
  }
  for (const gguf::TensorInfo& f : ft.tensors()) {
    if (!base.find_tensor(f.name)) return Status::error(ft.path() + ": has a tensor '" + f.name + "' the base lacks");
  }
  return Status::ok();
}

}  // namespace

Result<MergeMethod> parse_merge_method(std::string_view name) {
  if (name == "average") return MergeMethod::kAverage;
  if (name == "task-arithmetic") return MergeMethod::kTaskArithmetic;
  if (name == "monosoup") return MergeMethod::kMonoSoup;
  return Status::error("unknown merge method '" + std::string(name) + "' (methods: average, task-arithmetic, monosoup)");
}

const char* merge_method_name(MergeMethod method) {
  switch (method) {
    case MergeMethod::kAverage: return "average";
    case MergeMethod::kTaskArithmetic: return "task-arithmetic";
    case MergeMethod::kMonoSoup: return "monosoup";
  }
  return "unknown";
}

Result<std::unique_ptr<TaskVector>> TaskVector::open(const std::string& path, const WeightSource& base) {
  BITSPLIT_ASSIGN_OR_RETURN(gguf::File peek, gguf::File::open(path));
  auto kind = file_kind(peek.metadata());
  if (!kind) return kind.status().with_context(path);
  BITSPLIT_ASSIGN_OR_RETURN(std::string sha, peek.content_sha256());
  BITSPLIT_ASSIGN_OR_RETURN(std::string base_arch, base.metadata().get_string_or("general.architecture", ""));
  switch (*kind) {
    case FileKind::kModel: {
      BITSPLIT_ASSIGN_OR_RETURN(std::unique_ptr<WeightSource> ft, open_weights(path));
      BITSPLIT_ASSIGN_OR_RETURN(std::string arch, ft->metadata().get_string_or("general.architecture", ""));
      if (arch != base_arch) {
        return Status::error(path + ": is a '" + arch + "' model; the base is '" + base_arch + "'");
      }
      BITSPLIT_RETURN_IF_ERROR(check_same_tensors(base, *ft));
      return std::unique_ptr<TaskVector>(new ModelTaskVector(std::move(ft), path, sha));
    }
    case FileKind::kDelta: {
      BITSPLIT_ASSIGN_OR_RETURN(DeltaFile d, open_delta(path));
      BITSPLIT_RETURN_IF_ERROR(check_delta_base(d, base));
      return std::unique_ptr<TaskVector>(new DeltaTaskVector(std::move(d), sha));
    }
    case FileKind::kAdapter: {
      BITSPLIT_ASSIGN_OR_RETURN(LoraFile l, open_lora(path));
      if (l.architecture != base_arch) {
        return Status::error(path + ": the adapter is for a '" + l.architecture + "' model; the base is '" + base_arch + "'");
      }
      for (const auto& [weight, t] : l.tensors) {
        const gguf::TensorInfo* b = base.find_tensor(weight);
        if (!b || b->dims.size() != 2 || b->dims[0] != t.in || b->dims[1] != t.out) {
          return Status::error(path + ": the adapter's '" + weight + "' is [" + std::to_string(t.in) + ", " +
                               std::to_string(t.out) + "]; the base's is " + (b ? b->shape_string() : "missing") +
                               ": an adapter for another model");
        }
      }
      return std::unique_ptr<TaskVector>(new LoraTaskVector(std::move(l), sha));
    }
    case FileKind::kBitSplitModel:
      return Status::error(path + ": is a converted bit-split model; merge the original fine-tunes (or their deltas)");
    case FileKind::kImatrix:
      return Status::error(path + ": is an importance matrix, not a fine-tune");
  }
  return Status::error(path + ": unknown kind of file");
}

Result<ThinSvd> thin_svd(const std::vector<float>& m, int64_t rows, int64_t cols) {
  if (rows < 1 || cols < 1 || int64_t(m.size()) != rows * cols) return Status::error("thin_svd: bad matrix shape");
  if (rows > INT32_MAX || cols > INT32_MAX) return Status::error("thin_svd: matrix too large for LAPACK");
  ThinSvd r;
  r.rows = rows;
  r.cols = cols;
  r.k = std::min(rows, cols);
  std::vector<float> a = m;
  r.s.resize(static_cast<size_t>(r.k));
  r.u.resize(static_cast<size_t>(rows * r.k));
  r.vt.resize(static_cast<size_t>(r.k * cols));
  const lapack_int info = LAPACKE_sgesdd(LAPACK_ROW_MAJOR, 'S', lapack_int(rows), lapack_int(cols), a.data(),
                                         lapack_int(cols), r.s.data(), r.u.data(), lapack_int(r.k), r.vt.data(),
                                         lapack_int(cols));
  if (info != 0) {
    return Status::error("the SVD of a " + std::to_string(rows) + " x " + std::to_string(cols) +
                         " matrix failed (LAPACK sgesdd info " + std::to_string(info) + ")");
  }
  return r;
}

Result<std::vector<float>> truncated_svd(const std::vector<float>& m, int64_t rows, int64_t cols, int64_t rank,
                                         double* energy_kept) {
  const int64_t k = std::min(rows, cols);
  if (rank < 1 || rank > k) {
    return Status::error("rank " + std::to_string(rank) + " is larger than the " + std::to_string(rows) + " x " +
                         std::to_string(cols) + " matrix allows (at most " + std::to_string(k) + ")");
  }
  BITSPLIT_ASSIGN_OR_RETURN(ThinSvd svd, thin_svd(m, rows, cols));
  double total = 0, kept = 0;
  for (int64_t i = 0; i < k; ++i) {
    total += double(svd.s[size_t(i)]) * svd.s[size_t(i)];
    if (i < rank) kept += double(svd.s[size_t(i)]) * svd.s[size_t(i)];
  }
  if (energy_kept) *energy_kept = total > 0 ? kept / total : 1.0;
  std::vector<float> out(size_t(rows * cols), 0.0f);
  for (int64_t r = 0; r < rows; ++r) {
    float* row = out.data() + r * cols;
    for (int64_t i = 0; i < rank; ++i) {
      const float us = svd.u[size_t(r * k + i)] * svd.s[size_t(i)];
      const float* v = svd.vt.data() + i * cols;
      for (int64_t c = 0; c < cols; ++c) row[c] += us * v[c];
    }
  }
  return out;
}

namespace {

using TaskVectors = std::vector<std::unique_ptr<TaskVector>>;

// The inputs' task vectors: each checked against the base, none the base itself or a repeat.
Result<TaskVectors> open_task_vectors(const WeightSource& base, const std::vector<std::string>& inputs) {
  BITSPLIT_ASSIGN_OR_RETURN(std::string base_sha, base.content_sha256());
  TaskVectors tvs;
  for (const std::string& path : inputs) {
    BITSPLIT_ASSIGN_OR_RETURN(auto tv, TaskVector::open(path, base));
    if (tv->sha256() == base_sha) return Status::error(path + ": is the base model itself (its task vector is zero)");
    for (const auto& other : tvs) {
      if (other->sha256() == tv->sha256()) {
        return Status::error(path + " and " + other->path() + " are the same file: merging a fine-tune with itself");
      }
    }
    tvs.push_back(std::move(tv));
  }
  return tvs;
}

// A rank no matrix can hold is refused before anything is written.
Status check_rank(const WeightSource& base, int64_t rank) {
  for (const gguf::TensorInfo& t : base.tensors()) {
    if (!is_matrix(t)) continue;
    const Shape s = shape_of(t);
    if (rank < 1 || rank > std::min(s.rows, s.cols)) {
      return Status::error("--rank " + std::to_string(rank) + " is larger than '" + t.name + "' (" +
                           std::to_string(s.rows) + " x " + std::to_string(s.cols) + ") allows: at most " +
                           std::to_string(std::min(s.rows, s.cols)));
    }
  }
  return Status::ok();
}

// The output's header: the base's metadata (less its alignment and any bitsplit.* keys), how it
// was merged and from what, and every base tensor (matrices as F16 when asked).
Status declare_merged_file(const WeightSource& base, const TaskVectors& tvs, const MergeOptions& options,
                           gguf::Writer& writer) {
  using gguf::Value;
  for (const auto& [key, value] : base.metadata().entries()) {
    if (key != "general.alignment" && !key.starts_with("bitsplit.")) writer.metadata().set(key, value);
  }
  std::string names;
  for (const auto& tv : tvs) names += (names.empty() ? "" : ", ") + tv->path();
  writer.metadata().set("general.name", Value::string(options.name.empty() ? "merge of " + names : options.name));
  writer.metadata().set("bitsplit.merge.method", Value::string(merge_method_name(options.method)));
  if (options.method == MergeMethod::kMonoSoup) writer.metadata().set("bitsplit.merge.rank", Value::u32(uint32_t(options.rank)));
  if (options.method == MergeMethod::kTaskArithmetic) writer.metadata().set("bitsplit.merge.lambda", Value::f32(options.lambda));
  writer.metadata().set("bitsplit.merge.inputs", Value::string(names));
  for (const gguf::TensorInfo& t : base.tensors()) {
    const gguf::TensorType type = options.f16 && t.dims.size() >= 2 ? gguf::TensorType::F16 : gguf::TensorType::F32;
    BITSPLIT_RETURN_IF_ERROR(writer.add_tensor_info(t.name, type, t.dims));
  }
  return Status::ok();
}

std::vector<uint8_t> tensor_bytes(const std::vector<float>& w, gguf::TensorType type) {
  std::vector<uint8_t> bytes;
  if (type == gguf::TensorType::F16) {
    bytes.resize(w.size() * 2);
    for (size_t e = 0; e < w.size(); ++e) {
      const uint16_t h = quant::fp32_to_fp16(w[e]);
      std::memcpy(bytes.data() + 2 * e, &h, 2);
    }
  } else {
    bytes.resize(w.size() * 4);
    std::memcpy(bytes.data(), w.data(), bytes.size());
  }
  return bytes;
}

// Merges the base tensors one at a time, in the file's order: W + coef · Σ Δ_i (each Δ_i cut to
// the rank first by monosoup), and keeps the report and the progress.
class TensorMerger {
 public:
  TensorMerger(const WeightSource& base, const TaskVectors& tvs, const MergeOptions& options,
               const std::function<void(const MergeProgress&)>& on_progress)
      : base_(base), tvs_(tvs), options_(options), on_progress_(on_progress),
        coef_(options.method == MergeMethod::kTaskArithmetic ? options.lambda : 1.0f / float(tvs.size())) {
    progress_.tensors_total = int64_t(base.tensors().size());
  }

  Result<std::vector<uint8_t>> merge(size_t i, const gguf::TensorInfo& out) {
    const gguf::TensorInfo& t = base_.tensors()[i];
    progress_.current = t.name;
    if (on_progress_) on_progress_(progress_);
    BITSPLIT_ASSIGN_OR_RETURN(std::vector<float> w, base_.load_f32(t));
    base_.release(t);
    BITSPLIT_ASSIGN_OR_RETURN(std::vector<double> sum, summed_deltas(t, w));
    if (!sum.empty()) {
      ++rep_.changed;
      for (size_t e = 0; e < w.size(); ++e) w[e] = float(double(w[e]) + double(coef_) * sum[e]);
    }
    for (float v : w)
      if (!std::isfinite(v)) return Status::error("the merged '" + t.name + "' has a non-finite value");
    ++rep_.tensors;
    ++progress_.tensors_done;
    if (on_progress_) on_progress_(progress_);
    return tensor_bytes(w, out.type);
  }

  // The report so far, with the mean energy kept over the SVDs made.
  MergeReport report() const {
    MergeReport rep = rep_;
    if (rep.svd_matrices > 0) rep.mean_energy_kept = energy_sum_ / double(rep.svd_matrices);
    return rep;
  }

 private:
  // Σ Δ_i over the inputs that change t (empty when none does), in double.
  Result<std::vector<double>> summed_deltas(const gguf::TensorInfo& t, const std::vector<float>& w) {
    std::vector<double> sum;
    for (const auto& tv : tvs_) {
      auto d = tv->delta(t, w);
      if (!d) return d.status().with_context(t.name);
      if (d->empty()) continue;
      if (options_.method == MergeMethod::kMonoSoup && is_matrix(t)) {
        const Shape s = shape_of(t);
        double energy = 1.0;
        auto approx = truncated_svd(*d, s.rows, s.cols, options_.rank, &energy);
        if (!approx) return approx.status().with_context(tv->path() + ": " + t.name);
        *d = std::move(*approx);
        energy_sum_ += energy;
        rep_.min_energy_kept = std::min(rep_.min_energy_kept, energy);
        ++rep_.svd_matrices;
      }
      if (sum.empty()) sum.assign(d->size(), 0.0);
      for (size_t e = 0; e < d->size(); ++e) sum[e] += (*d)[e];
    }
    return sum;
  }

  const WeightSource& base_;
  const TaskVectors& tvs_;
  const MergeOptions& options_;
  const std::function<void(const MergeProgress&)>& on_progress_;
  const float coef_;
  MergeReport rep_;
  MergeProgress progress_;
  double energy_sum_ = 0;
};

}  // namespace

Status merge_models(const WeightSource& base, const std::vector<std::string>& inputs, const std::string& out_path,
                    const MergeOptions& options, MergeReport* report,
                    const std::function<void(const MergeProgress&)>& on_progress) {
  const auto t0 = std::chrono::steady_clock::now();
  BITSPLIT_RETURN_IF_ERROR(require_model(base, ModelUse::kOriginal));
  if (inputs.empty()) return Status::error("merge needs fine-tunes of the base");
  if (options.method == MergeMethod::kTaskArithmetic && !std::isfinite(options.lambda)) {
    return Status::error("--lambda must be a finite number");
  }
  BITSPLIT_ASSIGN_OR_RETURN(TaskVectors tvs, open_task_vectors(base, inputs));
  if (options.method == MergeMethod::kMonoSoup) BITSPLIT_RETURN_IF_ERROR(check_rank(base, options.rank));

  gguf::Writer writer;
  BITSPLIT_RETURN_IF_ERROR(declare_merged_file(base, tvs, options, writer));
  TensorMerger merger(base, tvs, options, on_progress);
  BITSPLIT_RETURN_IF_ERROR(writer.write_file_streaming(
      out_path, [&](size_t i, const gguf::TensorInfo& out) { return merger.merge(i, out); }));
  MergeReport rep = merger.report();
  for (const auto& info : writer.tensor_infos()) rep.output_bytes += info.nbytes;
  rep.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (report) *report = rep;
  return Status::ok();
}

}  // namespace bitsplit
