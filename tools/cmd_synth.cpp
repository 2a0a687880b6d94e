// `bitsplit synth`: a random-weight llama GGUF of a given shape, for timing at sizes we
// have no trained model for. Its text is meaningless; only its costs are real.
//
// --format f16 (default) writes F16 projections, the input of `bitsplit convert`.
// --format bitsplit writes what `bitsplit convert` would make of such a file directly —
// the same tensors (names, types, dims, order) and metadata keys — with random plane codes
// and plausible fp16 scales instead of fitted ones, so large shapes take seconds, not the
// minutes of an f32 fit. Every tensor is generated in parallel from (seed, tensor, chunk),
// so the bytes do not depend on the thread count.
#include <tbb/parallel_for.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <future>
#include <map>
#include <memory>

#include "bitsplit/convert.h"
#include "bitsplit/gguf.h"
#include "bitsplit/quant.h"
#include "bitsplit/vram_plan.h"
#include "commands.h"
#include "output_path.h"
#include "option_checks.h"
#include "progress.h"

namespace bitsplit::cli {
namespace {

struct Shape {
  int64_t layers, embd, heads, kv_heads, ff, vocab, ctx;
};

const std::map<std::string, Shape>& shapes() {
  static const std::map<std::string, Shape> s = {
      {"tiny", {4, 256, 8, 2, 768, 4096, 2048}},
      {"1b", {16, 2048, 32, 8, 8192, 32000, 4096}},
      {"3b", {28, 3072, 24, 8, 8192, 32000, 4096}},
      {"8b", {32, 4096, 32, 8, 14336, 32000, 8192}},
      {"70b", {80, 8192, 64, 8, 28672, 32000, 4096}},  // Llama-2-70B's shape
  };
  return s;
}

struct SynthArgs {
  std::string shape = "1b", out, format = "f16";
  uint64_t seed = 1;
  int group = 64, residual = 8, draft_bits = 2, threads = 0;
  bool split_options_given = false;  // --group, --residual or --draft-bits on the command line
  bool sparse = false;               // the tensors' bytes a hole of zeros (for convert --dry-run)
};

// Fast deterministic uniform noise with the standard deviation of typical trained weights.
struct Noise {
  uint64_t state;
  float next(float stddev) {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    const float u = float(state >> 40) * 0x1p-24f;  // [0, 1)
    return (2.0f * u - 1.0f) * stddev * 1.7320508f;  // uniform with that standard deviation
  }
};

uint64_t mix64(uint64_t z) {  // splitmix64's finaliser
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

constexpr uint64_t kGolden = 0x9e3779b97f4a7c15ull;

// Uniform in [0, 1) from 24 bits of h starting at bit `shift`.
float unit(uint64_t h, int shift) { return float((h >> shift) & 0xffffff) * 0x1p-24f; }

// n random bytes; chunk c comes from its own stream keyed by (key, c), so threads do not matter.
void fill_random(uint8_t* p, size_t n, uint64_t key) {
  constexpr size_t kChunk = size_t{1} << 16;
  const size_t chunks = (n + kChunk - 1) / kChunk;
  tbb::parallel_for(size_t{0}, chunks, [&](size_t c) {
    uint64_t state = mix64(key ^ (c * kGolden));
    uint8_t* q = p + c * kChunk;
    const size_t len = std::min(kChunk, n - c * kChunk);
    size_t i = 0;
    for (; i + 8 <= len; i += 8) {
      const uint64_t v = mix64(state += kGolden);
      std::memcpy(q + i, &v, 8);
    }
    if (i < len) {
      const uint64_t v = mix64(state += kGolden);
      std::memcpy(q + i, &v, len - i);
    }
  });
}

// The source tensors a synthetic model has (the F16 file's tensors, in its order).
struct Plan {
  std::string name;
  std::vector<int64_t> dims;
  bool norm;
};

std::vector<Plan> source_plan(const Shape& s) {
  const int64_t hd = s.embd / s.heads;
  std::vector<Plan> plan = {{"token_embd.weight", {s.embd, s.vocab}, false}, {"output_norm.weight", {s.embd}, true},
                            {"output.weight", {s.embd, s.vocab}, false}};
  for (int64_t l = 0; l < s.layers; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    plan.insert(plan.end(), {{b + "attn_norm.weight", {s.embd}, true},
                             {b + "attn_q.weight", {s.embd, s.heads * hd}, false},
                             {b + "attn_k.weight", {s.embd, s.kv_heads * hd}, false},
                             {b + "attn_v.weight", {s.embd, s.kv_heads * hd}, false},
                             {b + "attn_output.weight", {s.heads * hd, s.embd}, false},
                             {b + "ffn_norm.weight", {s.embd}, true},
                             {b + "ffn_gate.weight", {s.embd, s.ff}, false},
                             {b + "ffn_up.weight", {s.embd, s.ff}, false},
                             {b + "ffn_down.weight", {s.ff, s.embd}, false}});
  }
  return plan;
}

void set_model_metadata(gguf::Metadata& m, const Shape& s, const std::string& shape_name) {
  using gguf::Value;
  m.set("general.architecture", Value::string("llama"));
  m.set("general.name", Value::string("bitsplit synthetic " + shape_name + " (random weights)"));
  m.set("llama.block_count", Value::u32(uint32_t(s.layers)));
  m.set("llama.embedding_length", Value::u32(uint32_t(s.embd)));
  m.set("llama.feed_forward_length", Value::u32(uint32_t(s.ff)));
  m.set("llama.attention.head_count", Value::u32(uint32_t(s.heads)));
  m.set("llama.attention.head_count_kv", Value::u32(uint32_t(s.kv_heads)));
  m.set("llama.context_length", Value::u32(uint32_t(s.ctx)));
  m.set("llama.rope.freq_base", Value::f32(10000.0f));
  m.set("llama.attention.layer_norm_rms_epsilon", Value::f32(1e-5f));
  // A SentencePiece vocabulary with byte fallback, so any prompt tokenizes.
  std::vector<std::string> tokens = {"<unk>", "<s>", "</s>"};
  std::vector<int32_t> types = {2, 3, 3};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    tokens.push_back(name);
    types.push_back(6);
  }
  while (int64_t(tokens.size()) < s.vocab) {
    tokens.push_back("\xe2\x96\x81t" + std::to_string(tokens.size()));
    types.push_back(1);
  }
  m.set("tokenizer.ggml.model", Value::string("llama"));
  m.set("tokenizer.ggml.tokens", Value::string_array(tokens));
  m.set("tokenizer.ggml.scores", Value::f32_array(std::vector<float>(tokens.size(), 0.0f)));
  m.set("tokenizer.ggml.token_type", Value::i32_array(types));
}

std::vector<uint8_t> ones_f32(int64_t n) {
  const std::vector<float> ones(static_cast<size_t>(n), 1.0f);
  std::vector<uint8_t> bytes(ones.size() * 4);
  std::memcpy(bytes.data(), ones.data(), bytes.size());
  return bytes;
}

// What one output tensor holds.
enum class Kind { kOnes, kNoiseF16, kNoiseF32, kQ8_0, kDraftCodes, kDraftScales, kDraftOffsets, kResidPacked };

struct OutTensor {
  Kind kind;
  size_t source;  // index into the source plan: the random streams are keyed by it
  int64_t in = 0, out = 0;
};

// The random model's per-group parameters, as a fit of uniform weights with standard
// deviation 1/sqrt(in) would give them: weights in [-a, a], a = sqrt(3/in); the draft's
// min/max fit has s = 2a/(2^b - 1), m = -a, so D spans the range with mean 0, and the
// residual of a rounding to D is within ±s/2: t = (s/2)/(2^(B-1) - 1). Each group's s is
// jittered by ±25% and m by ±5%, deterministically per (tensor, row, group).
struct PlaneParams {
  uint64_t key;
  int64_t in, groups;
  int draft_bits, residual_bits;

  float base_scale() const { return 2.0f * std::sqrt(3.0f / float(in)) / float((1 << draft_bits) - 1); }
  uint64_t hash(int64_t row, int64_t g) const { return mix64(key ^ uint64_t(row * groups + g) * kGolden); }
  float draft_scale(uint64_t h) const { return base_scale() * (0.75f + 0.5f * unit(h, 0)); }
  float draft_offset(uint64_t h) const {
    return -draft_scale(h) * float((1 << draft_bits) - 1) * 0.5f * (0.95f + 0.1f * unit(h, 24));
  }
  float resid_scale(uint64_t h) const { return draft_scale(h) * 0.5f / float((1 << (residual_bits - 1)) - 1); }
};

// [rows x groups] fp16 values f(h) per group.
template <typename F>
std::vector<uint8_t> group_halves(const PlaneParams& p, int64_t rows, F f) {
  std::vector<uint8_t> bytes(static_cast<size_t>(rows * p.groups) * 2);
  tbb::parallel_for(int64_t{0}, rows, [&](int64_t r) {
    for (int64_t g = 0; g < p.groups; ++g) {
      const uint16_t h = quant::fp32_to_fp16(f(p.hash(r, g)));
      std::memcpy(bytes.data() + 2 * (r * p.groups + g), &h, 2);
    }
  });
  return bytes;
}

// Q8_0 rows of `in` weights: d near amax/127 of uniform weights with stddev 1/sqrt(in), codes
// uniform in -127..127 (the quantiser never writes -128).
std::vector<uint8_t> random_q8_0(int64_t in, int64_t rows, uint64_t key) {
  using quant::BlockQ8_0;
  const int64_t row_blocks = in / BlockQ8_0::kWeights;
  std::vector<uint8_t> bytes(static_cast<size_t>(rows * row_blocks) * sizeof(BlockQ8_0));
  fill_random(bytes.data(), bytes.size(), key);
  const float d0 = std::sqrt(3.0f / float(in)) / 127.0f;
  tbb::parallel_for(int64_t{0}, rows, [&](int64_t r) {
    for (int64_t b = 0; b < row_blocks; ++b) {
      uint8_t* block = bytes.data() + size_t(r * row_blocks + b) * sizeof(BlockQ8_0);
      const uint16_t d = quant::fp32_to_fp16(d0 * (0.9f + 0.1f * unit(mix64(key ^ uint64_t(r * row_blocks + b)), 0)));
      std::memcpy(block, &d, 2);
      for (int k = 0; k < BlockQ8_0::kWeights; ++k)
        if (block[2 + k] == 0x80) block[2 + k] = 0x81;
    }
  });
  return bytes;
}

std::vector<uint8_t> random_f32(int64_t n, float stddev, uint64_t key) {
  std::vector<uint8_t> bytes(static_cast<size_t>(n) * 4);
  fill_random(bytes.data(), bytes.size(), key);
  tbb::parallel_for(int64_t{0}, n, [&](int64_t i) {
    uint32_t u;
    std::memcpy(&u, bytes.data() + 4 * i, 4);
    const float v = (2.0f * float(u >> 8) * 0x1p-24f - 1.0f) * stddev * 1.7320508f;
    std::memcpy(bytes.data() + 4 * i, &v, 4);
  });
  return bytes;
}

// Adds the output tensors to `w` and says what each holds in `out`: the source plan's tensors, in
// `bitsplit convert`'s order and types when bit-split. Returns the model's parameter count.
Result<int64_t> add_output_tensors(gguf::Writer& w, const std::vector<Plan>& plan, bool bitsplit,
                                   const SplitFormat& split_format, std::vector<OutTensor>& out) {
  using gguf::TensorType;
  int64_t params = 0;
  auto add = [&](const std::string& name, TensorType type, std::vector<int64_t> dims, OutTensor t) -> Status {
    BITSPLIT_RETURN_IF_ERROR(w.add_tensor_info(name, type, std::move(dims)));
    out.push_back(t);
    return Status::ok();
  };
  for (size_t i = 0; i < plan.size(); ++i) {
    const Plan& p = plan[i];
    int64_t n = 1;
    for (int64_t d : p.dims) n *= d;
    params += n;
    if (p.norm) {
      BITSPLIT_RETURN_IF_ERROR(add(p.name, TensorType::F32, p.dims, {Kind::kOnes, i}));
    } else if (!bitsplit) {
      BITSPLIT_RETURN_IF_ERROR(add(p.name, TensorType::F16, p.dims, {Kind::kNoiseF16, i}));
    } else if (is_split_projection(p.name)) {
      const int64_t in = p.dims[0], rows = p.dims[1];
      for (const SplitPlaneTensor& t : split_plane_tensors(split_base_name(p.name), in, rows, split_format)) {
        const Kind kind = t.plane == SplitPlane::kDraftCodes    ? Kind::kDraftCodes
                          : t.plane == SplitPlane::kDraftScales ? Kind::kDraftScales
                          : t.plane == SplitPlane::kDraftOffsets ? Kind::kDraftOffsets
                                                                 : Kind::kResidPacked;
        BITSPLIT_RETURN_IF_ERROR(add(t.name, t.type, {t.row, t.rows}, {kind, i, in, rows}));
      }
    } else if (p.name == "token_embd.weight" && p.dims[0] % quant::BlockQ8_0::kWeights == 0) {
      BITSPLIT_RETURN_IF_ERROR(add(p.name, TensorType::Q8_0, p.dims, {Kind::kQ8_0, i, p.dims[0], p.dims[1]}));
    } else {
      BITSPLIT_RETURN_IF_ERROR(add(p.name, TensorType::F32, p.dims, {Kind::kNoiseF32, i, p.dims[0]}));
    }
  }
  return params;
}

// The keys `bitsplit convert` adds, in its order; there is no source file to hash.
void set_split_metadata(gguf::Metadata& m, const SplitFormat& split_format, uint64_t seed) {
  using gguf::Value;
  write_split_format(split_format, m);
  m.set("bitsplit.quantizer", Value::string("none: random codes and scales (bitsplit synth --seed " +
                                            std::to_string(seed) + "), RANDOM WEIGHTS for timing only"));
  m.set("bitsplit.source_sha256", Value::string("none (bitsplit synth: no source file)"));
  m.set("bitsplit.source_types", Value::string("none (synthetic)"));
}

// F16 noise from one sequential stream, as it always was, so F16 files keep their bytes.
std::vector<uint8_t> noise_f16(const gguf::TensorInfo& info, uint64_t stream) {
  const int64_t n = info.n_elements();
  Noise noise{stream};
  const float stddev = 1.0f / std::sqrt(float(info.dims[0]));
  std::vector<uint8_t> bytes(static_cast<size_t>(n) * 2);
  for (int64_t k = 0; k < n; ++k) {
    const uint16_t h = quant::fp32_to_fp16(noise.next(stddev));
    std::memcpy(bytes.data() + 2 * k, &h, 2);
  }
  return bytes;
}

// Random codes and plausible scales of a residual plane, in the kernels' layout.
std::vector<uint8_t> random_resid_packed(const OutTensor& t, const PlaneParams& pp, uint64_t key, const SynthArgs& a) {
  std::vector<uint8_t> codes(size_t(t.out * quant::code_row_bytes(t.in, a.group, a.residual)));
  fill_random(codes.data(), codes.size(), mix64(key ^ 0x0e));
  const std::vector<uint8_t> scales = group_halves(pp, t.out, [&](uint64_t h) { return pp.resid_scale(h); });
  const quant::PackedShape shape = quant::packed_shape(t.out, t.in, a.group, a.residual, false);
  std::vector<uint8_t> bytes(size_t(shape.bytes()));
  quant::pack_tiles(shape, codes.data(), reinterpret_cast<const uint16_t*>(scales.data()), nullptr, bytes.data(), 0,
                    shape.tiles);
  return bytes;
}

// An output tensor's bytes, a pure function of (seed, tensor): safe to make ahead on another thread.
std::vector<uint8_t> tensor_bytes(const OutTensor& t, const gguf::TensorInfo& info, const SynthArgs& a) {
  const uint64_t key = mix64(a.seed * kGolden + t.source + 1);
  const PlaneParams pp{key, t.in, quant::groups_per_row(t.in, a.group), a.draft_bits, a.residual};
  switch (t.kind) {
    case Kind::kOnes: return ones_f32(info.n_elements());
    case Kind::kNoiseF16: return noise_f16(info, a.seed * kGolden + t.source + 1);
    case Kind::kNoiseF32: return random_f32(info.n_elements(), 1.0f / std::sqrt(float(t.in)), key);
    case Kind::kQ8_0: return random_q8_0(t.in, t.out, key);
    case Kind::kDraftCodes: {  // every byte is a valid set of packed codes at any width
      std::vector<uint8_t> bytes(info.nbytes);
      fill_random(bytes.data(), bytes.size(), mix64(key ^ 0xd0));
      return bytes;
    }
    case Kind::kResidPacked: return random_resid_packed(t, pp, key, a);
    case Kind::kDraftScales: return group_halves(pp, t.out, [&](uint64_t h) { return pp.draft_scale(h); });
    case Kind::kDraftOffsets: return group_halves(pp, t.out, [&](uint64_t h) { return pp.draft_offset(h); });
  }
  return {};
}

// Streams the tensors into a.out, each one's bytes made while the one before is written.
Status write_tensors(const gguf::Writer& w, const std::vector<OutTensor>& out, const SynthArgs& a) {
  const std::vector<gguf::TensorInfo> infos = w.tensor_infos();
  auto make = [&](size_t i) { return tensor_bytes(out[i], infos[i], a); };
  ProgressBar bar("synth");
  uint64_t bytes_done = 0;
  std::future<std::vector<uint8_t>> ahead;  // tensor i + 1, made while tensor i is written
  return w.write_file_streaming(a.out, [&](size_t i, const gguf::TensorInfo& info) -> Result<std::vector<uint8_t>> {
    std::vector<uint8_t> bytes = ahead.valid() ? ahead.get() : make(i);
    if (i + 1 < out.size()) ahead = std::async(std::launch::async, make, i + 1);
    bytes_done += info.nbytes;
    bar.update(double(i + 1), double(out.size()), double(bytes_done), info.name);
    return bytes;
  });
}

int synth(const SynthArgs& a) {
  const auto t0 = std::chrono::steady_clock::now();
  const bool bitsplit = a.format == "bitsplit";
  if (!bitsplit && a.split_options_given) {
    return report_error("--group, --residual and --draft-bits describe bit-split planes; add --format bitsplit "
                        "(or leave them out for an F16 model)");
  }
  if (Status st = check_output_path(a.out, {}, "-o"); !st) return report_error(st.message());
  const auto threads = limit_threads(a.threads);
  const Shape& s = shapes().at(a.shape);
  gguf::Writer w;
  set_model_metadata(w.metadata(), s, a.shape);
  const SplitFormat split_format{a.group, a.draft_bits, a.residual};
  if (bitsplit) w.set_alignment(kPackedAlignment);
  std::vector<OutTensor> out;
  auto params = add_output_tensors(w, source_plan(s), bitsplit, split_format, out);
  if (!params) return report_error(params.status().message());
  if (bitsplit) set_split_metadata(w.metadata(), split_format, a.seed);
  uint64_t total_bytes = 0;
  for (const auto& info : w.tensor_infos()) total_bytes += info.nbytes;
  if (Status st = a.sparse ? w.write_file_sparse(a.out) : write_tensors(w, out, a); !st) return report_error(st.message());
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::string format = "F16";
  if (bitsplit) {
    format = "bit-split (group " + std::to_string(a.group) + ", " + std::to_string(a.draft_bits) + "-bit draft, " +
             std::to_string(a.residual) + "-bit residual; random codes)";
  }
  std::fprintf(stderr, "wrote %s: synthetic '%s' llama, %.2f B parameters, %s, %s in %.1f s, RANDOM WEIGHTS (for "
               "timing only)%s\n", a.out.c_str(), a.shape.c_str(), double(*params) / 1e9, format.c_str(),
               format_bytes(total_bytes).c_str(), seconds,
               a.sparse ? "; --sparse: every weight reads as zero, the file takes almost no disk (for `convert "
                          "--dry-run`, not to run)" : "");
  return 0;
}

}  // namespace

void add_synth_command(CLI::App& app, int* exit_code) {
  auto a = std::make_shared<SynthArgs>();
  CLI::App* cmd = app.add_subcommand("synth", "Write a random-weight llama GGUF of a given shape (for timing only)");
  std::vector<std::string> names;
  for (const auto& [name, shape] : shapes()) names.push_back(name);
  cmd->add_option("--shape", a->shape, "Model shape")->capture_default_str()->check(CLI::IsMember(names));
  cmd->add_option("-o,--output", a->out, "Output .gguf")->required();
  cmd->add_option("--seed", a->seed, "Seed of the random weights")->capture_default_str()->check(seed_number());
  cmd->add_option("--format", a->format,
                  "f16: F16 projections (input for `bitsplit convert`); bitsplit: the bit-split planes `bitsplit "
                  "convert` would write, with random codes, directly (fast at any size)")
      ->capture_default_str()->check(CLI::IsMember({"f16", "bitsplit"}));
  auto* group = cmd->add_option("--group", a->group, "With --format bitsplit: weights per group")
                    ->capture_default_str()->check(CLI::IsMember({32, 64, 128}));
  auto* residual = cmd->add_option("--residual", a->residual, "With --format bitsplit: residual plane bits")
                       ->capture_default_str()->check(CLI::IsMember({6, 8}));
  auto* draft = cmd->add_option("--draft-bits", a->draft_bits, "With --format bitsplit: draft plane bits")
                    ->capture_default_str()->check(CLI::IsMember({2, 3, 4}));
  cmd->add_flag("--sparse", a->sparse,
                "Write the header only and leave the weights a hole of zeros (a file of full size on almost no disk): "
                "a shape for `bitsplit convert --dry-run` at sizes this machine cannot hold, not a model to run");
  cmd->add_option("-t,--threads", a->threads, "Worker threads (default: all cores)")->check(whole_in(1, 4096));
  cmd->callback([a, exit_code, group, residual, draft] {
    a->split_options_given = group->count() + residual->count() + draft->count() > 0;
    *exit_code = synth(*a);
  });
}

}  // namespace bitsplit::cli
