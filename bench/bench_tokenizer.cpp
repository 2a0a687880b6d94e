// Tokenizer throughput (bytes/s of input) on 1 MiB of mixed text: prose, C++, numbers, CJK /
// Cyrillic / emoji, for the vocabularies in ../shared/models/vocab.
//
// Usage: taskset -c 1 ./build/bench/bench_tokenizer [--benchmark_filter=gpt-2]
// BITSPLIT_BENCH_PROSE=FILE replaces the built-in prose (the repo's Markdown) with FILE's text.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "../engine/text/tokenizer_pretok.h"
#include "bitsplit/gguf.h"
#include "bitsplit/tokenizer.h"

namespace {

namespace fs = std::filesystem;

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string shared_dir() {
  const char* env = std::getenv("BITSPLIT_SHARED_DIR");
  const std::string dir = env && *env ? env : BITSPLIT_SHARED_DIR;
  return fs::is_directory(dir) ? dir : std::string();
}

// Paragraphs of a text (split at blank lines).
std::vector<std::string> paragraphs(const std::string& text) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find("\n\n", pos);
    if (end == std::string::npos) end = text.size();
    if (end > pos) out.push_back(text.substr(pos, end - pos) + "\n\n");
    pos = end + 2;
  }
  return out;
}

std::vector<std::string> files_under(const fs::path& root, const std::vector<std::string>& dirs, const char* ext) {
  std::vector<std::string> out;
  for (const std::string& d : dirs) {
    if (!fs::is_directory(root / d)) continue;
    std::vector<fs::path> paths;
    for (const auto& e : fs::directory_iterator(root / d)) {
      if (e.path().extension() == ext) paths.push_back(e.path());
    }
    std::sort(paths.begin(), paths.end());
    for (const auto& p : paths) out.push_back(read_file(p));
  }
  return out;
}

// 1 MiB cycling through prose (~40%), code (~35%), numbers (~15%) and non-Latin text (~10%).
std::string mixed_corpus(const std::string& shared) {
  const fs::path src = BITSPLIT_SOURCE_DIR;
  std::vector<std::string> prose;
  if (const char* file = std::getenv("BITSPLIT_BENCH_PROSE"); file && *file) {
    prose = paragraphs(read_file(file));
  } else {
    for (const std::string& md : files_under(src, {".", "docs"}, ".md")) {
      for (std::string& p : paragraphs(md)) prose.push_back(std::move(p));
    }
  }
  std::vector<std::string> code;
  for (const std::string& f : files_under(src, {"engine", "include/bitsplit", "cpu", "quant", "tools"}, ".cpp")) {
    for (std::string& p : paragraphs(f)) code.push_back(std::move(p));
  }
  std::vector<std::string> world = paragraphs(read_file(shared + "/models/vocab/ggml-vocab-gpt-2.gguf.inp"));
  world.push_back("机器学习模型在推理时需要大量内存。我们把权重分成两部分：一部分放在显存里，另一部分放在内存里。\n");
  world.push_back("東京の天気は晴れです。今日は散歩に行きましょう 🌸🍵 그리고 한국어도 조금 있습니다.\n");
  world.push_back("Всё смешалось в доме Облонских. 🚀🔥✨ Ελληνικά γράμματα, עִבְרִית, العربية.\n");
  if (prose.empty() || code.empty()) return {};

  std::mt19937 rng(7);
  std::string out;
  const size_t target = size_t(1) << 20;
  size_t ip = 0, ic = 0, iw = 0;
  while (out.size() < target) {
    for (int k = 0; k < 4; ++k) out += prose[ip++ % prose.size()];
    for (int k = 0; k < 4; ++k) out += code[ic++ % code.size()];
    std::uniform_int_distribution<int> d(0, 999999);
    for (int k = 0; k < 12; ++k) {
      out += std::to_string(d(rng)) + "." + std::to_string(d(rng) % 100) + (k % 4 == 3 ? "\n" : ", ");
    }
    out += "2026-" + std::to_string(1 + d(rng) % 12) + "-" + std::to_string(1 + d(rng) % 28) + " 0x" +
           std::to_string(d(rng)) + "\n";
    out += world[iw++ % world.size()];
  }
  out.resize(target);
  // Do not end inside a multi-byte character.
  while (!out.empty() && (static_cast<unsigned char>(out.back()) & 0xc0) == 0x80) out.pop_back();
  if (!out.empty() && static_cast<unsigned char>(out.back()) >= 0xc0) out.pop_back();
  return out;
}

std::string g_corpus;

void BM_Encode(benchmark::State& state, std::shared_ptr<bitsplit::Tokenizer> tok) {
  size_t n_tokens = 0;
  for (auto _ : state) {
    const auto ids = tok->encode(g_corpus, {.add_special = false});
    n_tokens = ids.size();
    benchmark::DoNotOptimize(ids.data());
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(g_corpus.size()));
  state.counters["tokens"] = double(n_tokens);
  state.counters["bytes/token"] = double(g_corpus.size()) / double(n_tokens);
}

// Random lowercase "words": almost none repeats, so the per-call word cache never helps and
// every word goes through the merge loop (a lower bound for text in the vocabulary's script).
void BM_EncodeRandomWords(benchmark::State& state, std::shared_ptr<bitsplit::Tokenizer> tok) {
  std::mt19937 rng(9);
  std::string text;
  while (text.size() < g_corpus.size()) {
    const int n = 3 + int(rng() % 8);
    for (int i = 0; i < n; ++i) text += char('a' + rng() % 26);
    text += ' ';
  }
  for (auto _ : state) {
    const auto ids = tok->encode(text, {.add_special = false});
    benchmark::DoNotOptimize(ids.data());
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(text.size()));
}

void BM_Decode(benchmark::State& state, std::shared_ptr<bitsplit::Tokenizer> tok) {
  const auto ids = tok->encode(g_corpus, {.add_special = false});
  for (auto _ : state) {
    bitsplit::Utf8StreamDecoder d;
    size_t bytes = 0;
    for (int32_t id : ids) bytes += d.push(tok->token_to_piece(id)).size();
    benchmark::DoNotOptimize(bytes);
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(g_corpus.size()));
}

// The regex stage alone (GPT-2's pattern), to show where the time goes.
void BM_PreTokenizeGpt2(benchmark::State& state) {
  auto pre = bitsplit::PreTokenizer::compile({bitsplit::kGpt2Pattern});
  if (!pre) {
    state.SkipWithError(pre.status().message().c_str());
    return;
  }
  std::vector<std::string_view> pieces;
  for (auto _ : state) {
    pieces.clear();
    pre->split(g_corpus, pieces);
    benchmark::DoNotOptimize(pieces.data());
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(g_corpus.size()));
  state.counters["pieces"] = double(pieces.size());
  state.counters["jit"] = pre->uses_jit() ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  const std::string shared = shared_dir();
  if (shared.empty()) {
    std::fprintf(stderr, "bench_tokenizer: %s not found; the vocabularies come from ../shared, nothing to run\n",
                 BITSPLIT_SHARED_DIR);
    return 0;
  }
  g_corpus = mixed_corpus(shared);
  if (g_corpus.empty()) {
    std::fprintf(stderr, "bench_tokenizer: no corpus text found under %s\n", BITSPLIT_SOURCE_DIR);
    return 1;
  }
  benchmark::RegisterBenchmark("BM_PreTokenizeGpt2", BM_PreTokenizeGpt2)->Unit(benchmark::kMillisecond);
  for (const char* name : {"gpt-2", "llama-spm", "starcoder", "falcon", "deepseek-coder", "deepseek-llm", "mpt"}) {
    const std::string path = shared + "/models/vocab/ggml-vocab-" + name + ".gguf";
    auto file = bitsplit::gguf::File::open(path);
    if (!file) continue;
    auto tok = bitsplit::Tokenizer::from_metadata(file->metadata());
    if (!tok) {
      std::fprintf(stderr, "bench_tokenizer: %s: %s\n", name, tok.status().message().c_str());
      continue;
    }
    std::shared_ptr<bitsplit::Tokenizer> shared_tok = std::move(*tok);
    benchmark::RegisterBenchmark((std::string("BM_Encode/") + name).c_str(), BM_Encode, shared_tok)
        ->Unit(benchmark::kMillisecond);
    if (std::string(name) == "gpt-2") {
      benchmark::RegisterBenchmark("BM_EncodeRandomWords/gpt-2", BM_EncodeRandomWords, shared_tok)
          ->Unit(benchmark::kMillisecond);
      benchmark::RegisterBenchmark("BM_Decode/gpt-2", BM_Decode, shared_tok)->Unit(benchmark::kMillisecond);
    }
  }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
