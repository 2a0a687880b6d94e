// Seed inputs for the fuzz harnesses (seeds.h): built with the GGUF writer from the tiny test
// models, so every seed is a few KB and reaches deep into its parser.
#include "seeds.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <sstream>

#include "../engine/format/gguf_testing.h"
#include "../engine/format/safetensors_testing.h"
#include "bitsplit/gguf.h"
#include "bitsplit/quant.h"
#include "bitsplit/split_format.h"
#include "bitsplit/split_gguf.h"
#include "harness_tokenizer.h"

namespace bitsplit::fuzz {
namespace {

using gguf::TensorType;
using gguf::Value;

std::vector<uint8_t> to_vector(const std::string& s) { return {s.begin(), s.end()}; }

// One selector byte, then `rest`.
std::vector<uint8_t> prefixed(uint8_t first, std::string_view rest) {
  std::vector<uint8_t> b;
  b.reserve(rest.size() + 1);
  b.push_back(first);
  for (char c : rest) b.push_back(uint8_t(c));
  return b;
}

testing::TinyModelSpec tiny_spec(const std::string& arch, TensorType type, bool tied) {
  testing::TinyModelSpec s;
  s.arch = arch;
  s.layers = 1;
  s.embd = 32;
  s.heads = 4;
  s.kv_heads = 2;
  s.ff = 32;
  s.vocab = 16;
  s.ctx = 16;
  s.type = type;
  s.tied_output = tied;
  return s;
}

std::vector<uint8_t> random_bytes(size_t n, std::mt19937& rng) {
  std::vector<uint8_t> b(n);
  for (auto& x : b) x = uint8_t(rng());
  return b;
}

// The tiny model with every projection replaced by its bit-split planes (random codes,
// small F16 scales): the layout convert writes.
std::vector<uint8_t> tiny_split_model(int group, int draft_bits, int residual_bits) {
  const auto original = testing::tiny_model_bytes(tiny_spec("llama", TensorType::F32, false));
  auto parsed = gguf::File::parse(gguf::storage_from_bytes(original), "tiny");
  BITSPLIT_CHECK(parsed.is_ok(), parsed.status().message());
  gguf::Writer w;
  for (const auto& [k, v] : parsed->metadata().entries()) w.metadata().set(k, v);
  const SplitFormat format{group, draft_bits, residual_bits};
  write_split_format(format, w.metadata());
  w.set_alignment(kPackedAlignment);
  std::mt19937 rng(7);
  for (const auto& t : parsed->tensors()) {
    if (!is_split_projection(t.name)) {
      const auto b = parsed->tensor_bytes(t);
      BITSPLIT_CHECK(w.add_tensor(t.name, t.type, t.dims, {b.begin(), b.end()}).is_ok());
      continue;
    }
    const std::string base = split_base_name(t.name);
    const int64_t in = t.dims[0], out = t.dims[1];
    const uint16_t scale = quant::fp32_to_fp16(0.01f);
    for (const auto& plane : split_plane_tensors(base, in, out, format)) {
      std::vector<uint8_t> bytes;
      if (plane.plane == SplitPlane::kResidPacked) {  // random codes, the scales below, packed
        const quant::PackedShape shape = quant::packed_shape(out, in, group, residual_bits, false);
        const std::vector<uint8_t> codes = random_bytes(size_t(out * quant::code_row_bytes(in, group, residual_bits)), rng);
        const std::vector<uint16_t> scales(size_t(out * shape.groups), scale);
        bytes.resize(size_t(shape.bytes()));
        quant::pack_tiles(shape, codes.data(), scales.data(), nullptr, bytes.data(), 0, shape.tiles);
      } else if (plane.type == TensorType::I8) {
        bytes = random_bytes(size_t(plane.row * plane.rows), rng);
      } else {
        bytes.resize(size_t(plane.row * plane.rows) * 2);
        for (size_t i = 0; i < bytes.size(); i += 2) std::memcpy(bytes.data() + i, &scale, 2);
      }
      BITSPLIT_CHECK(w.add_tensor(plane.name, plane.type, {plane.row, plane.rows}, std::move(bytes)).is_ok());
    }
  }
  return w.to_bytes();
}

std::vector<uint8_t> f32_bytes(const std::vector<float>& v) {
  std::vector<uint8_t> b(v.size() * 4);
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

// A delta against the tiny model: sign planes for two projections, a full tensor.
std::vector<uint8_t> tiny_delta(bool per_row) {
  gguf::Writer w;
  auto& m = w.metadata();
  m.set("general.type", Value::string("bitsplit.delta"));
  m.set("general.name", Value::string("tiny-variant"));
  m.set("bitsplit.delta.format_version", Value::u32(1));
  m.set("bitsplit.delta.alpha", Value::string(per_row ? "row" : "matrix"));
  m.set("bitsplit.delta.base_sha256", Value::string(std::string(64, 'a')));
  m.set("bitsplit.delta.finetuned_sha256", Value::string(std::string(64, 'b')));
  std::mt19937 rng(3);
  for (const auto& [weight, in, out] : {std::tuple{"blk.0.attn_q", 32, 32}, std::tuple{"blk.0.ffn_down", 32, 32}}) {
    const int64_t row_bytes = (in + 7) / 8;
    BITSPLIT_CHECK(w.add_tensor(std::string(weight) + ".delta_signs", TensorType::I8, {row_bytes, out},
                                random_bytes(size_t(row_bytes * out), rng)).is_ok());
    const int64_t n_alpha = per_row ? out : 1;
    BITSPLIT_CHECK(w.add_tensor(std::string(weight) + ".delta_alpha", TensorType::F32, {n_alpha},
                                f32_bytes(std::vector<float>(size_t(n_alpha), 0.02f))).is_ok());
  }
  BITSPLIT_CHECK(w.add_tensor("output_norm.weight", TensorType::F32, {32}, f32_bytes(std::vector<float>(32, 1.0f))).is_ok());
  return w.to_bytes();
}

// A LoRA adapter of the tiny model: q (F32, rank 2), the token embedding in llama.cpp's flipped
// convention (F16, rank 2) and the head (F32, rank 1).
std::vector<uint8_t> tiny_lora(double alpha) {
  gguf::Writer w;
  auto& m = w.metadata();
  m.set("general.architecture", Value::string("llama"));
  m.set("general.type", Value::string("adapter"));
  m.set("adapter.type", Value::string("lora"));
  m.set("adapter.lora.alpha", Value::f32(float(alpha)));
  std::mt19937 rng(5);
  std::normal_distribution<float> n(0.0f, 0.1f);
  auto values = [&](size_t count) {
    std::vector<float> v(count);
    for (float& x : v) x = n(rng);
    return v;
  };
  auto f16 = [](const std::vector<float>& v) {
    std::vector<uint8_t> b(v.size() * 2);
    for (size_t i = 0; i < v.size(); ++i) {
      const uint16_t h = quant::fp32_to_fp16(v[i]);
      std::memcpy(b.data() + 2 * i, &h, 2);
    }
    return b;
  };
  BITSPLIT_CHECK(w.add_tensor("blk.0.attn_q.weight.lora_a", TensorType::F32, {32, 2}, f32_bytes(values(64))).is_ok());
  BITSPLIT_CHECK(w.add_tensor("blk.0.attn_q.weight.lora_b", TensorType::F32, {2, 32}, f32_bytes(values(64))).is_ok());
  BITSPLIT_CHECK(w.add_tensor("token_embd.weight.lora_a", TensorType::F16, {2, 48}, f16(values(96))).is_ok());
  BITSPLIT_CHECK(w.add_tensor("token_embd.weight.lora_b", TensorType::F16, {2, 32}, f16(values(64))).is_ok());
  BITSPLIT_CHECK(w.add_tensor("output.weight.lora_a", TensorType::F32, {32, 1}, f32_bytes(values(32))).is_ok());
  BITSPLIT_CHECK(w.add_tensor("output.weight.lora_b", TensorType::F32, {1, 48}, f32_bytes(values(48))).is_ok());
  return w.to_bytes();
}

std::vector<uint8_t> tiny_imatrix() {
  gguf::Writer w;
  w.metadata().set("general.type", Value::string("bitsplit.imatrix"));
  w.metadata().set("imatrix.tokens", Value::u64(100));
  w.metadata().set("imatrix.text", Value::string("In the beginning"));
  for (const char* name : {"blk.0.attn_q.weight", "blk.0.ffn_up.weight"}) {
    std::vector<float> v(32);
    for (size_t i = 0; i < v.size(); ++i) v[i] = float(i) * 0.5f;
    BITSPLIT_CHECK(w.add_tensor(name, TensorType::F32, {32}, f32_bytes(v)).is_ok());
  }
  // imatrix --covariance: one 8 x 8 matrix and a weight that shares it.
  std::vector<float> c(64, 0.125f);
  for (int i = 0; i < 8; ++i) c[size_t(i * 9)] = 1.0f + float(i);
  BITSPLIT_CHECK(w.add_tensor("blk.0.attn_k.weight.cov", TensorType::F32, {8, 8}, f32_bytes(c)).is_ok());
  w.metadata().set("imatrix.same_input.blk.0.attn_v.weight", Value::string("blk.0.attn_k.weight"));
  return w.to_bytes();
}

// Every value type (nested arrays too) and small tensors of the block types the reader decodes.
std::vector<uint8_t> every_type_gguf() {
  gguf::Writer w;
  auto& m = w.metadata();
  m.set("u8", {gguf::ValueType::kUint8, uint64_t{200}});
  m.set("i8", {gguf::ValueType::kInt8, int64_t{-100}});
  m.set("u16", {gguf::ValueType::kUint16, uint64_t{60000}});
  m.set("i16", {gguf::ValueType::kInt16, int64_t{-30000}});
  m.set("u32", Value::u32(4000000000u));
  m.set("i32", Value::i32(-2000000000));
  m.set("u64", Value::u64(~uint64_t{0}));
  m.set("i64", {gguf::ValueType::kInt64, int64_t{-1}});
  m.set("f32", Value::f32(1.5f));
  m.set("f64", {gguf::ValueType::kFloat64, 2.25});
  m.set("bool", Value::boolean(true));
  m.set("string", Value::string("text"));
  m.set("strings", Value::string_array({"a", "bc", ""}));
  m.set("floats", Value::f32_array({1, 2, 3}));
  m.set("ints", Value::i32_array({-1, 0, 1}));
  m.set("nested", Value::array(gguf::ValueType::kArray, {Value::i32_array({1}), Value::i32_array({2, 3})}));
  m.set("general.alignment", Value::u32(64));
  w.set_alignment(64);
  std::mt19937 rng(5);
  const std::pair<TensorType, int64_t> types[] = {
      {TensorType::F32, 1},   {TensorType::F16, 1},   {TensorType::BF16, 1},  {TensorType::I8, 1},
      {TensorType::Q4_0, 32}, {TensorType::Q4_1, 32}, {TensorType::Q5_0, 32}, {TensorType::Q5_1, 32},
      {TensorType::Q8_0, 32}, {TensorType::Q2_K, 256}, {TensorType::Q3_K, 256}, {TensorType::Q4_K, 256},
      {TensorType::Q5_K, 256}, {TensorType::Q6_K, 256}, {TensorType::IQ4_NL, 32}};
  for (const auto& [type, block] : types) {
    const std::vector<int64_t> dims = {block == 1 ? 8 : block, 2};
    const uint64_t n = *gguf::tensor_nbytes(uint32_t(type), dims);
    std::vector<uint8_t> bytes = random_bytes(n, rng);
    // Half-precision scales of random bits may be NaN or huge; that is fine for a parser.
    BITSPLIT_CHECK(w.add_tensor("t." + gguf::tensor_type_name(type), type, dims, std::move(bytes)).is_ok());
  }
  return w.to_bytes();
}

std::vector<uint8_t> metadata_gguf(const gguf::Metadata& metadata) {
  gguf::Writer w;
  for (const auto& [k, v] : metadata.entries()) w.metadata().set(k, v);
  return w.to_bytes();
}

// A vocabulary GGUF cut to its first `keep` tokens plus its special ones (ids renumbered, merges
// kept where both parts and the result survive): a seed of a few KB instead of a few MB.
std::vector<uint8_t> shrink_vocabulary(const gguf::File& f, size_t keep) {
  const gguf::Metadata& m = f.metadata();
  auto tokens = m.get_string_array("tokenizer.ggml.tokens");
  if (!tokens) return {};
  auto types = m.get_int_array("tokenizer.ggml.token_type");
  auto scores = m.get_float_array("tokenizer.ggml.scores");
  const char* id_keys[] = {"tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id", "tokenizer.ggml.unknown_token_id",
                           "tokenizer.ggml.padding_token_id"};
  std::vector<size_t> kept;
  std::set<size_t> chosen;
  auto take = [&](size_t i) {
    if (i < tokens->size() && chosen.insert(i).second) kept.push_back(i);
  };
  for (size_t i = 0; i < std::min(keep, tokens->size()); ++i) take(i);
  size_t specials = 0;
  for (size_t i = keep; types && i < types->size() && specials < 64; ++i) {
    if ((*types)[i] != 1) take(i), ++specials;
  }
  for (const char* key : id_keys) {
    if (auto id = m.get_int(key); id && *id >= 0) take(size_t(*id));
  }
  std::sort(kept.begin(), kept.end());
  std::map<size_t, uint32_t> renumber;
  std::vector<std::string> new_tokens;
  std::vector<float> new_scores;
  std::vector<int32_t> new_types;
  std::set<std::string> texts;
  for (size_t i : kept) {
    renumber[i] = uint32_t(new_tokens.size());
    new_tokens.push_back((*tokens)[i]);
    texts.insert((*tokens)[i]);
    if (scores && scores->size() == tokens->size()) new_scores.push_back((*scores)[i]);
    if (types && types->size() == tokens->size()) new_types.push_back(int32_t((*types)[i]));
  }
  gguf::Writer w;
  for (const auto& entry : m.entries()) {
    const std::string& k = entry.first;
    const Value& v = entry.second;
    if (!k.starts_with("tokenizer.ggml.")) continue;
    if (k == "tokenizer.ggml.tokens") {
      w.metadata().set(k, Value::string_array(new_tokens));
    } else if (k == "tokenizer.ggml.scores") {
      if (!new_scores.empty()) w.metadata().set(k, Value::f32_array(new_scores));
    } else if (k == "tokenizer.ggml.token_type") {
      if (!new_types.empty()) w.metadata().set(k, Value::i32_array(new_types));
    } else if (k == "tokenizer.ggml.merges") {
      auto merges = m.get_string_array(k);
      if (!merges) continue;
      std::vector<std::string> kept_merges;
      for (const std::string& merge : *merges) {
        const size_t space = merge.find(' ', 1);
        if (space == std::string::npos) continue;
        const std::string a = merge.substr(0, space), b = merge.substr(space + 1);
        if (texts.count(a) && texts.count(b) && texts.count(a + b)) kept_merges.push_back(merge);
        if (kept_merges.size() >= 2000) break;
      }
      w.metadata().set(k, Value::string_array(kept_merges));
    } else if (std::find_if(std::begin(id_keys), std::end(id_keys), [&](const char* key) { return k == key; }) !=
               std::end(id_keys)) {
      auto id = m.get_int(k);
      if (id && *id >= 0 && renumber.count(size_t(*id))) w.metadata().set(k, Value::u32(renumber[size_t(*id)]));
    } else {
      w.metadata().set(k, v);
    }
  }
  return w.to_bytes();
}

std::vector<std::filesystem::path> shared_vocabularies(const std::string& shared_dir) {
  std::vector<std::filesystem::path> out;
  const std::filesystem::path dir = std::filesystem::path(shared_dir) / "models" / "vocab";
  std::error_code ec;
  if (shared_dir.empty() || !std::filesystem::is_directory(dir, ec)) return out;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().extension() == ".gguf" || e.path().extension() == ".inp") out.push_back(e.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string read_text(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

nlohmann::json byte_level_json() {
  using nlohmann::json;
  json vocab = json::object();
  const auto& chars = gpt2_byte_to_unicode();
  for (int b = 0; b < 256; ++b) vocab[chars[size_t(b)]] = b;
  const std::vector<std::string> extra = {"he", "ll", "hell", "hello", chars[' '] + "hello"};
  for (size_t i = 0; i < extra.size(); ++i) vocab[extra[i]] = 256 + int(i);
  json j;
  j["model"] = {{"type", "BPE"},
                {"vocab", vocab},
                {"merges", json::array({json::array({"h", "e"}), json::array({"l", "l"}), json::array({"he", "ll"}),
                                        json::array({"hell", "o"}), json::array({chars[' '], "hello"})})}};
  j["added_tokens"] = json::array({{{"id", 261}, {"content", "<|endoftext|>"}, {"special", true}},
                                   {{"id", 262}, {"content", "<tool>"}, {"special", false}}});
  j["normalizer"] = nullptr;
  j["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}};
  return j;
}

nlohmann::json sentencepiece_json() {
  using nlohmann::json;
  const std::string space = "\xe2\x96\x81";
  json vocab = {{"<unk>", 0}, {"<s>", 1}, {"</s>", 2}};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    vocab[name] = 3 + b;
  }
  int next = 259;
  for (const std::string& p : {space, std::string("h"), std::string("i"), std::string("t"), std::string("e"),
                               std::string("r"), space + "h", space + "hi", space + "t", space + "th", space + "the"}) {
    vocab[p] = next++;
  }
  json j;
  j["model"] = {{"type", "BPE"}, {"vocab", vocab}, {"unk_token", "<unk>"}, {"byte_fallback", true},
                {"merges", {space + " h", space + "h i", space + " t", space + "t h", space + "th e"}}};
  j["added_tokens"] = json::array({{{"id", 0}, {"content", "<unk>"}, {"special", true}},
                                   {{"id", 1}, {"content", "<s>"}, {"special", true}},
                                   {{"id", 2}, {"content", "</s>"}, {"special", true}}});
  j["normalizer"] = {{"type", "Sequence"},
                     {"normalizers", json::array({{{"type", "Prepend"}, {"prepend", space}},
                                                  {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", space}}})}};
  j["post_processor"] = {{"type", "TemplateProcessing"},
                         {"single", {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
                                     {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}}};
  return j;
}

std::vector<uint8_t> with_config(const nlohmann::json& j, const std::string& config) {
  std::vector<uint8_t> b = to_vector(j.dump());
  if (!config.empty()) {
    b.push_back(0);
    b.insert(b.end(), config.begin(), config.end());
  }
  return b;
}

// A tiny phi3 file as llama.cpp writes Phi-3: q/k/v fused into attn_qkv, gate/up into ffn_up.
std::vector<uint8_t> tiny_fused_phi3() {
  auto file = gguf::File::parse(gguf::storage_from_bytes(testing::tiny_model_bytes(tiny_spec("phi3", TensorType::F32, false))),
                                "phi3.gguf");
  BITSPLIT_CHECK(file.is_ok());
  gguf::Writer w;
  for (const auto& [key, value] : file->metadata().entries()) w.metadata().set(key, value);
  auto bytes = [&](const std::string& name) {
    auto span = file->tensor_bytes(*file->find_tensor(name));
    return std::vector<uint8_t>(span.begin(), span.end());
  };
  for (const auto& t : file->tensors()) {
    const std::string& n = t.name;
    if (n.ends_with("attn_k.weight") || n.ends_with("attn_v.weight") || n.ends_with("ffn_gate.weight")) continue;
    const bool q = n.ends_with("attn_q.weight"), up = n.ends_with("ffn_up.weight");
    if (!q && !up) {
      BITSPLIT_CHECK(w.add_tensor(n, t.type, t.dims, bytes(n)).is_ok());
      continue;
    }
    const std::string block = n.substr(0, n.find('.', 4) + 1);
    std::vector<std::string> parts = q ? std::vector<std::string>{"attn_q", "attn_k", "attn_v"}
                                       : std::vector<std::string>{"ffn_gate", "ffn_up"};
    std::vector<uint8_t> fused;
    int64_t rows = 0;
    for (const auto& part : parts) {
      const auto b = bytes(block + part + ".weight");
      fused.insert(fused.end(), b.begin(), b.end());
      rows += file->find_tensor(block + part + ".weight")->dims[1];
    }
    BITSPLIT_CHECK(w.add_tensor(block + (q ? "attn_qkv" : "ffn_up") + ".weight", t.type, {t.dims[0], rows}, fused).is_ok());
  }
  w.metadata().set("phi3.attention.sliding_window", gguf::Value::u32(3));
  return w.to_bytes();
}

// A tiny qwen2moe file with stacked experts (ffn_*_exps, 4 experts of width 16, 2 per token) and
// a shared expert: the fused-tensor views and the routing.
std::vector<uint8_t> tiny_moe() {
  auto file = gguf::File::parse(
      gguf::storage_from_bytes(testing::tiny_model_bytes(tiny_spec("qwen2", TensorType::F32, false))), "moe.gguf");
  BITSPLIT_CHECK(file.is_ok());
  gguf::Writer w;
  for (const auto& [key, value] : file->metadata().entries()) {
    w.metadata().set(key.rfind("qwen2.", 0) == 0 ? "qwen2moe." + key.substr(6) : key, value);
  }
  w.metadata().set("general.architecture", gguf::Value::string("qwen2moe"));
  const int64_t n_expert = 4, ff = 16;
  w.metadata().set("qwen2moe.expert_count", gguf::Value::u32(n_expert));
  w.metadata().set("qwen2moe.expert_used_count", gguf::Value::u32(2));
  w.metadata().set("qwen2moe.expert_feed_forward_length", gguf::Value::u32(ff));
  w.metadata().set("qwen2moe.expert_shared_feed_forward_length", gguf::Value::u32(ff));
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 0.2f);
  auto random = [&](std::vector<int64_t> dims) {
    int64_t n = 1;
    for (int64_t d : dims) n *= d;
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) x = normal(rng);
    return testing::encode_tensor(TensorType::F32, v);
  };
  int64_t embd = 0;
  for (const auto& t : file->tensors()) {
    if (t.name == "token_embd.weight") embd = t.dims[0];
    if (t.name.find(".ffn_gate.") != std::string::npos || t.name.find(".ffn_up.") != std::string::npos ||
        t.name.find(".ffn_down.") != std::string::npos) {
      continue;
    }
    auto span = file->tensor_bytes(t);
    BITSPLIT_CHECK(w.add_tensor(t.name, t.type, t.dims, std::vector<uint8_t>(span.begin(), span.end())).is_ok());
  }
  const std::string b = "blk.0.";
  BITSPLIT_CHECK(w.add_tensor(b + "ffn_gate_inp.weight", TensorType::F32, {embd, n_expert}, random({embd, n_expert})).is_ok());
  BITSPLIT_CHECK(w.add_tensor(b + "ffn_gate_exps.weight", TensorType::F32, {embd, ff, n_expert}, random({embd, ff, n_expert})).is_ok());
  BITSPLIT_CHECK(w.add_tensor(b + "ffn_up_exps.weight", TensorType::F32, {embd, ff, n_expert}, random({embd, ff, n_expert})).is_ok());
  BITSPLIT_CHECK(w.add_tensor(b + "ffn_down_exps.weight", TensorType::F32, {ff, embd, n_expert}, random({ff, embd, n_expert})).is_ok());
  BITSPLIT_CHECK(w.add_tensor(b + "ffn_gate_inp_shexp.weight", TensorType::F32, {embd}, random({embd})).is_ok());
  for (const char* kind : {"ffn_gate_shexp", "ffn_up_shexp"}) {
    BITSPLIT_CHECK(w.add_tensor(b + kind + ".weight", TensorType::F32, {embd, ff}, random({embd, ff})).is_ok());
  }
  BITSPLIT_CHECK(w.add_tensor(b + "ffn_down_shexp.weight", TensorType::F32, {ff, embd}, random({ff, embd})).is_ok());
  return w.to_bytes();
}

std::vector<Seed> model_seeds() {
  std::vector<Seed> out;
  out.push_back({"llama-f32", testing::tiny_model_bytes(tiny_spec("llama", TensorType::F32, false))});
  out.push_back({"llama-f16-tied", testing::tiny_model_bytes(tiny_spec("llama", TensorType::F16, true))});
  out.push_back({"llama-q8_0", testing::tiny_model_bytes(tiny_spec("llama", TensorType::Q8_0, false))});
  out.push_back({"qwen2-f32", testing::tiny_model_bytes(tiny_spec("qwen2", TensorType::F32, false))});
  out.push_back({"qwen3-bf16", testing::tiny_model_bytes(tiny_spec("qwen3", TensorType::BF16, false))});
  // Gemma: a sliding window (gemma3) and soft caps with a window (gemma2).
  {
    auto g3 = testing::make_tiny_model(tiny_spec("gemma3", TensorType::F16, true));
    g3.metadata().set("gemma3.attention.sliding_window", gguf::Value::u32(3));
    out.push_back({"gemma3-f16-swa", g3.to_bytes()});
    auto g2 = testing::make_tiny_model(tiny_spec("gemma2", TensorType::F32, false));
    g2.metadata().set("gemma2.attention.sliding_window", gguf::Value::u32(2));
    g2.metadata().set("gemma2.attn_logit_softcapping", gguf::Value::f32(50.0f));
    g2.metadata().set("gemma2.final_logit_softcapping", gguf::Value::f32(30.0f));
    out.push_back({"gemma2-f32-softcap", g2.to_bytes()});
  }
  out.push_back({"phi3-fused", tiny_fused_phi3()});
  {  // LongRoPE as llama.cpp writes Phi-3's 128k models (head size 8: 4 factors per set)
    auto lr = testing::make_tiny_model(tiny_spec("phi3", TensorType::F32, false));
    const std::vector<float> short_factors = {1.0f, 1.1f, 1.05f, 1.2f}, long_factors = {1.0f, 2.0f, 4.0f, 8.0f};
    BITSPLIT_CHECK(lr.add_tensor("rope_factors_short.weight", TensorType::F32, {4}, testing::encode_tensor(TensorType::F32, short_factors)).is_ok());
    BITSPLIT_CHECK(lr.add_tensor("rope_factors_long.weight", TensorType::F32, {4}, testing::encode_tensor(TensorType::F32, long_factors)).is_ok());
    lr.metadata().set("phi3.rope.scaling.original_context_length", gguf::Value::u32(4));
    lr.metadata().set("phi3.rope.scaling.attn_factor", gguf::Value::f32(1.2f));
    out.push_back({"phi3-longrope", lr.to_bytes()});
  }
  out.push_back({"qwen2moe-stacked-experts", tiny_moe()});
  out.push_back({"bitsplit-g32-d2-r8", tiny_split_model(32, 2, 8)});
  out.push_back({"bitsplit-g64-d4-r6", tiny_split_model(64, 4, 6)});
  // The last byte picks Model::load's options (harness_model.h): every combination once.
  for (uint8_t flags = 0; flags < 8; ++flags) {
    Seed s{"bitsplit-g32-flags" + std::to_string(flags), tiny_split_model(32, 3, 8)};
    s.bytes.push_back(flags);
    out.push_back(std::move(s));
  }
  return out;
}

std::vector<Seed> tokenizer_metadata_seeds(const std::string& shared_dir) {
  std::vector<Seed> out = {{"builtin-spm", metadata_gguf(builtin_spm_metadata())},
                           {"builtin-bpe", metadata_gguf(builtin_bpe_metadata())}};
  for (const auto& p : shared_vocabularies(shared_dir)) {
    if (p.extension() != ".gguf") continue;
    auto f = gguf::File::open(p.string());
    if (!f) continue;
    auto bytes = shrink_vocabulary(*f, 300);
    if (!bytes.empty()) out.push_back({"shrunk-" + p.stem().string(), std::move(bytes)});
  }
  return out;
}

std::vector<Seed> tokenizer_encode_seeds(const std::string& shared_dir) {
  std::vector<Seed> out;
  const char* texts[] = {"hello world", " leading space", "caf\xc3\xa9 \xe4\xb8\xad\xe6\x96\x87 \xf0\x9f\xa6\x99",
                         "<s>x</s><|endoftext|>", "\xff\xfe\xc3", "12345678 3.14159", "\n\n\t \r\n"};
  int i = 0;
  for (const char* text : texts) {
    for (uint8_t selector : {0x00, 0x01, 0x42, 0x83}) {
      out.push_back({"text" + std::to_string(i++), prefixed(selector, text)});
    }
  }
  // llama.cpp's tokenizer suites: one seed per test text (split at the suite's separator line).
  uint8_t selector = 0;
  for (const auto& p : shared_vocabularies(shared_dir)) {
    if (p.extension() != ".inp") continue;
    const std::string text = read_text(p);
    const std::string sep = "\n__ggml_vocab_test__\n";
    size_t at = 0, n = 0;
    while (at < text.size() && n < 40) {
      const size_t end = std::min(text.find(sep, at), text.size());
      out.push_back({p.stem().string() + "-" + std::to_string(n++),
                     prefixed(selector++, std::string_view(text).substr(at, end - at))});
      at = end + sep.size();
    }
    break;  // one suite's texts suffice: the selector byte spreads them over the vocabularies
  }
  return out;
}

std::vector<Seed> option_seeds() {
  std::vector<Seed> out;
  auto text = [&](const std::string& name, uint8_t which, const std::string& s) { out.push_back({name, prefixed(which, s)}); };
  for (const char* s : {"1073741824", "512M", "24G", "1.5GiB", "800MB", "0", "7T", "-5G", "1e3K", "nan"}) {
    text(std::string("bytes-") + s, 0, s);
  }
  for (const char* s : {"auto", "1", "16", "64", "65", "07", ""}) text(std::string("budget-") + s, 1, s);
  auto fields = [&](const std::string& name, uint8_t which, const std::vector<uint8_t>& raw) {
    out.push_back({name, prefixed(which, std::string_view(reinterpret_cast<const char*>(raw.data()), raw.size()))});
  };
  auto pack = [](auto... values) {
    std::vector<uint8_t> b;
    auto put = [&](auto v) {
      const auto* p = reinterpret_cast<const uint8_t*>(&v);
      b.insert(b.end(), p, p + sizeof(v));
    };
    (put(values), ...);
    return b;
  };
  fields("policy-tree", 2, pack(uint8_t(0), int32_t(16), int32_t(8), int32_t(4), int32_t(4), uint8_t(0)));
  fields("policy-chain", 2, pack(uint8_t(1), int32_t(5), int32_t(5), int32_t(1), int32_t(1), uint8_t(1)));
  std::vector<uint8_t> logits = pack(uint8_t(8), int16_t(256), int16_t(-512), int16_t(1024), int16_t(0), int16_t(3),
                                     int16_t(3), int16_t(-7), int16_t(100), uint8_t(3), int8_t(1), int8_t(2), int8_t(-1));
  auto sampling = pack(0.8f, int32_t(40), 0.95f, 0.05f, 1.1f, int32_t(64), uint64_t(42));
  sampling.insert(sampling.end(), logits.begin(), logits.end());
  fields("sampling-default", 3, sampling);
  auto greedy = pack(0.0f, int32_t(0), 1.0f, 0.0f, 1.0f, int32_t(0), uint64_t(1));
  greedy.insert(greedy.end(), logits.begin(), logits.end());
  fields("sampling-greedy", 3, greedy);
  return out;
}

// Small templates with the constructs real ones use (ChatML, loops with loop.*, namespace,
// macros, raise_exception, filters, tojson, whitespace control).
std::vector<Seed> chat_template_seeds() {
  auto text = [](std::string_view t) { return std::vector<uint8_t>(t.begin(), t.end()); };
  return {
      {"chatml", text("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
                 "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")},
      {"loop", text("{{ bos_token }}{%- for m in messages -%}{%- if loop.first and m.role == 'system' -%}[{{ m.content | trim }}]"
               "{%- elif m.role == 'user' -%}U{{ loop.index }}: {{ m.content }}{%- else -%}A: {{ m.content ~ eos_token }}"
               "{%- endif -%}{%- endfor -%}")},
      {"namespace", text("{% set ns = namespace(n=0, s='') %}{% for m in messages %}{% set ns.n = ns.n + 1 %}"
                    "{% set ns.s = ns.s ~ m.role[0] | upper %}{% endfor %}{{ ns.n }} {{ ns.s }}")},
      {"macro", text("{% macro show(m, sep='|') %}{{ m.role }}{{ sep }}{{ m.content | length }}{% endmacro %}"
                "{% for m in messages %}{{ show(m) }}{{ show(m, sep=':') }}{% endfor %}")},
      {"raise", text("{% for m in messages %}{% if (m.role == 'user') != (loop.index0 % 2 == 0) %}"
                "{{ raise_exception('roles must alternate') }}{% endif %}{% endfor %}")},
      {"tojson", text("{{ messages | map(attribute='role') | list | tojson }}{{ messages[2].tool_calls | tojson(indent=2) }}"
                 "{{ messages | selectattr('role', 'equalto', 'user') | list | length }}{{ 'a,b'.split(',') | join('-') }}"
                 "{{ messages[-1]['content'][::-1] }}{{ 7 // 2 }}{{ 'x' if messages else 'y' }}")},
  };
}

// {"a": {"a": ... 1 ...}}, `depth` objects deep.
std::string deep_object(int depth) {
  std::string s;
  for (int i = 0; i < depth; ++i) s += "{\"a\": ";
  return s + "1" + std::string(size_t(depth), '}');
}

// Request bodies for both endpoints (first byte 0: completions, 1: chat) and stop-string
// inputs (2: stops, NUL, text chunks separated by \x01).
std::vector<Seed> openai_request_seeds() {
  auto body = [](uint8_t which, std::string_view text) { return prefixed(which, text); };
  return {
      {"completion", body(0, R"({"model": "m", "prompt": "Once upon a time", "max_tokens": 16, "temperature": 0.7,
                                 "top_p": 0.9, "seed": 3, "stop": ["\n", "END"], "stream": true,
                                 "stream_options": {"include_usage": true}, "bitsplit": {"speculative": true, "budget": "auto"}})")},
      {"completion-bad", body(0, R"({"prompt": ["a", "b"], "max_tokens": -1, "n": 2})")},
      {"chat", body(1, R"({"model": "v", "messages": [{"role": "system", "content": "be brief"},
                           {"role": "user", "content": [{"type": "text", "text": "hi"}]},
                           {"role": "assistant", "content": null, "tool_calls": []}], "max_completion_tokens": 8})")},
      {"chat-bad", body(1, R"({"messages": [{"role": "robot"}], "logprobs": true})")},
      {"stops", body(2, std::string("END\x01\n\n") + '\0' + "hello E\x01N\x01" "D and more\x01\n\ntail")},
      // Nesting past the parser's depth limit (kMaxJsonDepth), in a message and at the top.
      {"chat-deep", body(1, R"({"messages": [{"role": "user", "content": "x", "extra": )" + std::string(200, '[') +
                                std::string(200, ']') + "}]}")},
      {"completion-deep", body(0, deep_object(100))},
  };
}

// Whole HTTP requests: routed, keyed, chunked, pipelined, conflicting framing, a header flood.
std::vector<Seed> http_request_seeds() {
  auto seed = [](std::string_view text) { return std::vector<uint8_t>(text.begin(), text.end()); };
  const std::string post = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer k\r\n"
                           "Content-Type: application/json\r\n";
  std::string flood = "GET /health HTTP/1.1\r\n";
  for (int i = 0; i < 40; ++i) flood += "X-" + std::to_string(i) + ": y\r\n";
  return {
      {"get", seed("GET /health HTTP/1.1\r\nHost: x\r\n\r\n")},
      {"post-length", seed(post + "Content-Length: 2\r\n\r\n{}")},
      {"post-chunked", seed(post + "Transfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n")},
      {"post-chunked-ext", seed(post + "Transfer-Encoding: chunked\r\n\r\n1;x=y\r\n{\r\n1\r\n}\r\n0\r\nT: v\r\n\r\n")},
      {"post-no-key", seed("POST /v1/completions HTTP/1.1\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}")},
      {"post-conflict", seed(post + "Content-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n{}")},
      {"pipelined", seed("GET /health HTTP/1.1\r\n\r\n" + post + "Content-Length: 2\r\n\r\n{}GET /stream HTTP/1.1\r\n\r\n")},
      {"expect", seed(post + "Expect: 100-continue\r\nContent-Length: 2\r\n\r\n{}")},
      {"flood", seed(flood + "\r\n")},
  };
}

// Tiny models written as two-part split sets by write_split_set, in the harness's format: the
// first part's length (4 bytes, little-endian), then both parts.
std::vector<Seed> split_set_seeds() {
  std::vector<Seed> out;
  const auto dir = std::filesystem::temp_directory_path() / ("bitsplit-split-seeds-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::pair<const char*, std::vector<uint8_t>> models[] = {
      {"llama-f32", testing::tiny_model_bytes(tiny_spec("llama", TensorType::F32, false))},
      {"bitsplit", tiny_split_model(32, 2, 8)}};
  for (const auto& [name, bytes] : models) {
    auto file = gguf::File::parse(gguf::storage_from_bytes(bytes), name);
    if (!file) continue;
    auto source = weights_from_gguf(std::move(*file));
    gguf::Writer w;
    for (const auto& [key, value] : source->metadata().entries()) w.metadata().set(key, value);
    for (const auto& t : source->tensors()) (void)w.add_tensor_info(t.name, t.type, t.dims);
    const SplitLimits limits{.max_tensors = (source->tensors().size() + 1) / 2};
    auto paths = write_split_set(w, (dir / name).string(), limits, [&](size_t i, const gguf::TensorInfo&) -> Result<std::vector<uint8_t>> {
      BITSPLIT_ASSIGN_OR_RETURN(auto raw, source->raw_bytes(source->tensors()[i]));
      return std::vector<uint8_t>(raw.begin(), raw.end());
    });
    if (!paths || paths->size() != 2) continue;
    auto read = [](const std::string& p) {
      std::ifstream in(p, std::ios::binary);
      return std::vector<uint8_t>((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    };
    const auto a = read((*paths)[0]), b = read((*paths)[1]);
    std::vector<uint8_t> seed(4);
    const uint32_t n = uint32_t(a.size());
    std::memcpy(seed.data(), &n, 4);
    seed.insert(seed.end(), a.begin(), a.end());
    seed.insert(seed.end(), b.begin(), b.end());
    out.push_back({std::string("split-") + name, std::move(seed)});
  }
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  return out;
}

// Safetensors shards: every dtype read, a 0-element tensor, metadata, and a header padded with spaces.
std::vector<Seed> safetensors_seeds() {
  using testing::StTensor;
  std::vector<float> v(24);
  for (size_t i = 0; i < v.size(); ++i) v[i] = float(i) * 0.25f - 2.0f;
  const std::vector<StTensor> tensors = {{"model.embed_tokens.weight", "F32", {4, 6}, testing::f32_bytes(v)},
                                         {"model.layers.0.self_attn.q_proj.weight", "BF16", {2, 12}, testing::bf16_bytes(v)},
                                         {"model.norm.weight", "F16", {3}, {0, 0x3c, 0, 0xc0, 0x55, 0x35}},
                                         {"empty", "F32", {0, 5}, {}}};
  auto header = testing::safetensors_header(tensors);
  header["__metadata__"] = {{"format", "pt"}};
  std::vector<uint8_t> data;
  for (const auto& t : tensors) data.insert(data.end(), t.bytes.begin(), t.bytes.end());
  return {{"three-dtypes", testing::safetensors_bytes(tensors)},
          {"metadata", testing::safetensors_bytes(header.dump(), data)},
          {"scalar", testing::safetensors_bytes({{"s", "F32", {}, testing::f32_bytes({1.5f})}})}};
}

}  // namespace

const std::vector<std::string>& fuzz_targets() {
  static const std::vector<std::string> targets = {"gguf", "model", "delta", "imatrix", "tokenizer_encode",
                                                   "tokenizer_metadata", "tokenizer_json", "options",
                                                   "chat_template", "openai_request", "split_set", "lora",
                                                   "http_request", "safetensors"};
  return targets;
}

std::vector<Seed> make_seeds(const std::string& target, const std::string& shared_dir) {
  if (target == "model") return model_seeds();
  if (target == "delta") return {{"delta-row", tiny_delta(true)}, {"delta-matrix", tiny_delta(false)}};
  if (target == "imatrix") return {{"imatrix", tiny_imatrix()}};
  if (target == "lora") return {{"lora-alpha", tiny_lora(4.0)}, {"lora-no-alpha", tiny_lora(0.0)}};
  if (target == "tokenizer_metadata") return tokenizer_metadata_seeds(shared_dir);
  if (target == "tokenizer_encode") return tokenizer_encode_seeds(shared_dir);
  if (target == "tokenizer_json") {
    return {{"byte-level", with_config(byte_level_json(), "")},
            {"byte-level-config", with_config(byte_level_json(), R"({"bos_token": "<|endoftext|>", "add_bos_token": true})")},
            {"sentencepiece", with_config(sentencepiece_json(), "")},
            {"sentencepiece-config",
             with_config(sentencepiece_json(), R"({"bos_token": {"content": "<s>"}, "eos_token": "</s>", "add_eos_token": true})")}};
  }
  if (target == "options") return option_seeds();
  if (target == "chat_template") return chat_template_seeds();
  if (target == "openai_request") return openai_request_seeds();
  if (target == "http_request") return http_request_seeds();
  if (target == "split_set") return split_set_seeds();
  if (target == "safetensors") return safetensors_seeds();
  if (target == "gguf") {
    std::vector<Seed> out = {{"every-type", every_type_gguf()},
                             {"delta", tiny_delta(true)},
                             {"imatrix", tiny_imatrix()},
                             {"lora", tiny_lora(4.0)},
                             {"vocab-spm", metadata_gguf(builtin_spm_metadata())}};
    for (auto& s : model_seeds()) {
      if (s.name.find("flags") == std::string::npos) out.push_back(std::move(s));
    }
    return out;
  }
  return {};
}

}  // namespace bitsplit::fuzz
