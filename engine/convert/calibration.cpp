// The draft's calibration layer by layer (calibration.h): the text, its tokens, the memory plan,
// and the second moments of each block's projection inputs computed as convert reaches the block.
#include "bitsplit/calibration.h"

#include <cblas.h>
#include <nlohmann/json.hpp>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <iterator>

#include "bitsplit/chat_template.h"
#include "bitsplit/cpu.h"
#include "bitsplit/quant.h"
#include "bitsplit/sha256.h"
#include "bitsplit/split_format.h"
#include "bitsplit/tokenizer.h"

namespace bitsplit {

extern const unsigned char kBuiltinCalibrationText[];
extern const size_t kBuiltinCalibrationTextSize;

std::string_view builtin_calibration_text() {
  return {reinterpret_cast<const char*>(kBuiltinCalibrationText), kBuiltinCalibrationTextSize};
}

namespace {

// The offset of the first byte that does not belong to a well-formed UTF-8 sequence, or npos.
size_t first_bad_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    const size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return i;
    for (size_t k = 1; k < n; ++k)
      if ((static_cast<unsigned char>(s[i + k]) >> 6) != 2) return i;
    i += n;
  }
  return std::string_view::npos;
}

// One piece of the text: plain text, or chat turns to be rendered.
struct Segment {
  std::string text;
  nlohmann::ordered_json turns;  // null unless a chat segment
};

// The .jsonl format of the built-in file; null when the text is not in it (its first line is
// not a JSON object with "text" or "turns").
Result<std::optional<std::vector<Segment>>> jsonl_segments(std::string_view text, const std::string& name) {
  std::vector<Segment> segments;
  size_t line_no = 0, at = 0;
  while (at < text.size()) {
    size_t end = text.find('\n', at);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view line = text.substr(at, end - at);
    at = end + 1;
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    auto j = nlohmann::ordered_json::parse(line, nullptr, /*allow_exceptions=*/false);
    const bool segment = j.is_object() && (j.contains("text") || j.contains("turns"));
    if (!segment) {
      if (segments.empty() && line_no == 1) return std::optional<std::vector<Segment>>{};  // plain text
      return Status::error(name + ": line " + std::to_string(line_no) +
                           " is not a calibration segment (a JSON object with \"text\" or \"turns\")");
    }
    Segment s;
    if (j.contains("turns")) {
      const auto& turns = j["turns"];
      bool ok = turns.is_array() && !turns.empty();
      for (const auto& t : turns) {
        ok = ok && t.is_object() && t.contains("role") && t["role"].is_string() && t.contains("content") &&
             t["content"].is_string();
      }
      if (!ok) {
        return Status::error(name + ": line " + std::to_string(line_no) +
                             ": \"turns\" must be a non-empty list of {\"role\": ..., \"content\": ...} strings");
      }
      s.turns = turns;
    } else if (j["text"].is_string()) {
      s.text = j["text"].get<std::string>();
    } else {
      return Status::error(name + ": line " + std::to_string(line_no) + ": \"text\" must be a string");
    }
    segments.push_back(std::move(s));
  }
  return std::optional<std::vector<Segment>>(std::move(segments));
}

// A chat segment as the model sees a conversation: its own template, else "role: content" lines.
std::string render_turns(const nlohmann::ordered_json& turns, const ChatTemplate* tmpl, const Vocabulary& v) {
  if (tmpl) {
    auto bos = v.bos >= 0 ? v.tokens[size_t(v.bos)] : std::string();
    auto eos = v.eos >= 0 ? v.tokens[size_t(v.eos)] : std::string();
    if (auto r = tmpl->render_chat(turns, false, bos, eos)) return *r;
  }
  std::string out;
  for (const auto& t : turns) out += t["role"].get<std::string>() + ": " + t["content"].get<std::string>() + "\n\n";
  return out;
}

// Each segment's tokens cut to the same length `cap`, chosen as large as max_tokens allows.
int64_t even_cap(const std::vector<std::vector<int32_t>>& pieces, int64_t max_tokens) {
  int64_t lo = 1, hi = 1;
  for (const auto& p : pieces) hi = std::max<int64_t>(hi, int64_t(p.size()));
  auto total = [&](int64_t cap) {
    int64_t n = 0;
    for (const auto& p : pieces) n += std::min<int64_t>(cap, int64_t(p.size()));
    return n;
  };
  if (total(hi) <= max_tokens) return hi;
  while (lo < hi) {  // the largest cap whose total fits
    const int64_t mid = (lo + hi + 1) / 2;
    if (total(mid) <= max_tokens) lo = mid; else hi = mid - 1;
  }
  return lo;
}

// Row `token` of the token embedding, decoded from the file's bytes (no whole-matrix copy).
Status embedding_row(const WeightSource& source, const gguf::TensorInfo& t, std::span<const uint8_t> bytes,
                     int64_t token, float* out) {
  const int64_t n = t.dims[0];
  const uint64_t row_bytes = t.nbytes / uint64_t(t.dims[1]);
  const std::span<const uint8_t> row = bytes.subspan(size_t(uint64_t(token) * row_bytes), size_t(row_bytes));
  return gguf::decode_f32(t.type, row, {out, size_t(n)}).with_context(source.path() + ": token_embd.weight");
}

// The kind of a layer projection ("attn_q") from "blk.3.attn_q.weight", and its layer.
bool parse_layer_weight(const std::string& weight, int64_t* layer, std::string* kind) {
  if (!split_block_name(weight, layer, kind) || !kind->ends_with(".weight")) return false;
  kind->resize(kind->size() - 7);
  return true;
}

// The weight whose moments a weight's input shares: q, k and v read one input, gate and up another.
std::string moment_owner(int64_t layer, const std::string& kind) {
  const std::string b = "blk." + std::to_string(layer) + ".";
  if (kind == "attn_k" || kind == "attn_v") return b + "attn_q.weight";
  if (kind == "ffn_up") return b + "ffn_gate.weight";
  return b + kind + ".weight";
}

bool keeps_moments(const std::string& kind) {
  return kind == "attn_q" || kind == "attn_output" || kind == "ffn_gate" || kind == "ffn_down";
}

}  // namespace

Result<CalibrationTokens> calibration_tokens(const WeightSource& source, const CalibrationOptions& options) {
  CalibrationTokens out;
  std::string text;
  if (options.path.empty()) {
    text = std::string(builtin_calibration_text());
    out.name = "built-in";
  } else {
    std::ifstream in(options.path, std::ios::binary);
    if (!in) return Status::error("--calibration " + options.path + ": cannot be read");
    text.assign(std::istreambuf_iterator<char>(in), {});
    out.name = options.path;
  }
  const std::string& name = out.name;
  if (text.find_first_not_of(" \t\r\n") == std::string::npos) return Status::error("calibration text " + name + " is empty");
  if (const size_t nul = text.find('\0'); nul != std::string::npos) {
    return Status::error("calibration text " + name + " is binary (a NUL byte at offset " + std::to_string(nul) +
                         "); give a UTF-8 text file");
  }
  if (const size_t bad = first_bad_utf8(text); bad != std::string_view::npos) {
    return Status::error("calibration text " + name + " is not UTF-8 (a malformed sequence at byte " +
                         std::to_string(bad) + ")");
  }
  BITSPLIT_ASSIGN_OR_RETURN(out.sha256, sha256_hex(text));
  BITSPLIT_ASSIGN_OR_RETURN(auto tokenizer, Tokenizer::from_metadata(source.metadata()));
  const Vocabulary& vocab = tokenizer->vocab();
  BITSPLIT_ASSIGN_OR_RETURN(auto parsed, jsonl_segments(text, name));
  std::vector<Segment> segments = parsed ? std::move(*parsed) : std::vector<Segment>{Segment{text, nullptr}};
  std::optional<ChatTemplate> tmpl;
  if (auto src = source.metadata().get_string("tokenizer.chat_template")) {
    if (auto t = ChatTemplate::parse(*src)) tmpl = std::move(*t);
  }
  out.chat_template = tmpl.has_value();
  std::vector<std::vector<int32_t>> pieces;
  for (const Segment& s : segments) {
    const bool chat = !s.turns.is_null();
    const std::string body = chat ? render_turns(s.turns, tmpl ? &*tmpl : nullptr, vocab) : s.text;
    pieces.push_back(tokenizer->encode(body, {.add_special = false, .parse_special = chat && tmpl.has_value()}));
    out.chat_segments += chat ? 1 : 0;
  }
  out.segments = int64_t(segments.size());
  const bool bos = vocab.add_bos && vocab.bos >= 0;
  const int64_t body = options.ctx - (bos ? 1 : 0);
  const int64_t cap = even_cap(pieces, options.max_tokens);
  for (const auto& p : pieces) {
    const int64_t n = std::min<int64_t>(cap, int64_t(p.size()));
    for (int64_t at = 0; at < n; at += body) {
      std::vector<int32_t> seq;
      if (bos) seq.push_back(vocab.bos);
      seq.insert(seq.end(), p.begin() + at, p.begin() + std::min(n, at + body));
      if (seq.size() < 2) continue;
      out.tokens += int64_t(seq.size());
      out.sequences.push_back(std::move(seq));
    }
  }
  if (out.tokens < kMinCalibrationTokens) {
    return Status::error("calibration text " + name + " is too short: " + std::to_string(out.tokens) +
                         " tokens, at least " + std::to_string(kMinCalibrationTokens) + " are needed");
  }
  return out;
}

CalibrationPlan plan_calibration(const ModelConfig& c, int64_t tokens, int32_t ctx, int64_t block, int fits_in_flight) {
  CalibrationPlan p;
  int64_t block_params = 4 * c.n_embd, largest = 0;
  for (const ProjectionSlot& s : layer_projections(c)) {
    block_params += s.rows * s.cols;
    largest = std::max(largest, s.rows * s.cols);
  }
  p.block_weights = uint64_t(block_params) * 4;
  p.stream = uint64_t(tokens * c.n_embd) * 4;
  const int64_t ff = c.is_moe() ? std::max(c.n_ff_exp, c.n_ff_shexp) : c.n_ff;
  // x, h, q, k, v, attention out, projection out; gate and up; the attention scores; the KV cache.
  p.activations = uint64_t(ctx) * uint64_t(4 * c.n_embd + 2 * c.q_dim() + 2 * c.kv_dim() + 2 * ff + ctx) * 4 +
                  uint64_t(c.n_layers) * uint64_t(ctx) * uint64_t(c.kv_dim()) * 8;
  const int64_t per_block = quant::covariance_floats(c.n_embd, block) * 3 + quant::covariance_floats(ff, block) +
                            (c.q_dim() != c.n_embd ? quant::covariance_floats(c.q_dim(), block) : 0);
  p.moments = uint64_t(2 * per_block) * 4;
  // A fit holds its weights in f32, its planes (draft codes, residual codes, the packed residual)
  // and a working chunk of rows: ~7 bytes per weight. The head (the largest, last) beside the
  // projections fitted ahead of it.
  const int64_t head = c.n_vocab * c.n_embd;
  p.fits = uint64_t(std::max(largest, head) + int64_t(fits_in_flight - 1) * largest) * 7;
  return p;
}

Result<std::unique_ptr<LayerCalibration>> LayerCalibration::start(const WeightSource& source, const ModelConfig& config,
                                                                  CalibrationTokens tokens,
                                                                  const CalibrationOptions& options) {
  quant::blas_single_threaded();  // the moments' and the forward's BLAS calls run on oneTBB's workers
  std::unique_ptr<LayerCalibration> c(new LayerCalibration(source, config, std::move(tokens), options));
  BITSPLIT_RETURN_IF_ERROR(c->embed());
  return c;
}

// The stream entering block 0: each token's embedding row, times the embedding scale.
Status LayerCalibration::embed() {
  const gguf::TensorInfo* t = source_.find_tensor("token_embd.weight");
  if (!t || t->dims.size() != 2 || t->dims[0] != config_.n_embd) {
    return Status::error(source_.path() + ": token_embd.weight is missing or not [n_embd x n_vocab]");
  }
  auto bytes = source_.raw_bytes(*t);
  std::vector<float> whole;  // a container without raw bytes: the whole matrix once
  if (!bytes) {
    BITSPLIT_ASSIGN_OR_RETURN(whole, source_.load_f32(*t));
  }
  for (const auto& seq : tokens_.sequences) {
    std::vector<float>& x = stream_.emplace_back(seq.size() * size_t(config_.n_embd));
    for (size_t i = 0; i < seq.size(); ++i) {
      float* row = x.data() + i * size_t(config_.n_embd);
      if (seq[i] < 0 || seq[i] >= t->dims[1]) return Status::error("calibration token " + std::to_string(seq[i]) + " is outside the vocabulary");
      if (bytes) {
        BITSPLIT_RETURN_IF_ERROR(embedding_row(source_, *t, *bytes, seq[i], row));
      } else {
        std::copy_n(whole.data() + int64_t(seq[i]) * config_.n_embd, config_.n_embd, row);
      }
      for (int64_t j = 0; j < config_.n_embd; ++j) row[j] *= config_.embd_scale;
    }
  }
  source_.release(*t);
  return Status::ok();
}

// Adds x's second moments to the weight's sums: the upper triangle of each diagonal block.
void LayerCalibration::accumulate(const std::string& weight, const float* x, int64_t rows, int64_t cols) {
  int64_t layer = 0;
  std::string kind;
  if (weight != "output.weight" && (!parse_layer_weight(weight, &layer, &kind) || !keeps_moments(kind))) return;
  const int64_t block = options_.covariance_block;
  auto& [width, sum] = sums_[weight];
  width = cols;
  if (sum.empty()) sum.assign(size_t(quant::covariance_floats(cols, block)), 0.0f);
  // The diagonal blocks on oneTBB's workers (one ssyrk each).
  const std::vector<quant::DiagonalBlock> blocks = quant::diagonal_blocks(cols, block);
  tbb::parallel_for(size_t{0}, blocks.size(), [&](size_t k) {
    const quant::DiagonalBlock& b = blocks[k];
    cblas_ssyrk(CblasRowMajor, CblasUpper, CblasTrans, int(b.n), int(rows), 1.0f, x + b.c0, int(cols), 1.0f,
                sum.data() + b.offset, int(b.n));
  });
}

// The sums of the block just run become its moments: divided by the tokens, mirrored.
void LayerCalibration::finish_block(int64_t layer) {
  auto& kept = done_[layer];
  const float inv = 1.0f / float(tokens_.tokens);
  for (auto& [weight, moments] : sums_) {
    auto& [cols, sum] = moments;
    const std::vector<quant::DiagonalBlock> blocks = quant::diagonal_blocks(cols, options_.covariance_block);
    for (const quant::DiagonalBlock& b : blocks) {
      float* h = sum.data() + b.offset;
      for (int64_t i = 0; i < b.n; ++i)
        for (int64_t j = i; j < b.n; ++j) h[j * b.n + i] = h[i * b.n + j] = h[i * b.n + j] * inv;
    }
    kept[weight] = Covariance::holding(std::move(sum), cols, blocks.size() > 1 ? blocks[0].n : 0);
  }
  sums_.clear();
  done_.erase(layer - 2);  // the fits of block layer - 1 may still be asking; earlier ones are done
  if (on_block_) on_block_(layer + 1, config_.n_layers + 1);
}

// Runs every sequence through block `layer` (its weights alone in memory), summing the moments.
Status LayerCalibration::run_block(int64_t layer) {
  ModelLoadOptions load;
  load.only_layers = std::pair<int64_t, int64_t>{layer, layer + 1};
  BITSPLIT_ASSIGN_OR_RETURN(Model block, Model::load(source_, load));
  block.set_f32_gemm(true);
  const ActivationObserver observer = [this](const std::string& w, const float* x, int64_t rows, int64_t cols) {
    accumulate(w, x, rows, cols);
  };
  for (size_t s = 0; s < tokens_.sequences.size(); ++s) {
    const auto& seq = tokens_.sequences[s];
    // One cache for every sequence and block: a causal batch from slot 0 reads only the slots
    // it writes (kv_len = its length).
    if (!cache_) {
      size_t longest = 0;
      for (const auto& q : tokens_.sequences) longest = std::max(longest, q.size());
      cache_.emplace(config_, int64_t(longest));
    }
    BITSPLIT_RETURN_IF_ERROR(
        forward_layers(block, *cache_, Batch::causal(seq, 0), layer, layer + 1, stream_[s], &observer)
            .with_context("calibration, block " + std::to_string(layer)));
  }
  finish_block(layer);
  return Status::ok();
}

// The head's input: the output norm of the stream the last block left.
Status LayerCalibration::run_head() {
  const gguf::TensorInfo* t = source_.find_tensor("output_norm.weight");
  if (!t) return Status::error(source_.path() + ": tensor 'output_norm.weight' is missing");
  BITSPLIT_ASSIGN_OR_RETURN(std::vector<float> norm, source_.load_f32(*t));
  if (int64_t(norm.size()) != config_.n_embd) return Status::error(source_.path() + ": output_norm.weight has the wrong size");
  for (auto& x : stream_) {
    const int64_t rows = int64_t(x.size()) / config_.n_embd;
    std::vector<float> h(x.size());
    for (int64_t r = 0; r < rows; ++r) {
      cpu::rms_norm_f32(x.data() + r * config_.n_embd, norm.data(), config_.n_embd, config_.rms_eps,
                        h.data() + r * config_.n_embd);
    }
    accumulate("output.weight", h.data(), rows, config_.n_embd);
    x = {};  // the stream is not needed after the head
  }
  finish_block(config_.n_layers);
  return Status::ok();
}

Result<std::shared_ptr<const Covariance>> LayerCalibration::covariance(const std::string& weight) {
  int64_t layer = config_.n_layers;
  std::string kind;
  std::string owner = weight;
  if (weight != "output.weight") {
    if (!parse_layer_weight(weight, &layer, &kind) || layer < 0 || layer >= config_.n_layers) return std::shared_ptr<const Covariance>();
    owner = moment_owner(layer, kind);
  }
  std::lock_guard<std::mutex> lock(mu_);
  while (next_ <= layer) {
    BITSPLIT_RETURN_IF_ERROR(next_ < config_.n_layers ? run_block(next_) : run_head());
    ++next_;
  }
  auto kept = done_.find(layer);
  if (kept == done_.end()) {
    return Status::error("internal: the calibration of block " + std::to_string(layer) +
                         " was asked for after it was dropped (blocks are calibrated in order)");
  }
  auto it = kept->second.find(owner);
  if (it == kept->second.end()) return std::shared_ptr<const Covariance>();
  return it->second;
}

}  // namespace bitsplit
