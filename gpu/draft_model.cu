// gpu::DraftModel: the draft's whole forward pass on the GPU (draft_forward.cuh), its memory,
// the pinned staging of each batch and the copies in and out on one stream.
#include <cuda_runtime.h>

#include <array>
#include <cstring>
#include <vector>

#include "bitsplit/gpu.h"
#include "cuda_util.h"
#include "draft_forward.cuh"

namespace bitsplit::gpu {
namespace {

class CudaDraftModel final : public DraftModel {
 public:
  ~CudaDraftModel() override {
    if (stream_) cudaStreamDestroy(stream_);
  }

  Status init(DraftMatmul& planes, const DraftModelHost& m, int64_t n_slots, int64_t max_rows) {
    BITSPLIT_RETURN_IF_ERROR(check_shape(m.shape, int64_t(m.layers.size()), n_slots, max_rows));
    device_ = planes.device();
    n_slots_ = n_slots;
    max_rows_ = max_rows;
    BITSPLIT_RETURN_IF_ERROR(cuda_status(cudaSetDevice(device_), "cudaSetDevice"));
    BITSPLIT_RETURN_IF_ERROR(cuda_status(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate"));
    model_.shape = kernels::shape_of(m);
    BITSPLIT_RETURN_IF_ERROR(upload_embedding_and_head(planes, m));
    BITSPLIT_RETURN_IF_ERROR(upload_layers(planes, m));
    BITSPLIT_RETURN_IF_ERROR(allocate_batches());
    // The uploads above ran on the legacy default stream, which the non-blocking stream_ does
    // not wait for: the whole device must be done before the first forward.
    return cuda_status(cudaDeviceSynchronize(), "device draft upload");
  }

  Status upload_kv(int64_t layer, int64_t first_slot, int64_t count, const float* k, const float* v,
                   const int32_t* positions) override {
    if (layer < 0 || layer >= model_.shape.n_layers || first_slot < 0 || count < 0 || first_slot + count > n_slots_) {
      return Status::error("device draft: K/V upload outside the cache (layer " + std::to_string(layer) + ", slots " +
                           std::to_string(first_slot) + ".." + std::to_string(first_slot + count) + " of " +
                           std::to_string(n_slots_) + ")");
    }
    if (count == 0) return Status::ok();
    const int64_t kv = model_.shape.kv_dim();
    const size_t bytes = size_t(count * kv) * sizeof(float);
    BITSPLIT_RETURN_IF_ERROR(cuda_status(cudaSetDevice(device_), "cudaSetDevice"));
    float* kd = layers_[size_t(layer)].k_cache + first_slot * kv;
    float* vd = layers_[size_t(layer)].v_cache + first_slot * kv;
    BITSPLIT_RETURN_IF_ERROR(cuda_status(cudaMemcpyAsync(kd, k, bytes, cudaMemcpyHostToDevice, stream_), "upload K"));
    BITSPLIT_RETURN_IF_ERROR(cuda_status(cudaMemcpyAsync(vd, v, bytes, cudaMemcpyHostToDevice, stream_), "upload V"));
    counters_.activation_bytes_to_device += 2 * bytes;
    if (positions && layer == 0 && model_.shape.sliding_window > 0) {
      // Synchronous: `positions` is pageable host memory the caller may reuse at once.
      BITSPLIT_RETURN_IF_ERROR(cuda_status(cudaMemcpyAsync(slot_pos_.get() + first_slot, positions, size_t(count) * 4,
                                                           cudaMemcpyHostToDevice, stream_),
                                           "upload slot positions"));
      BITSPLIT_RETURN_IF_ERROR(cuda_status(cudaStreamSynchronize(stream_), "upload slot positions"));
      counters_.activation_bytes_to_device += size_t(count) * 4;
    }
    return Status::ok();
  }

  Status forward(const int32_t* tokens, const int32_t* positions, const int32_t* slots, const uint8_t* mask,
                 int64_t rows, int64_t kv_len, int top_k, int32_t* top_tokens, float* top_log_probs,
                 float* logits) override {
    const kernels::ShapeDev& s = model_.shape;
    if (rows <= 0 || rows > max_rows_) {
      return Status::error("device draft: a batch of " + std::to_string(rows) + " rows (1.." + std::to_string(max_rows_) +
                           " allowed)");
    }
    if (kv_len <= 0 || kv_len > n_slots_) {
      return Status::error("device draft: kv_len " + std::to_string(kv_len) + " outside the cache of " +
                           std::to_string(n_slots_) + " slots");
    }
    if (top_k < 0 || top_k > kernels::kMaxTopK || top_k > s.n_vocab) {
      return Status::error("device draft: top_k " + std::to_string(top_k) + " outside 0.." +
                           std::to_string(kernels::kMaxTopK));
    }
    for (int64_t r = 0; r < rows; ++r) {
      if (tokens[r] < 0 || tokens[r] >= s.n_vocab) return Status::error("device draft: token id outside the vocabulary");
      if (slots[r] < 0 || slots[r] >= kv_len) return Status::error("device draft: slot outside [0, kv_len)");
      if (positions[r] < 0) return Status::error("device draft: negative position");
    }
    BITSPLIT_RETURN_IF_ERROR(cuda_status(cudaSetDevice(device_), "cudaSetDevice"));
    // One staged copy in: tokens | positions | slots | mask.
    uint8_t* in = pinned_in_.get();
    const size_t ints = size_t(rows) * 4, mask_bytes = size_t(rows * kv_len);
    std::memcpy(in, tokens, ints);
    std::memcpy(in + ints, positions, ints);
    std::memcpy(in + 2 * ints, slots, ints);
    std::memcpy(in + 3 * ints, mask, mask_bytes);
    const size_t in_used = 3 * ints + mask_bytes;
    uint8_t* dev = batch_.get();
    // Once work is queued, no return leaves it running on the pinned buffers the next call reuses.
    auto fail = [&](Status st) {
      cudaStreamSynchronize(stream_);
      return st;
    };
    if (Status st = cuda_status(cudaMemcpyAsync(dev, in, in_used, cudaMemcpyHostToDevice, stream_), "copy the draft batch");
        !st) {
      return fail(st);
    }
    counters_.activation_bytes_to_device += in_used;
    const kernels::BatchDev b{reinterpret_cast<const int32_t*>(dev), reinterpret_cast<const int32_t*>(dev + ints),
                              reinterpret_cast<const int32_t*>(dev + 2 * ints), dev + 3 * ints, rows, kv_len};
    kernels::draft_forward(model_, b, scratch_, stream_);
    if (s.n_expert > 0) {  // per layer: the router's logits out, the routed rows and weights in
      counters_.result_bytes_to_host += uint64_t(s.n_layers * rows * s.n_expert) * 4;
      counters_.activation_bytes_to_device += uint64_t(s.n_layers * rows * s.n_expert_used) * 8;
    }
    const size_t top_count = size_t(rows) * size_t(top_k);
    if (top_k > 0) {
      int32_t* dt = reinterpret_cast<int32_t*>(top_.get());
      float* dl = reinterpret_cast<float*>(top_.get() + top_count * 4);
      kernels::top_k_rows<<<unsigned(rows), kernels::kBlock, 0, stream_>>>(scratch_.logits, s.n_vocab, top_k, dt, dl);
      if (Status st = cuda_status(cudaMemcpyAsync(pinned_out_.get(), top_.get(), top_count * 8, cudaMemcpyDeviceToHost,
                                                  stream_),
                                  "copy top-k");
          !st) {
        return fail(st);
      }
      counters_.result_bytes_to_host += top_count * 8;
    }
    if (Status st = cuda_status(cudaGetLastError(), "device draft launch"); !st) return fail(st);
    if (logits) {
      const size_t bytes = size_t(rows * s.n_vocab) * 4;
      if (Status st = cuda_status(cudaMemcpyAsync(logits, scratch_.logits, bytes, cudaMemcpyDeviceToHost, stream_),
                                  "copy draft logits");
          !st) {
        return fail(st);
      }
      counters_.result_bytes_to_host += bytes;
    }
    BITSPLIT_RETURN_IF_ERROR(cuda_status(cudaStreamSynchronize(stream_), "device draft forward"));
    if (top_k > 0) {
      std::memcpy(top_tokens, pinned_out_.get(), top_count * 4);
      std::memcpy(top_log_probs, pinned_out_.get() + top_count * 4, top_count * 4);
    }
    ++counters_.calls;
    return Status::ok();
  }

  TransferCounters counters() const override { return counters_; }
  uint64_t device_bytes() const override { return bytes_; }

 private:
  static Status check_shape(const ModelShape& s, int64_t layers, int64_t n_slots, int64_t max_rows) {
    if (n_slots <= 0 || max_rows <= 0) return Status::error("the device draft needs at least one cache slot and one row");
    if (s.n_layers <= 0 || s.n_heads <= 0 || s.n_kv_heads <= 0 || s.n_heads % s.n_kv_heads != 0 || layers != s.n_layers) {
      return Status::error("the device draft got an inconsistent model shape");
    }
    if (s.n_rot > s.head_dim || s.n_rot % 2 != 0) return Status::error("the device draft needs an even n_rot <= head_dim");
    if (s.n_expert > 0 && (s.n_expert_used < 1 || s.n_expert_used > s.n_expert || s.n_ff_exp <= 0)) {
      return Status::error("the device draft got an inconsistent mixture of experts");
    }
    return Status::ok();
  }

  // The head's plane, the embedding (a variant's signs and LoRA on it), the output norm and the
  // RoPE factors.
  Status upload_embedding_and_head(DraftMatmul& planes, const DraftModelHost& m) {
    const ModelShape& s = m.shape;
    BITSPLIT_ASSIGN_OR_RETURN(model_.head, plane(planes, m.head, "output.weight", s.n_vocab, s.n_embd));
    BITSPLIT_ASSIGN_OR_RETURN(model_.token_embd, put(m.token_embd, s.n_vocab * s.n_embd, "token_embd"));
    BITSPLIT_ASSIGN_OR_RETURN(model_.output_norm, put(m.output_norm, s.n_embd, "output_norm"));
    if (m.embd_signs.signs) BITSPLIT_RETURN_IF_ERROR(upload_embedding_signs(m.embd_signs, s));
    if (m.embd_lora.up) {  // a variant's embedding LoRA
      if (m.embd_lora.rank < 1 || m.embd_lora.rank > m.max_lora_rank) {
        return Status::error("device draft: the embedding's LoRA has rank " + std::to_string(m.embd_lora.rank));
      }
      BITSPLIT_ASSIGN_OR_RETURN(model_.embd_lora_up, put(m.embd_lora.up, s.n_vocab * m.embd_lora.rank, "token_embd LoRA up"));
      BITSPLIT_ASSIGN_OR_RETURN(model_.embd_lora_down,
                                put(m.embd_lora.down, m.embd_lora.rank * s.n_embd, "token_embd LoRA down"));
      model_.embd_lora_rank = m.embd_lora.rank;
      model_.embd_lora_scale = m.embd_lora.scale;
    }
    if (m.rope_freq_factors) {
      BITSPLIT_ASSIGN_OR_RETURN(model_.rope_freq_factors, put(m.rope_freq_factors, s.n_rot / 2, "rope_freqs"));
    }
    return Status::ok();
  }

  // A variant's embedding delta, in its own layout.
  Status upload_embedding_signs(const SignPlaneView& e, const ModelShape& s) {
    if (e.out != s.n_vocab || e.in != s.n_embd || e.row_bytes < (e.in + 7) / 8) {
      return Status::error("device draft: the variant's embedding signs have another shape");
    }
    const size_t bytes = size_t(e.out * e.row_bytes);
    BITSPLIT_RETURN_IF_ERROR(embd_signs_.allocate(bytes));
    BITSPLIT_RETURN_IF_ERROR(
        cuda_status(cudaMemcpy(embd_signs_.get(), e.signs, bytes, cudaMemcpyHostToDevice), "upload embedding signs"));
    BITSPLIT_ASSIGN_OR_RETURN(model_.embd_alpha, put(e.alpha, e.alpha_per_row ? e.out : 1, "token_embd signs' scales"));
    model_.embd_signs = embd_signs_.get();
    model_.embd_alpha_per_row = e.alpha_per_row;
    model_.embd_row_bytes = e.row_bytes;
    counters_.weight_bytes_to_device += bytes;
    bytes_ += bytes;
    return Status::ok();
  }

  // The K/V cache, every layer's tensors and planes, and the slots' positions.
  Status upload_layers(DraftMatmul& planes, const DraftModelHost& m) {
    const int64_t layers = m.shape.n_layers, cache = layers * n_slots_ * m.shape.kv_dim();
    BITSPLIT_RETURN_IF_ERROR(k_cache_.allocate(size_t(cache)));
    BITSPLIT_RETURN_IF_ERROR(v_cache_.allocate(size_t(cache)));
    bytes_ += uint64_t(cache) * 8;
    layers_.resize(size_t(layers));
    experts_.resize(size_t(layers));
    for (int64_t l = 0; l < layers; ++l) BITSPLIT_RETURN_IF_ERROR(upload_layer(planes, m.layers[size_t(l)], l));
    model_.layers = layers_.data();
    // Slot positions (sliding window): 0 until a batch or an upload writes them.
    BITSPLIT_RETURN_IF_ERROR(slot_pos_.allocate(size_t(n_slots_)));
    BITSPLIT_RETURN_IF_ERROR(cuda_status(cudaMemset(slot_pos_.get(), 0, size_t(n_slots_) * 4), "clear slot positions"));
    model_.slot_pos = slot_pos_.get();
    bytes_ += uint64_t(n_slots_) * 4;
    return Status::ok();
  }

  Status upload_layer(DraftMatmul& planes, const DraftModelHost::Layer& h, int64_t l) {
    const kernels::ShapeDev& s = model_.shape;
    const int64_t kv = s.kv_dim();
    kernels::LayerDev& d = layers_[size_t(l)];
    d = kernels::layer_of(h);  // the host's pointers, each replaced below by its device copy
    const std::string b = "blk." + std::to_string(l) + ".";
    BITSPLIT_ASSIGN_OR_RETURN(d.attn_norm, put(h.attn_norm, s.n_embd, b + "attn_norm"));
    BITSPLIT_ASSIGN_OR_RETURN(d.ffn_norm, put(h.ffn_norm, s.n_embd, b + "ffn_norm"));
    if (h.post_attn_norm || h.post_ffn_norm) {
      BITSPLIT_ASSIGN_OR_RETURN(d.post_attn_norm, put(h.post_attn_norm, s.n_embd, b + "post_attention_norm"));
      BITSPLIT_ASSIGN_OR_RETURN(d.post_ffn_norm, put(h.post_ffn_norm, s.n_embd, b + "post_ffw_norm"));
    }
    if (h.q_norm) {
      BITSPLIT_ASSIGN_OR_RETURN(d.q_norm, put(h.q_norm, s.head_dim, b + "attn_q_norm"));
      BITSPLIT_ASSIGN_OR_RETURN(d.k_norm, put(h.k_norm, s.head_dim, b + "attn_k_norm"));
    }
    if (h.bq) {
      BITSPLIT_ASSIGN_OR_RETURN(d.bq, put(h.bq, s.q_dim(), b + "attn_q.bias"));
      BITSPLIT_ASSIGN_OR_RETURN(d.bk, put(h.bk, kv, b + "attn_k.bias"));
      BITSPLIT_ASSIGN_OR_RETURN(d.bv, put(h.bv, kv, b + "attn_v.bias"));
    }
    BITSPLIT_ASSIGN_OR_RETURN(d.wq, plane(planes, h.wq, b + "attn_q", s.q_dim(), s.n_embd));
    BITSPLIT_ASSIGN_OR_RETURN(d.wk, plane(planes, h.wk, b + "attn_k", kv, s.n_embd));
    BITSPLIT_ASSIGN_OR_RETURN(d.wv, plane(planes, h.wv, b + "attn_v", kv, s.n_embd));
    BITSPLIT_ASSIGN_OR_RETURN(d.wo, plane(planes, h.wo, b + "attn_output", s.n_embd, s.q_dim()));
    if (s.n_expert > 0) {
      BITSPLIT_RETURN_IF_ERROR(upload_experts(planes, h, l, b, d));
    } else {
      BITSPLIT_RETURN_IF_ERROR(ffn(planes, {&h.gate, &h.up, &h.down}, b, "", s.n_ff, {&d.gate, &d.up, &d.down}));
    }
    d.k_cache = k_cache_.get() + l * n_slots_ * kv;
    d.v_cache = v_cache_.get() + l * n_slots_ * kv;
    return Status::ok();
  }

  // Every expert's planes (all resident), the router and a shared expert with its gate.
  Status upload_experts(DraftMatmul& planes, const DraftModelHost::Layer& h, int64_t l, const std::string& b,
                        kernels::LayerDev& d) {
    const kernels::ShapeDev& s = model_.shape;
    if (int64_t(h.experts.size()) != 3 * s.n_expert) return Status::error("device draft: " + b + " lacks experts");
    BITSPLIT_ASSIGN_OR_RETURN(d.router, put(h.router, s.n_expert * s.n_embd, b + "ffn_gate_inp"));
    std::vector<kernels::PlaneDev>& experts = experts_[size_t(l)];
    experts.resize(h.experts.size());
    for (size_t e = 0; e < size_t(s.n_expert); ++e) {
      BITSPLIT_RETURN_IF_ERROR(ffn(planes, {&h.experts[3 * e], &h.experts[3 * e + 1], &h.experts[3 * e + 2]}, b,
                                   "." + std::to_string(e), s.n_ff_exp,
                                   {&experts[3 * e], &experts[3 * e + 1], &experts[3 * e + 2]}));
    }
    d.experts = experts.data();
    if (s.n_ff_shexp > 0) {
      BITSPLIT_RETURN_IF_ERROR(ffn(planes, {&h.shexp_gate, &h.shexp_up, &h.shexp_down}, b, "_shexp", s.n_ff_shexp,
                                   {&d.shexp_gate, &d.shexp_up, &d.shexp_down}));
      BITSPLIT_ASSIGN_OR_RETURN(d.shexp_gate_inp, put(h.shexp_gate_inp, s.n_embd, b + "ffn_gate_inp_shexp"));
    }
    return Status::ok();
  }

  // Gate, up and down of one FFN of width ff ("ffn_gate" + suffix, ...).
  Status ffn(DraftMatmul& planes, std::array<const DraftModelHost::Plane*, 3> from, const std::string& b,
             const std::string& suffix, int64_t ff, std::array<kernels::PlaneDev*, 3> to) {
    const int64_t n_embd = model_.shape.n_embd;
    const char* kinds[3] = {"ffn_gate", "ffn_up", "ffn_down"};
    for (size_t k = 0; k < 3; ++k) {
      BITSPLIT_ASSIGN_OR_RETURN(*to[k], plane(planes, *from[k], b + kinds[k] + suffix, k < 2 ? ff : n_embd,
                                              k < 2 ? n_embd : ff));
    }
    return Status::ok();
  }

  // The pass's scratch for max_rows_ rows over n_slots_ slots, and the staging of each batch.
  Status allocate_batches() {
    const kernels::ScratchSizes z = kernels::scratch_sizes(model_.shape, max_rows_, n_slots_);
    BITSPLIT_RETURN_IF_ERROR(floats_.allocate(size_t(z.floats())));
    BITSPLIT_RETURN_IF_ERROR(qa_.allocate(size_t(z.qa)));
    BITSPLIT_RETURN_IF_ERROR(qa_sum_.allocate(size_t(z.ints())));
    bytes_ += uint64_t(z.floats()) * 4 + uint64_t(z.qa) + uint64_t(z.ints()) * 4;
    scratch_ = kernels::carve_scratch(floats_.get(), qa_.get(), qa_sum_.get(), z);
    // Per call: 3 int32 per row and the mask in; top-k tokens and log-probs out.
    in_bytes_ = size_t(max_rows_) * (12 + size_t(n_slots_));
    out_bytes_ = size_t(max_rows_) * kernels::kMaxTopK * 8;
    BITSPLIT_RETURN_IF_ERROR(batch_.allocate(in_bytes_));
    BITSPLIT_RETURN_IF_ERROR(top_.allocate(out_bytes_));
    BITSPLIT_RETURN_IF_ERROR(pinned_in_.reserve(in_bytes_));
    BITSPLIT_RETURN_IF_ERROR(pinned_out_.reserve(out_bytes_));
    bytes_ += in_bytes_ + out_bytes_;
    return Status::ok();
  }

  // A small f32 tensor copied to the device (embedding, norms, biases).
  Result<const float*> put(const float* host, int64_t n, const std::string& what) {
    if (!host) return Status::error("device draft: " + what + " is missing");
    DeviceBuffer<float> d;
    BITSPLIT_RETURN_IF_ERROR(d.allocate(size_t(n)).with_context(what));
    BITSPLIT_RETURN_IF_ERROR(cuda_status(cudaMemcpy(d.get(), host, size_t(n) * 4, cudaMemcpyHostToDevice), "upload"));
    counters_.weight_bytes_to_device += uint64_t(n) * 4;
    bytes_ += uint64_t(n) * 4;
    small_.push_back(std::move(d));
    return static_cast<const float*>(small_.back().get());
  }

  // The resident copy of a projection's plane, checked against the shape the pass needs.
  Result<kernels::PlaneDev> plane(DraftMatmul& planes, const DraftModelHost::Plane& p, const std::string& what,
                                  int64_t out, int64_t in) {
    const DraftMatmul::DevicePlane d = planes.device_plane(p.key);
    if (!d.codes) return Status::error("device draft: the draft plane of " + what + " is not in VRAM");
    if (d.out != out || d.in != in || d.group != model_.shape.group) {
      return Status::error("device draft: the plane of " + what + " is " + std::to_string(d.out) + " x " +
                           std::to_string(d.in) + " (group " + std::to_string(d.group) + "), expected " +
                           std::to_string(out) + " x " + std::to_string(in) + " (group " +
                           std::to_string(model_.shape.group) + ")");
    }
    kernels::PlaneDev dev{static_cast<const uint8_t*>(d.codes), static_cast<const uint16_t*>(d.scales),
                          static_cast<const uint16_t*>(d.offsets), d.out, d.in, (d.in + d.group - 1) / d.group,
                          d.group, d.bits};
    if (p.signs.signs) {  // a variant's signs, resident beside the plane (once per sign plane)
      if (p.signs.out != out || p.signs.in != in) return Status::error("device draft: the signs of " + what + " have another shape");
      BITSPLIT_RETURN_IF_ERROR(planes.upload_signs(p.signs_key, p.signs, d.group).with_context(what));
      const DraftMatmul::DeviceSigns g = planes.device_signs(p.signs_key);
      dev.signs = static_cast<const uint8_t*>(g.signs);
      dev.alpha = g.alpha;
      dev.alpha_per_row = g.alpha_per_row;
    }
    if (p.lora.up) {  // a variant's LoRA factors, this draft's own copy
      if (p.lora.rank < 1 || p.lora.rank > model_.shape.max_lora_rank) {
        return Status::error("device draft: the LoRA of " + what + " has rank " + std::to_string(p.lora.rank) +
                             " (the scratch holds " + std::to_string(model_.shape.max_lora_rank) + ")");
      }
      BITSPLIT_ASSIGN_OR_RETURN(dev.lora_up, put(p.lora.up, out * p.lora.rank, what + " LoRA up"));
      BITSPLIT_ASSIGN_OR_RETURN(dev.lora_down, put(p.lora.down, p.lora.rank * in, what + " LoRA down"));
      dev.lora_rank = p.lora.rank;
      dev.lora_scale = p.lora.scale;
    }
    return dev;
  }

  int device_ = 0;
  int64_t n_slots_ = 0, max_rows_ = 0;
  cudaStream_t stream_ = nullptr;
  kernels::ModelDev model_;
  std::vector<kernels::LayerDev> layers_;
  std::vector<std::vector<kernels::PlaneDev>> experts_;  // per layer: a mixture's expert planes (LayerDev::experts)
  std::vector<DeviceBuffer<float>> small_;
  DeviceBuffer<float> floats_;  // the scratch's float arrays (carve_scratch)
  DeviceBuffer<float> k_cache_, v_cache_;
  DeviceBuffer<int8_t> qa_;
  DeviceBuffer<int32_t> qa_sum_, slot_pos_;
  DeviceBuffer<uint8_t> batch_, top_, embd_signs_;
  PinnedBuffer pinned_in_, pinned_out_;
  size_t in_bytes_ = 0, out_bytes_ = 0;
  kernels::ScratchDev scratch_{};
  TransferCounters counters_;
  uint64_t bytes_ = 0;
};

}  // namespace

Result<std::unique_ptr<DraftModel>> DraftModel::create(DraftMatmul& planes, const DraftModelHost& model,
                                                       int64_t n_slots, int64_t max_rows) {
  auto m = std::make_unique<CudaDraftModel>();
  BITSPLIT_RETURN_IF_ERROR(m->init(planes, model, n_slots, max_rows));
  return std::unique_ptr<DraftModel>(std::move(m));
}

}  // namespace bitsplit::gpu
