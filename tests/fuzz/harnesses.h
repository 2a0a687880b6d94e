// Every fuzz harness by target name, for tests/fuzz/fuzz_regression_test.cpp (the libFuzzer targets
// each include their own harness_*.h).
#pragma once

#include <string>

#include "harness_chat_template.h"
#include "harness_delta.h"
#include "harness_gguf.h"
#include "harness_http_request.h"
#include "harness_imatrix.h"
#include "harness_lora.h"
#include "harness_model.h"
#include "harness_openai_request.h"
#include "harness_options.h"
#include "harness_safetensors.h"
#include "harness_split_set.h"
#include "harness_tokenizer.h"

namespace bitsplit::fuzz {

using Harness = int (*)(const uint8_t* data, size_t size);

// nullptr for an unknown name.
inline Harness harness(const std::string& target) {
  if (target == "gguf") return run_gguf;
  if (target == "model") return run_model;
  if (target == "delta") return run_delta;
  if (target == "imatrix") return run_imatrix;
  if (target == "tokenizer_encode") return run_tokenizer_encode;
  if (target == "tokenizer_metadata") return run_tokenizer_metadata;
  if (target == "tokenizer_json") return run_tokenizer_json;
  if (target == "options") return run_options;
  if (target == "chat_template") return run_chat_template;
  if (target == "openai_request") return run_openai_request;
  if (target == "split_set") return run_split_set;
  if (target == "lora") return run_lora;
  if (target == "http_request") return run_http_request;
  if (target == "safetensors") return run_safetensors;
  return nullptr;
}

}  // namespace bitsplit::fuzz
