// The reference forward pass: batch invariance, explicit KV slots with tree masks, and an
// independent double-precision re-implementation for llama, qwen2 and qwen3 shapes.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "bitsplit/model.h"
#include "gguf_testing.h"
#include "test_paths.h"

namespace bitsplit {
namespace {

Model load(const testing::TinyModelSpec& spec) {
  auto m = Model::load(*testing::tiny_weights(spec));
  BITSPLIT_CHECK(m.is_ok(), m.status().message());
  return std::move(*m);
}

std::vector<float> run(const Model& m, KvCache& cache, const Batch& b) {
  auto r = forward_pass(m, cache, b);
  BITSPLIT_CHECK(r.is_ok(), r.status().message());
  return std::move(*r);
}

const std::vector<int32_t> kTokens = {1, 9, 4, 17, 30, 5, 5, 12, 40, 3, 7};

// Logits of every position: computed in one batch, one token at a time, and in odd chunks,
// must be bitwise identical.
TEST(ForwardReference, BatchInvariantAcrossBatchShapes) {
  const Model m = load({});
  const int n = int(kTokens.size());
  KvCache all_cache(m.config(), n);
  const auto all = run(m, all_cache, Batch::causal(kTokens, 0, /*all_logits=*/true));
  for (int chunk : {1, 3, 4, 7}) {
    KvCache cache(m.config(), n);
    std::vector<float> pieces;
    for (int start = 0; start < n; start += chunk) {
      const int len = std::min(chunk, n - start);
      auto out = run(m, cache, Batch::causal(std::span(kTokens).subspan(size_t(start), size_t(len)), start, true));
      pieces.insert(pieces.end(), out.begin(), out.end());
    }
    ASSERT_EQ(pieces.size(), all.size());
    for (size_t i = 0; i < all.size(); ++i) ASSERT_EQ(pieces[i], all[i]) << "chunk " << chunk << " element " << i;
  }
}

// A tree: prefix of 4 committed tokens, then two sibling branches written to scratch slots
// 4-5 and 6-7 with a tree mask. Each branch's logits must equal those of plain decoding of
// that branch.
TEST(ForwardReference, TreeMaskOverScratchSlotsEqualsPlainDecoding) {
  const Model m = load({});
  const std::vector<int32_t> prefix = {1, 9, 4, 17};
  const std::vector<int32_t> a = {30, 5}, b = {12, 40};
  KvCache cache(m.config(), 8);
  run(m, cache, Batch::causal(prefix, 0));
  Batch tree;
  tree.tokens = {a[0], a[1], b[0], b[1]};
  tree.positions = {4, 5, 4, 5};
  tree.slots = {4, 5, 6, 7};
  tree.kv_len = 8;
  tree.want_logits = {1, 1, 1, 1};
  tree.mask.assign(4 * 8, 0);
  const std::vector<std::vector<int>> visible = {{0, 1, 2, 3, 4}, {0, 1, 2, 3, 4, 5}, {0, 1, 2, 3, 6}, {0, 1, 2, 3, 6, 7}};
  for (int i = 0; i < 4; ++i)
    for (int j : visible[size_t(i)]) tree.mask[size_t(i * 8 + j)] = 1;
  const auto tree_logits = run(m, cache, tree);

  const int64_t V = m.config().n_vocab;
  for (int branch = 0; branch < 2; ++branch) {
    std::vector<int32_t> seq = prefix;
    const auto& ext = branch == 0 ? a : b;
    seq.insert(seq.end(), ext.begin(), ext.end());
    KvCache plain_cache(m.config(), 6);
    const auto plain = run(m, plain_cache, Batch::causal(seq, 0, true));
    for (int k = 0; k < 2; ++k) {
      for (int64_t v = 0; v < V; ++v) {
        ASSERT_EQ(tree_logits[size_t((branch * 2 + k) * V + v)], plain[size_t((4 + k) * V + v)])
            << "branch " << branch << " depth " << k;
      }
    }
  }
}

// Straightforward double-precision llama/qwen forward for one sequence, written apart from
// the engine's code, to check the architecture details (GQA, RoPE orders, biases, q/k norm).
std::vector<double> naive_last_logits(const Model& m, const std::vector<int32_t>& toks) {
  const ModelConfig& c = m.config();
  const int64_t T = int64_t(toks.size()), D = c.n_embd, H = c.n_heads, KVH = c.n_kv_heads, hd = c.head_dim;
  auto mat = [](const std::vector<float>& w, const std::vector<double>& x, int64_t out, int64_t in,
                const std::vector<float>& bias) {
    std::vector<double> y(static_cast<size_t>(out));
    for (int64_t o = 0; o < out; ++o) {
      double s = bias.empty() ? 0.0 : bias[size_t(o)];
      for (int64_t i = 0; i < in; ++i) s += double(w[size_t(o * in + i)]) * x[size_t(i)];
      y[size_t(o)] = s;
    }
    return y;
  };
  auto norm = [&](std::vector<double> x, const std::vector<float>& w) {
    double ss = 0;
    for (double v : x) ss += v * v;
    const double r = 1.0 / std::sqrt(ss / double(x.size()) + c.rms_eps);
    for (size_t i = 0; i < x.size(); ++i) x[i] = x[i] * r * w[i];
    return x;
  };
  auto rope = [&](double* v, int64_t pos) {
    for (int64_t i = 0; i < hd / 2; ++i) {
      const double theta = double(pos) * std::pow(double(c.rope_base), -2.0 * double(i) / double(hd));
      const int64_t p = c.rope_order == cpu::RopeOrder::kNormal ? 2 * i : i;
      const int64_t q = c.rope_order == cpu::RopeOrder::kNormal ? 2 * i + 1 : i + hd / 2;
      const double x0 = v[p], x1 = v[q];
      v[p] = x0 * std::cos(theta) - x1 * std::sin(theta);
      v[q] = x0 * std::sin(theta) + x1 * std::cos(theta);
    }
  };
  std::vector<std::vector<double>> x(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) {
    x[size_t(t)].assign(m.token_embd().begin() + toks[size_t(t)] * D, m.token_embd().begin() + (toks[size_t(t)] + 1) * D);
  }
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const LayerWeights& w = m.layer(l);
    std::vector<std::vector<double>> q(static_cast<size_t>(T)), k(static_cast<size_t>(T)), v(static_cast<size_t>(T));
    for (int64_t t = 0; t < T; ++t) {
      const auto h = norm(x[size_t(t)], w.attn_norm);
      q[size_t(t)] = mat(w.wq, h, H * hd, D, w.bq);
      k[size_t(t)] = mat(w.wk, h, KVH * hd, D, w.bk);
      v[size_t(t)] = mat(w.wv, h, KVH * hd, D, w.bv);
      for (int64_t hh = 0; hh < H; ++hh) {
        if (c.has_qk_norm) {
          std::vector<double> head(q[size_t(t)].begin() + hh * hd, q[size_t(t)].begin() + (hh + 1) * hd);
          head = norm(head, w.q_norm);
          std::copy(head.begin(), head.end(), q[size_t(t)].begin() + hh * hd);
        }
        rope(q[size_t(t)].data() + hh * hd, t);
      }
      for (int64_t hh = 0; hh < KVH; ++hh) {
        if (c.has_qk_norm) {
          std::vector<double> head(k[size_t(t)].begin() + hh * hd, k[size_t(t)].begin() + (hh + 1) * hd);
          head = norm(head, w.k_norm);
          std::copy(head.begin(), head.end(), k[size_t(t)].begin() + hh * hd);
        }
        rope(k[size_t(t)].data() + hh * hd, t);
      }
    }
    for (int64_t t = 0; t < T; ++t) {
      std::vector<double> att(static_cast<size_t>(H * hd), 0.0);
      for (int64_t hh = 0; hh < H; ++hh) {
        const int64_t g = hh / (H / KVH);
        std::vector<double> s(static_cast<size_t>(t + 1));
        double mx = -1e300;
        for (int64_t j = 0; j <= t; ++j) {
          double d = 0;
          for (int64_t e = 0; e < hd; ++e) d += q[size_t(t)][size_t(hh * hd + e)] * k[size_t(j)][size_t(g * hd + e)];
          s[size_t(j)] = d / std::sqrt(double(hd));
          mx = std::max(mx, s[size_t(j)]);
        }
        double sum = 0;
        for (double& e : s) sum += (e = std::exp(e - mx));
        for (int64_t j = 0; j <= t; ++j)
          for (int64_t e = 0; e < hd; ++e) att[size_t(hh * hd + e)] += s[size_t(j)] / sum * v[size_t(j)][size_t(g * hd + e)];
      }
      const auto o = mat(w.wo, att, D, H * hd, {});
      for (int64_t e = 0; e < D; ++e) x[size_t(t)][size_t(e)] += o[size_t(e)];
      const auto h = norm(x[size_t(t)], w.ffn_norm);
      auto gte = mat(w.w_gate, h, c.n_ff, D, {});
      const auto up = mat(w.w_up, h, c.n_ff, D, {});
      for (int64_t e = 0; e < c.n_ff; ++e) gte[size_t(e)] = gte[size_t(e)] / (1.0 + std::exp(-gte[size_t(e)])) * up[size_t(e)];
      const auto down = mat(w.w_down, gte, D, c.n_ff, {});
      for (int64_t e = 0; e < D; ++e) x[size_t(t)][size_t(e)] += down[size_t(e)];
    }
  }
  return mat(m.output(), norm(x.back(), m.output_norm()), c.n_vocab, D, {});
}

class ArchitectureTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ArchitectureTest, MatchesNaiveDoublePrecisionForward) {
  testing::TinyModelSpec spec;
  spec.arch = GetParam();
  spec.tied_output = spec.arch == "qwen2";  // also covers the tied head
  const Model m = load(spec);
  EXPECT_EQ(m.config().tied_output, spec.tied_output);
  KvCache cache(m.config(), int64_t(kTokens.size()));
  const auto ours = run(m, cache, Batch::causal(kTokens, 0));
  const auto ref = naive_last_logits(m, kTokens);
  double scale = 0;
  for (double r : ref) scale = std::max(scale, std::fabs(r));
  // f32 vs f64 over a 2-layer model with 32..64-long dots: errors are ~1e-6 of the scale.
  for (size_t i = 0; i < ref.size(); ++i) ASSERT_NEAR(ours[i], ref[i], 1e-4 * (1.0 + scale)) << "logit " << i;
}

INSTANTIATE_TEST_SUITE_P(Llama, ArchitectureTest, ::testing::Values("llama", "qwen2", "qwen3"));

TEST(ForwardReference, QuantisedSourcesLoad) {
  for (auto type : {gguf::TensorType::F16, gguf::TensorType::BF16, gguf::TensorType::Q8_0}) {
    testing::TinyModelSpec spec;
    spec.type = type;
    const Model m = load(spec);
    KvCache cache(m.config(), 4);
    const auto logits = run(m, cache, Batch::causal(std::vector<int32_t>{1, 2, 3}, 0));
    for (float v : logits) ASSERT_TRUE(std::isfinite(v));
  }
}

TEST(ForwardReference, BadBatchesAreErrors) {
  const Model m = load({});
  KvCache cache(m.config(), 4);
  auto bad_token = forward_pass(m, cache, Batch::causal(std::vector<int32_t>{1, 999}, 0));
  ASSERT_FALSE(bad_token.is_ok());
  EXPECT_NE(bad_token.status().message().find("token id 999 is outside the vocabulary"), std::string::npos);
  auto too_long = forward_pass(m, cache, Batch::causal(std::vector<int32_t>{1, 2, 3, 4, 5}, 0));
  EXPECT_FALSE(too_long.is_ok());
  Batch empty_mask = Batch::causal(std::vector<int32_t>{1}, 0);
  empty_mask.mask.assign(empty_mask.mask.size(), 0);
  EXPECT_FALSE(forward_pass(m, cache, empty_mask).is_ok());
}

}  // namespace
}  // namespace bitsplit

namespace bitsplit {
namespace {

// A mixture of experts runs only the experts its rows are routed to: one row touches exactly
// n_expert_used experts per layer; at 1 and 16 rows the per-expert row counts add
// up to rows × n_expert_used. (What a verify pass streams from RAM is these experts' residual.)
TEST(ForwardReference, MixtureOfExpertsRunsOnlyTheRoutedExperts) {
  const std::string path = testing::source_dir() + "/tests/models/qwen2moe-tiny.gguf";
  BITSPLIT_REQUIRE_FILE(path);
  auto source = open_weights(path);
  ASSERT_TRUE(source.is_ok()) << source.status().message();
  auto model = Model::load(**source);
  ASSERT_TRUE(model.is_ok()) << model.status().message();
  const ModelConfig& c = model->config();
  for (int rows : {1, 16}) {
    std::map<std::string, int64_t> expert_rows;  // "blk.L.ffn_gate.E.weight" -> rows
    const ActivationObserver observe = [&](const std::string& w, const float*, int64_t r, int64_t) {
      if (w.find(".ffn_gate.") != std::string::npos) expert_rows[w] += r;
    };
    std::vector<int32_t> tokens;
    for (int i = 0; i < rows; ++i) tokens.push_back(int32_t(100 + 37 * i));
    KvCache cache(c, rows);
    ASSERT_TRUE(forward_pass(*model, cache, Batch::causal(tokens, 0), &observe).is_ok());
    for (int64_t l = 0; l < c.n_layers; ++l) {
      int64_t touched = 0, routed = 0;
      for (const auto& [w, r] : expert_rows) {
        if (w.starts_with("blk." + std::to_string(l) + ".")) {
          ++touched;
          routed += r;
        }
      }
      EXPECT_EQ(routed, rows * c.n_expert_used) << "layer " << l;
      if (rows == 1) {
        EXPECT_EQ(touched, c.n_expert_used);
      }
      std::printf("[ %d rows ] layer %lld: %lld of %lld experts touched\n", rows, (long long)l, (long long)touched,
                  (long long)c.n_expert);
    }
  }
}


// A pass cut at a layer boundary (forward_layers) is the same pass: [0, k) then [k, L) give the
// logits of one forward_pass bit for bit, for every k, and the projections' inputs an observer
// sees are the same; a model loaded with only the layers it runs gives the same stream.
TEST(ForwardLayers, PiecesAtEveryLayerBoundaryEqualOnePass) {
  const testing::TinyModelSpec spec{.arch = "qwen2", .layers = 3};
  const auto source = testing::tiny_weights(spec);
  const Model m = load(spec);
  const int n = int(kTokens.size());
  std::map<std::string, std::vector<float>> seen_whole, seen_pieces;
  auto recorder = [](std::map<std::string, std::vector<float>>& seen) {
    return ActivationObserver([&seen](const std::string& w, const float* x, int64_t rows, int64_t cols) {
      seen[w].assign(x, x + rows * cols);
    });
  };
  const ActivationObserver whole_observer = recorder(seen_whole), pieces_observer = recorder(seen_pieces);
  const Batch batch = Batch::causal(kTokens, 0, /*all_logits=*/true);
  KvCache whole_cache(m.config(), n);
  auto whole = forward_pass(m, whole_cache, batch, &whole_observer);
  ASSERT_TRUE(whole.is_ok()) << whole.status().message();
  for (int64_t k = 0; k <= spec.layers; ++k) {
    KvCache cache(m.config(), n);
    std::vector<float> hidden, logits;
    seen_pieces.clear();
    ASSERT_TRUE(forward_layers(m, cache, batch, 0, k, hidden, &pieces_observer).is_ok());
    ASSERT_EQ(hidden.size(), size_t(n * m.config().n_embd));
    // The second piece from a model holding only its layers.
    ModelLoadOptions only;
    only.only_layers = std::pair<int64_t, int64_t>{k, spec.layers};
    auto part = Model::load(*source, only);
    ASSERT_TRUE(part.is_ok()) << part.status().message();
    EXPECT_TRUE(part->token_embd().empty());
    std::vector<float> stream = hidden;
    ASSERT_TRUE(forward_layers(*part, cache, batch, k, spec.layers, stream).is_ok());
    ASSERT_TRUE(forward_layers(m, cache, batch, k, spec.layers, hidden, &pieces_observer, Pass::kDefault, &logits).is_ok());
    EXPECT_EQ(stream, hidden) << "k = " << k;
    EXPECT_EQ(logits, *whole) << "k = " << k;
    seen_pieces.erase("output.weight");
    std::map<std::string, std::vector<float>> expected = seen_whole;
    expected.erase("output.weight");
    EXPECT_EQ(seen_pieces, expected) << "k = " << k;
  }
}

TEST(ForwardLayers, RefusesBadRangesAndStreams) {
  const testing::TinyModelSpec spec{};
  const Model m = load(spec);
  const Batch batch = Batch::causal(kTokens, 0);
  KvCache cache(m.config(), int64_t(kTokens.size()));
  std::vector<float> empty, short_stream(5, 0.0f), logits;
  EXPECT_NE(forward_layers(m, cache, batch, 1, 2, empty).message().find("residual stream"), std::string::npos);
  EXPECT_NE(forward_layers(m, cache, batch, 0, 1, short_stream).message().find("residual stream"), std::string::npos);
  EXPECT_NE(forward_layers(m, cache, batch, 0, 3, empty).message().find("not within"), std::string::npos);
  EXPECT_NE(forward_layers(m, cache, batch, 0, 1, empty, nullptr, Pass::kDefault, &logits).message().find("last layer"),
            std::string::npos);
  ModelLoadOptions only;
  only.only_layers = std::pair<int64_t, int64_t>{1, 5};
  auto part = Model::load(*testing::tiny_weights(spec), only);
  ASSERT_FALSE(part.is_ok());
  EXPECT_NE(part.status().message().find("not within"), std::string::npos);
}

}  // namespace
}  // namespace bitsplit
