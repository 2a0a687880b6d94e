// gpu/: CUDA kernels and device management. This header never exposes CUDA types, so the
// engine compiles the same with or without CUDA; without it every call reports that plainly.
// It is C++17 (no std::span) because the CUDA sources that include it are compiled as C++17.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "bitsplit/model_shape.h"
#include "bitsplit/plane_view.h"
#include "bitsplit/status.h"

namespace bitsplit::gpu {

// True when this build contains CUDA kernels.
bool compiled_with_cuda();
// Number of usable CUDA devices (0 without CUDA, without a driver, or without a device).
int device_count();
// "NVIDIA H200 (sm_90, 139 GiB)"; an error when the device does not exist.
Result<std::string> describe_device(int device);
// Free device memory in bytes (cudaMemGetInfo).
Result<uint64_t> free_memory(int device);

// Row-wise RMSNorm on the device: y[r] = x[r] / sqrt(mean(x[r]^2) + eps) * weight, for
// `rows` rows of length n. Host launcher: copies in, runs, copies out.
// x and y hold rows * n floats, weight n floats (host memory).
Status rms_norm(const float* x, const float* weight, int64_t rows, int64_t n, float eps, float* y, int device = 0);

// Device-to-device copy bandwidth (bytes/s) over `bytes`, the yardstick for GPU kernels.
Result<double> measure_copy_bandwidth(uint64_t bytes, int iterations, int device = 0);

// Bytes moved between host and device.
struct TransferCounters {
  uint64_t weight_bytes_to_device = 0;  // plane uploads (once per plane)
  uint64_t activation_bytes_to_device = 0;
  uint64_t result_bytes_to_host = 0;
  uint64_t calls = 0;
};

// D·X on the GPU with exactly the CPU kernels' arithmetic (integer dot products per group,
// then the same fused multiply-adds in the same order), so results are bitwise equal to
// cpu::draft_matmul_ref. Planes are uploaded once (keyed by the caller's pointer) and stay
// in VRAM for the object's lifetime; each call copies only activations in and results out.
// A key names its plane for good: the caller keeps a key's host object alive (or its address
// unused by another plane) while it is resident; draft planes stay for the object's lifetime,
// sign planes until release_signs().
class DraftMatmul {
 public:
  static Result<std::unique_ptr<DraftMatmul>> create(int device);
  virtual ~DraftMatmul() = default;
  // Uploads a plane unless `key` is already resident (an error if the resident plane has
  // another shape). Only 2-bit planes are supported.
  virtual Status upload(const void* key, const DraftPlaneView& plane) = 0;
  // Uploads a variant's sign plane for draft planes of group `group`, unless `key` is resident
  // (an error if the resident sign plane has another shape).
  virtual Status upload_signs(const void* key, const SignPlaneView& signs, int group) = 0;
  // Frees the sign plane resident under `key` (nothing if none): a variant leaving the cache
  // releases its signs, so a later variant whose host buffer reuses the address is uploaded.
  virtual void release_signs(const void* key) = 0;
  // Whether upload(key, ...) has made a plane resident.
  virtual bool resident(const void* key) const = 0;
  // y (host, rows x out) = D · X for the resident plane `key`; with a resident sign plane
  // `signs_key`, (D + α⊙S) · X fused in the same pass (bitwise cpu::draft_matmul_ref with delta).
  Status run(const void* key, const QuantizedRowsView& x, float* y, const void* signs_key = nullptr) {
    BITSPLIT_RETURN_IF_ERROR(start(key, x, signs_key));
    return finish(y);
  }
  // run() in two halves, so the caller works while the device computes: start() stages the
  // activations in pinned memory and queues the copy in, the kernel and the copy out on the
  // object's stream; finish() waits and writes y. One call in flight at a time.
  virtual Status start(const void* key, const QuantizedRowsView& x, const void* signs_key) = 0;
  virtual Status finish(float* y) = 0;
  virtual TransferCounters counters() const = 0;
  // The device, and the device addresses of a resident plane (nulls when `key` is not
  // resident): other device code (DraftModel) computes with the same copy.
  struct DevicePlane {
    const void* codes = nullptr;
    const void* scales = nullptr;
    const void* offsets = nullptr;
    int64_t out = 0, in = 0;
    int group = 0;
    int bits = 2;
  };
  virtual int device() const = 0;
  virtual DevicePlane device_plane(const void* key) const = 0;
  // Device addresses of a resident sign plane (rows padded to whole groups), or nulls.
  struct DeviceSigns {
    const void* signs = nullptr;
    const float* alpha = nullptr;
    bool alpha_per_row = true;
    int64_t out = 0, in = 0;
    int group = 0;
  };
  virtual DeviceSigns device_signs(const void* key) const = 0;
  // For benchmarks (bench_gpu_draft): seconds per kernel launch for the plane `key` and the
  // activations of the last run(), averaged over `iterations` (no copies timed).
  virtual Result<double> time_kernel(const void* key, int64_t rows, int iterations) = 0;
};

// The whole draft model, as the device needs it: its shape, every projection and the output head
// as a 2-bit plane (with the DraftMatmul key it is resident under), f32 norms, biases and
// embedding (host memory; the engine builds this from a Model, describe_device_draft in
// engine/model/draft_description.cpp).
struct DraftModelHost {
  // The draft's ModelConfig as a shape (a mixture of experts: each layer's FFN is Layer::experts,
  // routed per row by Layer::router, plus a shared expert when n_ff_shexp > 0).
  ModelShape shape;
  int group = 64;  // shared by every plane
  const float* token_embd = nullptr;         // [n_vocab x n_embd]
  const float* output_norm = nullptr;        // n_embd
  // n_rot / 2 divisors of theta, or null; for LongRoPE the set the sequence's context picks
  // (describe_device_draft chooses it, as Model::rope_freq_factors does for the CPU pass).
  const float* rope_freq_factors = nullptr;
  struct Plane {
    const void* key = nullptr;  // the DraftMatmul key the plane is resident under
    DraftPlaneView plane{};
    // A variant's sign plane joining this one (signs.signs null: none); DraftModel::create
    // makes it resident under signs_key (upload_signs) and fuses it into the kernel.
    const void* signs_key = nullptr;
    SignPlaneView signs{};
    // A variant's LoRA change (up null: none): y += scale · U·(V·x) after the plane's product
    // and before a bias, from the projection's f32 input (bitsplit::VariantLora::apply).
    struct Lora {
      const float* up = nullptr;    // U [out x rank]
      const float* down = nullptr;  // V [rank x in]
      int64_t rank = 0;
      float scale = 1.0f;
    } lora;
  };
  Plane head;
  // A variant's token-embedding signs (signs null: none): x = embd[t] + α_t ⊙ S[t].
  SignPlaneView embd_signs{};
  // A variant's token-embedding LoRA (up null: none; U [n_vocab x rank], V [rank x n_embd]),
  // added after the signs: x[j] += scale · Σ_k U[t][k] · V[k][j] (VariantLora::add_row).
  Plane::Lora embd_lora;
  int64_t max_lora_rank = 0;  // the largest rank of any Lora above (scratch)
  struct Layer {
    const float* attn_norm = nullptr;
    const float* ffn_norm = nullptr;
    const float* post_attn_norm = nullptr;  // gemma's norms after each branch, or null
    const float* post_ffn_norm = nullptr;
    bool swa = false;  // a sliding-window layer
    float rope_base = 10000.0f, rope_freq_scale = 1.0f;
    const float* q_norm = nullptr;  // null without QK-norm
    const float* k_norm = nullptr;
    const float* bq = nullptr;  // null without biases
    const float* bk = nullptr;
    const float* bv = nullptr;
    Plane wq, wk, wv, wo, gate, up, down;  // gate/up/down: a dense FFN's (unused with experts)
    const float* router = nullptr;          // ffn_gate_inp [n_expert x n_embd], f32
    std::vector<Plane> experts;             // n_expert x {gate, up, down} (expert e at 3e..3e+2)
    Plane shexp_gate, shexp_up, shexp_down;  // qwen2moe's shared expert
    const float* shexp_gate_inp = nullptr;   // [n_embd]: its gate, sigmoid(x · w)
  };
  std::vector<Layer> layers;
};

// The draft's whole forward pass on the GPU (gpu/draft_forward.cuh): planes shared with a
// DraftMatmul (not copied again), the embedding, norms and a K/V cache of n_slots slots in VRAM.
// Per call only the batch (tokens, positions, slots, mask) goes in and the top-k of each row
// (or, when asked, the logits) comes out; committed K/V are copied in by upload_kv().
class DraftModel {
 public:
  static constexpr int kMaxTopK = 32;  // forward()'s top_k at most
  // Fails with a message naming what is missing (a plane not resident in `planes`, a shape the
  // kernels do not take) or what did not fit in VRAM. max_rows bounds a batch's rows.
  static Result<std::unique_ptr<DraftModel>> create(DraftMatmul& planes, const DraftModelHost& model, int64_t n_slots,
                                                    int64_t max_rows);
  virtual ~DraftModel() = default;
  // Copies `count` slots from first_slot on of one layer: k and v are [count x kv_dim] (host);
  // positions (count values, or null) are the slots' token positions, which sliding-window
  // layers compare.
  virtual Status upload_kv(int64_t layer, int64_t first_slot, int64_t count, const float* k, const float* v,
                           const int32_t* positions) = 0;
  // One batch: row r is token tokens[r] at RoPE position positions[r], written to slot slots[r],
  // attending to slots j < kv_len with mask[r * kv_len + j] != 0. Writes the top_k tokens of
  // each row (largest logit first) and their log-softmax values ([rows x top_k]); with
  // `logits` non-null also the logits [rows x n_vocab].
  virtual Status forward(const int32_t* tokens, const int32_t* positions, const int32_t* slots, const uint8_t* mask,
                         int64_t rows, int64_t kv_len, int top_k, int32_t* top_tokens, float* top_log_probs,
                         float* logits) = 0;
  // Bytes moved: weight_bytes_to_device counts the embedding and norms (once, at create),
  // activation_bytes_to_device the batches and K/V, result_bytes_to_host the top-k and logits.
  virtual TransferCounters counters() const = 0;
  // VRAM this object holds beyond the shared planes.
  virtual uint64_t device_bytes() const = 0;
};

}  // namespace bitsplit::gpu
