// Prompt sets for `bitsplit bench accept`: a text file (one prompt per line) or JSONL with
// categories and chat turns (bench/prompts/spec-bench.jsonl), tokenised as the benchmark feeds them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "bitsplit/status.h"
#include "bitsplit/tokenizer.h"

namespace bitsplit::cli {

struct BenchPrompt {
  size_t category = 0;  // index into PromptSet::categories
  std::vector<int32_t> tokens;
  std::string text;  // as rendered and tokenised (ChatML special tokens parsed)
};

struct PromptSet {
  std::vector<BenchPrompt> prompts;
  std::vector<std::string> categories;  // in order of first appearance; "all" for a text file
  std::string format;                   // "text" or "jsonl"
  std::string rendering;                // "text", "chatml" or "plain"
  int32_t stop_token = -1;              // generation stops after it (-1: never)
};

// A text file (one prompt per line, encoded as it is) or, by the extension .jsonl, prompts with
// categories and turns: rendered as ChatML when the vocabulary has <|im_start|>/<|im_end|>
// (generation then stops at <|im_end|> unless ignore_eos), else as the turns' text joined with
// blank lines.
Result<PromptSet> read_prompts(const std::string& path, const std::string& text, const Tokenizer& tokenizer,
                               bool ignore_eos);

// DIR/NNNN.txt per prompt, exactly the text tokenised (ChatML with special-token text: run it with
// `bitsplit run --parse-special -f`, or llama.cpp, which parses special tokens in prompts), and
// DIR/prompts.tsv: file, category, prompt tokens, and the token that ends generation.
Status render_prompts(const PromptSet& set, const Tokenizer& tokenizer, const std::string& dir);

}  // namespace bitsplit::cli
