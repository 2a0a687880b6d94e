// `bitsplit synth`: a random-weight llama GGUF of a given shape, for timing at sizes we
// have no trained model for. Its text is meaningless; only its costs are real.
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>

#include "bitsplit/gguf.h"
#include "bitsplit/quant.h"
#include "commands.h"
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
  };
  return s;
}

struct SynthArgs {
  std::string shape = "1b", out;
  uint64_t seed = 1;
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

int synth(const SynthArgs& a) {
  const Shape& s = shapes().at(a.shape);
  using gguf::Value;
  gguf::Writer w;
  auto& m = w.metadata();
  m.set("general.architecture", Value::string("llama"));
  m.set("general.name", Value::string("bitsplit synthetic " + a.shape + " (random weights)"));
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

  const int64_t hd = s.embd / s.heads;
  struct Plan {
    std::string name;
    std::vector<int64_t> dims;
    bool norm;
  };
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
  for (const auto& p : plan) {
    if (Status st = w.add_tensor_info(p.name, p.norm ? gguf::TensorType::F32 : gguf::TensorType::F16, p.dims); !st)
      return report_error(st.message());
  }
  ProgressBar bar("synth");
  Status st = w.write_file_streaming(a.out, [&](size_t i, const gguf::TensorInfo& info) -> Result<std::vector<uint8_t>> {
    bar.update(double(i + 1), double(plan.size()), -1, info.name);
    const int64_t n = info.n_elements();
    if (plan[i].norm) {
      std::vector<float> ones(size_t(n), 1.0f);
      std::vector<uint8_t> bytes(ones.size() * 4);
      std::memcpy(bytes.data(), ones.data(), bytes.size());
      return bytes;
    }
    Noise noise{a.seed * 0x9e3779b97f4a7c15ull + i + 1};
    const float stddev = 1.0f / std::sqrt(float(info.dims[0]));
    std::vector<uint8_t> bytes(size_t(n) * 2);
    for (int64_t k = 0; k < n; ++k) {
      const uint16_t h = quant::fp32_to_fp16(noise.next(stddev));
      std::memcpy(bytes.data() + 2 * k, &h, 2);
    }
    return bytes;
  });
  if (!st) return report_error(st.message());
  int64_t params = 0;
  for (const auto& info : w.tensor_infos()) params += info.n_elements();
  std::fprintf(stderr, "wrote %s: synthetic '%s' llama, %.2f B parameters, F16, RANDOM WEIGHTS (for timing only)\n",
               a.out.c_str(), a.shape.c_str(), double(params) / 1e9);
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
  cmd->add_option("--seed", a->seed, "Seed of the random weights")->capture_default_str();
  cmd->callback([a, exit_code] { *exit_code = synth(*a); });
}

}  // namespace bitsplit::cli
