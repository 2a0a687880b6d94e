// Hugging Face folders as a source (engine/format/hf_folder.h): the repository's GGUF fixtures are
// written here as transformers-layout folders (HF tensor names, q/k rows in transformers' order,
// gemma's norms as w rather than 1 + w, two shards and an index, config.json) and opened again:
// every tensor equals the GGUF's, the model's logits equal the GGUF model's (which
// tests/engine/model/hf_golden_test.cpp holds against transformers), and converting the folder
// gives the same bit-split file as converting the GGUF. Also the RoPE row order against its
// definition, and config.json errors.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "bitsplit/convert.h"
#include "bitsplit/hf_folder.h"
#include "bitsplit/model.h"
#include "bitsplit/weights.h"
#include "safetensors_testing.h"
#include "test_paths.h"

namespace bitsplit {
namespace {

using nlohmann::json;

// GGUF layer roles -> transformers' (after "model.layers.N.").
std::string hf_layer_name(const std::string& rest, bool gemma, bool mixtral, bool qwen_moe) {
  static const std::map<std::string, std::string> kCommon = {
      {"attn_norm.weight", "input_layernorm.weight"},      {"attn_q.weight", "self_attn.q_proj.weight"},
      {"attn_k.weight", "self_attn.k_proj.weight"},        {"attn_v.weight", "self_attn.v_proj.weight"},
      {"attn_q.bias", "self_attn.q_proj.bias"},            {"attn_k.bias", "self_attn.k_proj.bias"},
      {"attn_v.bias", "self_attn.v_proj.bias"},            {"attn_output.weight", "self_attn.o_proj.weight"},
      {"attn_q_norm.weight", "self_attn.q_norm.weight"},   {"attn_k_norm.weight", "self_attn.k_norm.weight"},
      {"ffn_gate.weight", "mlp.gate_proj.weight"},         {"ffn_up.weight", "mlp.up_proj.weight"},
      {"ffn_down.weight", "mlp.down_proj.weight"},
      {"ffn_gate_inp.weight", "mlp.gate.weight"},
      {"ffn_gate_shexp.weight", "mlp.shared_expert.gate_proj.weight"},
      {"ffn_up_shexp.weight", "mlp.shared_expert.up_proj.weight"},
      {"ffn_down_shexp.weight", "mlp.shared_expert.down_proj.weight"},
      {"ffn_gate_inp_shexp.weight", "mlp.shared_expert_gate.weight"}};
  if (gemma && rest == "post_attention_norm.weight") return "post_attention_layernorm.weight";
  if (gemma && rest == "ffn_norm.weight") return "pre_feedforward_layernorm.weight";
  if (gemma && rest == "post_ffw_norm.weight") return "post_feedforward_layernorm.weight";
  if (!gemma && rest == "ffn_norm.weight") return "post_attention_layernorm.weight";
  if (mixtral && rest == "ffn_gate_inp.weight") return "block_sparse_moe.gate.weight";
  // Per-expert views: ffn_gate.E.weight.
  for (const auto& [kind, w, proj] : {std::tuple{"ffn_gate.", "w1", "gate_proj"}, {"ffn_down.", "w2", "down_proj"}, {"ffn_up.", "w3", "up_proj"}}) {
    if (rest.starts_with(kind) && rest != std::string(kind) + "weight") {
      const std::string e = rest.substr(std::strlen(kind), rest.size() - std::strlen(kind) - 7);
      if (mixtral) return "block_sparse_moe.experts." + e + "." + w + ".weight";
      if (qwen_moe) return "mlp.experts." + e + "." + proj + ".weight";
    }
  }
  return kCommon.at(rest);
}

// Transformers' q/k row order from llama.cpp's: row h·d + s·d/2 + i comes from row h·d + 2i + s.
std::vector<float> unpermute(const std::vector<float>& w, int64_t rows, int64_t cols, int64_t heads) {
  const int64_t d = rows / heads;
  std::vector<float> out(w.size());
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t i = 0; i < d / 2; ++i)
      for (int64_t s = 0; s < 2; ++s)
        std::copy_n(w.data() + (h * d + 2 * i + s) * cols, cols, out.data() + (h * d + s * (d / 2) + i) * cols);
  return out;
}

json hf_config(const WeightSource& g) {
  const gguf::Metadata& m = g.metadata();
  const std::string arch = *m.get_string("general.architecture");
  const std::string p = arch + ".";
  auto i = [&](const std::string& k) { return *m.get_int(p + k); };
  json c;
  const bool experts = m.contains(p + "expert_count");
  c["architectures"] = {arch == "llama" ? (experts ? "MixtralForCausalLM" : "LlamaForCausalLM")
                        : arch == "gemma2" ? "Gemma2ForCausalLM" : arch == "qwen2moe" ? "Qwen2MoeForCausalLM" : "Qwen3MoeForCausalLM"};
  c["hidden_size"] = i("embedding_length");
  c["num_hidden_layers"] = i("block_count");
  c["intermediate_size"] = i("feed_forward_length");
  c["num_attention_heads"] = i("attention.head_count");
  c["num_key_value_heads"] = *m.get_int_or(p + "attention.head_count_kv", i("attention.head_count"));
  c["max_position_embeddings"] = *m.get_int_or(p + "context_length", 2048);
  c["rms_norm_eps"] = *m.get_float(p + "attention.layer_norm_rms_epsilon");
  c["rope_theta"] = *m.get_float_or(p + "rope.freq_base", 10000.0);
  if (m.contains(p + "attention.key_length")) c["head_dim"] = i("attention.key_length");
  c["tie_word_embeddings"] = g.find_tensor("output.weight") == nullptr;
  c["hidden_act"] = arch == "gemma2" ? "gelu_pytorch_tanh" : "silu";
  if (arch == "gemma2") {
    c["sliding_window"] = i("attention.sliding_window");
    for (const char* k : {"attn_logit_softcapping", "final_logit_softcapping"}) {
      if (m.contains(p + k)) c[k] = *m.get_float(p + k);
    }
  }
  if (experts) {
    c[arch == "llama" ? "num_local_experts" : "num_experts"] = i("expert_count");
    c["num_experts_per_tok"] = i("expert_used_count");
    if (arch != "llama") c["moe_intermediate_size"] = i("expert_feed_forward_length");
    if (m.contains(p + "expert_shared_feed_forward_length")) c["shared_expert_intermediate_size"] = i("expert_shared_feed_forward_length");
    if (m.contains(p + "expert_weights_norm")) c["norm_topk_prob"] = *m.get_bool_or(p + "expert_weights_norm", false);
  }
  return c;
}

// Writes `g` as a transformers-layout folder of two F32 shards with an index.
void write_hf_folder(const WeightSource& g, const std::string& dir) {
  const json config = hf_config(g);
  const std::string arch = *g.metadata().get_string("general.architecture");
  const bool gemma = arch.starts_with("gemma"), mixtral = config["architectures"][0] == "MixtralForCausalLM";
  const bool permute = arch == "llama";
  std::vector<testing::StTensor> shards[2];
  json index = {{"metadata", json::object()}, {"weight_map", json::object()}};
  size_t n = 0;
  for (const auto& t : g.tensors()) {
    std::string name;
    if (t.name == "token_embd.weight") name = "model.embed_tokens.weight";
    else if (t.name == "output_norm.weight") name = "model.norm.weight";
    else if (t.name == "output.weight") name = "lm_head.weight";
    else {
      const size_t dot = t.name.find('.', 4);
      name = "model.layers." + t.name.substr(4, dot - 4) + "." + hf_layer_name(t.name.substr(dot + 1), gemma, mixtral, !mixtral && arch.ends_with("moe"));
    }
    std::vector<float> v = *g.load_f32(t);
    if (gemma && t.name.ends_with("norm.weight")) for (float& x : v) x -= 1.0f;
    const bool q = t.name.ends_with("attn_q.weight"), k = t.name.ends_with("attn_k.weight");
    if (permute && (q || k)) v = unpermute(v, t.dims[1], t.dims[0], config[q ? "num_attention_heads" : "num_key_value_heads"].get<int64_t>());
    std::vector<int64_t> shape(t.dims.rbegin(), t.dims.rend());
    if (t.name.ends_with("ffn_gate_inp_shexp.weight")) shape = {1, t.dims[0]};
    const int s = n++ % 2;
    index["weight_map"][name] = "model-0000" + std::to_string(s + 1) + "-of-00002.safetensors";
    shards[s].push_back({name, "F32", shape, testing::f32_bytes(v)});
  }
  for (int s = 0; s < 2; ++s) {
    testing::write_bytes(dir + "/model-0000" + std::to_string(s + 1) + "-of-00002.safetensors", testing::safetensors_bytes(shards[s]));
  }
  testing::write_text(dir + "/model.safetensors.index.json", index.dump());
  testing::write_text(dir + "/config.json", config.dump(2));
}

std::vector<float> logits(const WeightSource& source, const std::vector<int32_t>& prompt) {
  auto model = Model::load(source);
  EXPECT_TRUE(model.is_ok()) << model.status().message();
  if (!model) return {};
  KvCache cache(model->config(), int64_t(prompt.size()));
  auto out = forward_pass(*model, cache, Batch::causal(prompt, 0, /*all_logits=*/true));
  EXPECT_TRUE(out.is_ok()) << out.status().message();
  return out ? *out : std::vector<float>{};
}

class HfFolder : public ::testing::TestWithParam<std::string> {
 protected:
  testing::TempDir dir{"hf-folder"};
};

// Every tensor of the folder equals the GGUF's (exactly; gemma's norms within the rounding of
// (w - 1) + 1), and the logits of a prompt agree the same way.
TEST_P(HfFolder, FolderMatchesTheGguf) {
  const std::string gguf_path = testing::source_dir() + "/tests/models/" + GetParam();
  BITSPLIT_REQUIRE_FILE(gguf_path);
  auto g = open_weights(gguf_path);
  ASSERT_TRUE(g.is_ok()) << g.status().message();
  write_hf_folder(**g, dir.path().string());
  auto f = open_weights(dir.path().string());
  ASSERT_TRUE(f.is_ok()) << f.status().message();
  const bool gemma = GetParam().starts_with("gemma");
  for (const auto& t : (*g)->tensors()) {
    SCOPED_TRACE(t.name);
    const gguf::TensorInfo* ft = (*f)->find_tensor(t.name);
    ASSERT_NE(ft, nullptr);
    EXPECT_EQ(ft->dims, t.dims);
    const auto a = *(*g)->load_f32(t), b = *(*f)->load_f32(*ft);
    if (gemma && t.name.ends_with("norm.weight")) {
      for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 2e-7 * std::max(1.0f, std::fabs(a[i])));  // one rounding
    } else {
      EXPECT_EQ(a, b);
    }
  }
  const std::vector<int32_t> prompt = {1, 5, 17, 300, 9, 44, 2, 71};
  const auto la = logits(**g, prompt), lb = logits(**f, prompt);
  ASSERT_EQ(la.size(), lb.size());
  ASSERT_FALSE(la.empty());
  double worst = 0;
  for (size_t i = 0; i < la.size(); ++i) worst = std::max(worst, double(std::fabs(la[i] - lb[i])) / std::max(1.0, double(std::fabs(la[i]))));
  if (gemma) EXPECT_LE(worst, 1e-5);  // norms one rounding apart (above), through a few layers
  else EXPECT_EQ(la, lb);
}

// Converting the folder and converting the GGUF give the same bit-split tensors.
TEST_P(HfFolder, ConvertsToTheSameBitSplitFile) {
  if (GetParam().starts_with("gemma")) GTEST_SKIP() << "gemma's norms differ by one rounding (FolderMatchesTheGguf)";
  const std::string gguf_path = testing::source_dir() + "/tests/models/" + GetParam();
  BITSPLIT_REQUIRE_FILE(gguf_path);
  auto g = open_weights(gguf_path);
  ASSERT_TRUE(g.is_ok()) << g.status().message();
  write_hf_folder(**g, dir.path().string());
  auto f = open_weights(dir.path().string());
  ASSERT_TRUE(f.is_ok()) << f.status().message();
  ConvertOptions options;
  const std::string out_g = dir.file("from-gguf.gguf"), out_f = dir.file("from-folder.gguf");
  ASSERT_TRUE(convert_model(**g, out_g, options, nullptr, nullptr).is_ok());
  ASSERT_TRUE(convert_model(**f, out_f, options, nullptr, nullptr).is_ok());
  auto a = gguf::File::open(out_g), b = gguf::File::open(out_f);
  ASSERT_TRUE(a.is_ok() && b.is_ok());
  for (const auto& t : a->tensors()) {
    SCOPED_TRACE(t.name);
    const gguf::TensorInfo* u = b->find_tensor(t.name);
    ASSERT_NE(u, nullptr);
    const auto x = a->tensor_bytes(t), y = b->tensor_bytes(*u);
    EXPECT_TRUE(std::equal(x.begin(), x.end(), y.begin(), y.end()));
  }
  EXPECT_EQ(a->tensors().size(), b->tensors().size());
}

INSTANTIATE_TEST_SUITE_P(Fixtures, HfFolder,
                         ::testing::Values("bible-base.gguf", "mixtral-tiny.gguf", "gemma2-tiny.gguf", "qwen2moe-tiny.gguf"),
                         [](const auto& info) {
                           std::string s = info.param.substr(0, info.param.find('.'));
                           std::replace(s.begin(), s.end(), '-', '_');
                           return s;
                         });

// Row h·d + 2i + s of the result is row h·d + s·d/2 + i: each head's halves interleaved.
TEST(HfFolderRope, PermutationInterleavesEachHeadsHalves) {
  const int64_t heads = 3, d = 6, cols = 2, rows = heads * d;
  std::vector<float> w(size_t(rows * cols));
  for (size_t i = 0; i < w.size(); ++i) w[i] = float(i);
  const auto p = permute_rope_rows(w, rows, cols, heads);
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t i = 0; i < d / 2; ++i)
      for (int64_t s = 0; s < 2; ++s)
        for (int64_t c = 0; c < cols; ++c)
          EXPECT_EQ(p[size_t((h * d + 2 * i + s) * cols + c)], w[size_t((h * d + s * (d / 2) + i) * cols + c)]);
  EXPECT_EQ(unpermute(p, rows, cols, heads), w);
}

class HfFolderErrors : public ::testing::Test {
 protected:
  std::string open_error(const json& config) {
    testing::write_text(dir.file("config.json"), config.dump());
    testing::write_bytes(dir.file("model.safetensors"),
                         testing::safetensors_bytes({{"model.embed_tokens.weight", "F32", {2, 4}, testing::f32_bytes({1, 2, 3, 4, 5, 6, 7, 8})}}));
    auto f = open_weights(dir.path().string());
    return f ? "" : f.status().message();
  }
  json llama() {
    return {{"architectures", {"LlamaForCausalLM"}}, {"hidden_size", 4}, {"num_hidden_layers", 1}, {"intermediate_size", 8},
            {"num_attention_heads", 2}, {"tie_word_embeddings", true}};
  }
  testing::TempDir dir{"hf-folder-errors"};
};

TEST_F(HfFolderErrors, ConfigWithoutArchitecturesNamesTheProblem) {
  json c = llama();
  c.erase("architectures");
  c["model_type"] = "llama";
  const std::string e = open_error(c);
  EXPECT_NE(e.find("config.json: has no \"architectures\" list (model_type 'llama')"), std::string::npos) << e;
}

TEST_F(HfFolderErrors, UnknownArchitectureIsNamed) {
  json c = llama();
  c["architectures"] = {"FalconForCausalLM"};
  const std::string e = open_error(c);
  EXPECT_NE(e.find("architecture 'FalconForCausalLM' is not supported (supported: LlamaForCausalLM"), std::string::npos) << e;
}

TEST_F(HfFolderErrors, UnsupportedFieldValuesAreNamed) {
  json c = llama();
  c["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
  EXPECT_NE(open_error(c).find("\"rope_scaling\" type 'yarn' is not supported"), std::string::npos);
  c = llama();
  c["hidden_act"] = "gelu";
  EXPECT_NE(open_error(c).find("\"hidden_act\" is 'gelu'"), std::string::npos);
  c = llama();
  c["hidden_size"] = "four";
  EXPECT_NE(open_error(c).find("\"hidden_size\" is \"four\", not an integer"), std::string::npos);
}

TEST_F(HfFolderErrors, TensorWithoutARoleIsNamed) {
  testing::write_text(dir.file("config.json"), llama().dump());
  testing::write_bytes(dir.file("model.safetensors"),
                       testing::safetensors_bytes({{"model.layers.0.mystery.weight", "F32", {1}, testing::f32_bytes({1})}}));
  auto f = open_weights(dir.path().string());
  ASSERT_FALSE(f.is_ok());
  EXPECT_NE(f.status().message().find("tensor 'model.layers.0.mystery.weight' has no place in a LlamaForCausalLM model"),
            std::string::npos) << f.status().message();
}

TEST_F(HfFolderErrors, UntiedModelWithoutAHeadIsAnError) {
  json c = llama();
  c["tie_word_embeddings"] = false;
  EXPECT_NE(open_error(c).find("tie_word_embeddings is false, but no shard holds lm_head.weight"), std::string::npos);
}

}  // namespace
}  // namespace bitsplit
