// The C API (engine/capi/include/bitsplit/bitsplit.h) over the engine: a model is an opened file with
// its tokenizer, loaded model and variant registry; a session is a decode::Session plus the
// state of the step-by-step API. Every entry point catches everything: no exception leaves.
#include "bitsplit/bitsplit.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <map>
#include <mutex>
#include <new>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "bitsplit/chat_prompt.h"
#include "bitsplit/chat_template.h"
#include "bitsplit/generation_args.h"
#include "bitsplit/loaded_model.h"
#include "bitsplit/logprobs.h"
#include "bitsplit/session.h"
#include "bitsplit/file_kind.h"
#include "bitsplit/variant.h"
#include "bitsplit/version.h"

namespace {

using namespace bitsplit;

thread_local std::string g_last_error;

bitsplit_status fail(bitsplit_status status, const std::string& message) {
  g_last_error = message;
  return status;
}

bitsplit_status invalid(const std::string& message) { return fail(BITSPLIT_ERR_INVALID_ARGUMENT, message); }

// Runs `body`, turning exceptions into statuses.
template <typename Body>
bitsplit_status guarded(Body&& body) {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    return fail(BITSPLIT_ERR_OUT_OF_MEMORY, "out of memory");
  } catch (const std::exception& e) {
    return fail(BITSPLIT_ERR_INTERNAL, std::string("internal error: ") + e.what());
  } catch (...) {
    return fail(BITSPLIT_ERR_INTERNAL, "internal error");
  }
}

// Where a versioned struct's field ends: the sizes a caller built against an older header has.
#define BITSPLIT_END_OF(type, field) (offsetof(type, field) + sizeof(type::field))

// The sizes a caller's versioned struct may declare (bitsplit.h, Conventions): the end of a field
// from the last of the struct's first version on (an older header's struct ends at one of them),
// or sizeof and more (this header, or a newer one with fields this library does not know). Any
// other size would copy part of a field (one byte of a pointer) or read fields the caller never
// set. `ends` lists the field ends from the first version's last, in order.
Status check_struct_size(const char* name, size_t size, size_t full, std::initializer_list<size_t> ends) {
  if (size >= full || std::find(ends.begin(), ends.end(), size) != ends.end()) return Status::ok();
  return Status::error(std::string(name) + ".size is " + std::to_string(size) + ": set it to sizeof(" + name + ") (" +
                       std::to_string(full) + " in this library's header; at least " +
                       std::to_string(*ends.begin()) + ", the first version's, and never inside a field)");
}

Status check_size(const bitsplit_model_params& p) {
  using T = bitsplit_model_params;
  return check_struct_size("bitsplit_model_params", p.size, sizeof(T),
                           {BITSPLIT_END_OF(T, progress_user_data), BITSPLIT_END_OF(T, target_activations)});
}

Status check_size(const bitsplit_session_params& p) {
  using T = bitsplit_session_params;
  return check_struct_size("bitsplit_session_params", p.size, sizeof(T),
                           {BITSPLIT_END_OF(T, n_ctx), BITSPLIT_END_OF(T, lookup), BITSPLIT_END_OF(T, reserved0),
                            BITSPLIT_END_OF(T, reuse_prefix)});
}

Status check_size(const bitsplit_generation_stats& s) {
  using T = bitsplit_generation_stats;
  return check_struct_size("bitsplit_generation_stats", s.size, sizeof(T),
                           {BITSPLIT_END_OF(T, tokens_per_check), BITSPLIT_END_OF(T, reused_tokens),
                            BITSPLIT_END_OF(T, draft_seconds), BITSPLIT_END_OF(T, verify_seconds),
                            BITSPLIT_END_OF(T, lookup_drafted_tokens), BITSPLIT_END_OF(T, lookup_accepted_tokens),
                            BITSPLIT_END_OF(T, n_depths), BITSPLIT_END_OF(T, reserved1),
                            BITSPLIT_END_OF(T, accepted_at_depth), BITSPLIT_END_OF(T, drafted_at_depth)});
}

Status check_size(const bitsplit_chat_params& p) {
  using T = bitsplit_chat_params;
  return check_struct_size("bitsplit_chat_params", p.size, sizeof(T), {BITSPLIT_END_OF(T, special_tokens_in_content)});
}

// A caller's parameters over the defaults: the whole fields its struct has (checked by size).
template <typename T>
Result<T> read_params(const T* given, const T& defaults) {
  T out = defaults;
  if (!given) return out;
  BITSPLIT_RETURN_IF_ERROR(check_size(*given));
  std::memcpy(static_cast<void*>(&out), given, std::min(given->size, sizeof(T)));
  out.size = sizeof(T);
  return out;
}

// Copies `items` into the caller's buffer of `capacity`, or fails with the size needed in *count.
template <typename T>
bitsplit_status copy_out(const std::vector<T>& items, T* out, size_t capacity, size_t* count, const char* what) {
  *count = items.size();
  if (items.size() > capacity) {
    return fail(BITSPLIT_ERR_BUFFER_TOO_SMALL, std::string(what) + " needs room for " + std::to_string(items.size()) +
                                                   ", the buffer has " + std::to_string(capacity));
  }
  std::copy(items.begin(), items.end(), out);
  return BITSPLIT_OK;
}

}  // namespace

struct bitsplit_model {
  LoadedModel loaded;
  std::unique_ptr<VariantRegistry> variants;
  // Sessions generating at once on the model: their forward passes run combined (one pass over
  // the weights for all their rows; the model's CpuContext is driven by one thread at a time).
  PassBatcher batcher;
  std::mutex strings_mu;
  std::map<std::string, std::string> strings;  // metadata values handed out (stable addresses)
};

struct bitsplit_session {
  bitsplit_session(bitsplit_model* m, std::shared_ptr<const Variant> variant, SessionOptions options,
                   const SamplingParams& sampling)
      : model(m), session(m->loaded.model, std::move(variant), stopping_on_abort(std::move(options))), sampling(sampling) {}
  bitsplit_model* model;
  std::atomic<bool> abort{false};  // (before `session`, whose prompt polls it)
  Session session;  // the variant and decoding options
  SamplingParams sampling;
  bitsplit_generation_stats last{};
  std::vector<std::pair<std::string, int64_t>> last_settings;  // the last generation's checks per setting
  // Set during a generation that reports log-probabilities: each generated token's raw logits.
  std::function<void(int32_t, std::span<const float>)> on_logits;
  // The step-by-step API's sequence.
  int64_t n_ctx = 0;
  std::optional<KvCache> cache;
  std::vector<int32_t> history;
  std::vector<float> logits;
  std::optional<Sampler> step_sampler;

 private:
  // A prompt stops between its chunks once the session is aborted: a long prompt runs in many
  // passes, and an abort must not wait for all of them.
  SessionOptions stopping_on_abort(SessionOptions options) {
    options.stop = [this] { return abort.load(); };
    options.on_logits = [this](int32_t token, std::span<const float> logits) {
      if (on_logits) on_logits(token, logits);
    };
    return options;
  }
};

extern "C" {

uint32_t bitsplit_api_version(void) { return BITSPLIT_API_VERSION; }

const char* bitsplit_version_string(void) { return BITSPLIT_VERSION_STRING; }

const char* bitsplit_last_error(void) { return g_last_error.c_str(); }

const char* bitsplit_status_name(bitsplit_status status) {
  switch (status) {
    case BITSPLIT_OK: return "ok";
    case BITSPLIT_ERR_INVALID_ARGUMENT: return "invalid argument";
    case BITSPLIT_ERR_LOAD: return "cannot load";
    case BITSPLIT_ERR_NOT_FOUND: return "not found";
    case BITSPLIT_ERR_CONTEXT_OVERFLOW: return "context overflow";
    case BITSPLIT_ERR_BUFFER_TOO_SMALL: return "buffer too small";
    case BITSPLIT_ERR_CANCELLED: return "cancelled";
    case BITSPLIT_ERR_ABORTED: return "aborted";
    case BITSPLIT_ERR_OUT_OF_MEMORY: return "out of memory";
    case BITSPLIT_ERR_INTERNAL: return "internal error";
  }
  return "unknown status";
}

void bitsplit_model_params_init(bitsplit_model_params* p) {
  if (!p) return;
  *p = bitsplit_model_params{};
  p->size = sizeof(*p);
  p->use_gpu = 1;
  p->target_activations = BITSPLIT_TARGET_ACTIVATIONS_DRAFT_REMAINDER;
}

bitsplit_status bitsplit_model_load(const char* path, const bitsplit_model_params* given, bitsplit_model** out) {
  return guarded([&] {
    if (!path || !out) return invalid("bitsplit_model_load: path and out_model must not be NULL");
    bitsplit_model_params defaults;
    bitsplit_model_params_init(&defaults);
    const Result<bitsplit_model_params> read = read_params(given, defaults);
    if (!read) return invalid(read.status().message());
    const bitsplit_model_params& p = *read;
    if (p.n_threads < 0) return invalid("n_threads must be >= 0 (0: one per physical core)");
    if (p.target_activations < BITSPLIT_TARGET_ACTIVATIONS_INT8 || p.target_activations > BITSPLIT_TARGET_ACTIVATIONS_REMAINDER) {
      return invalid("target_activations must be 0 (int8), 1 (draft-remainder) or 2 (remainder), not " +
                     std::to_string(p.target_activations));
    }
    ModelLoadOptions options;
    options.q8_0_kernels = true;
    options.target_activations = TargetActivations(p.target_activations);
    options.cpu = std::make_shared<cpu::CpuContext>(cpu::CpuContext::Options{.threads = p.n_threads});
    if (!p.use_gpu) options.backend = make_cpu_backend(options.cpu);
    bool cancelled = false;
    if (p.progress) {
      options.progress = [&](int64_t done, int64_t total) {
        cancelled = p.progress(p.progress_user_data, done, total) != 0;
        return !cancelled;
      };
    }
    std::optional<uint64_t> budget;
    if (p.vram_budget) budget = p.vram_budget;
    auto loaded = open_model(path, options, budget);
    if (!loaded) return fail(cancelled ? BITSPLIT_ERR_CANCELLED : BITSPLIT_ERR_LOAD, loaded.status().message());
    auto m = std::make_unique<bitsplit_model>();
    m->loaded = std::move(*loaded);
    m->variants = std::make_unique<VariantRegistry>(m->loaded.model, *m->loaded.source,
                                                    VariantCacheOptions{.budget_bytes = UINT64_MAX});
    *out = m.release();
    return BITSPLIT_OK;
  });
}

void bitsplit_model_free(bitsplit_model* model) { delete model; }

bitsplit_status bitsplit_model_add_variant(bitsplit_model* model, const char* name, const char* delta_path) {
  return guarded([&] {
    if (!model || !name || !delta_path) return invalid("bitsplit_model_add_variant: no argument may be NULL");
    if (Status st = model->variants->add(name, delta_path); !st) return fail(BITSPLIT_ERR_LOAD, st.message());
    return BITSPLIT_OK;
  });
}

bitsplit_status bitsplit_model_add_lora(bitsplit_model* model, const char* name, const char* lora_path, float scale) {
  return guarded([&] {
    if (!model || !name || !lora_path) return invalid("bitsplit_model_add_lora: no argument may be NULL");
    if (!std::isfinite(scale)) return invalid("bitsplit_model_add_lora: the scale must be a finite number");
    auto file = gguf::File::open(lora_path);
    if (!file) return fail(BITSPLIT_ERR_LOAD, file.status().message());
    auto kind = file_kind(file->metadata());
    if (!kind || *kind != FileKind::kAdapter) {
      return fail(BITSPLIT_ERR_LOAD, std::string(lora_path) + ": not a LoRA adapter (general.type must be 'adapter')");
    }
    if (Status st = model->variants->add(name, lora_path, scale); !st) return fail(BITSPLIT_ERR_LOAD, st.message());
    return BITSPLIT_OK;
  });
}

bitsplit_status bitsplit_model_remove_variant(bitsplit_model* model, const char* name) {
  return guarded([&] {
    if (!model || !name) return invalid("bitsplit_model_remove_variant: no argument may be NULL");
    if (Status st = model->variants->remove(name); !st) return fail(BITSPLIT_ERR_NOT_FOUND, st.message());
    return BITSPLIT_OK;
  });
}

int32_t bitsplit_model_variant_count(const bitsplit_model* model) {
  return model ? int32_t(model->variants->names().size()) : 0;
}

int32_t bitsplit_model_n_vocab(const bitsplit_model* m) { return m ? int32_t(m->loaded.model.config().n_vocab) : 0; }
int32_t bitsplit_model_n_ctx_train(const bitsplit_model* m) {
  return m ? int32_t(m->loaded.model.config().n_ctx_train) : 0;
}
int32_t bitsplit_model_n_layers(const bitsplit_model* m) { return m ? int32_t(m->loaded.model.config().n_layers) : 0; }
int32_t bitsplit_model_is_bitsplit(const bitsplit_model* m) { return m && m->loaded.model.has_planes() ? 1 : 0; }
bitsplit_token bitsplit_model_bos(const bitsplit_model* m) { return m ? m->loaded.tokenizer->vocab().bos : -1; }
bitsplit_token bitsplit_model_eos(const bitsplit_model* m) { return m ? m->loaded.tokenizer->vocab().eos : -1; }

const char* bitsplit_model_meta_string(const bitsplit_model* cm, const char* key) {
  if (!cm || !key) return nullptr;
  try {
    auto* m = const_cast<bitsplit_model*>(cm);
    auto value = m->loaded.source->metadata().get_string(key);
    if (!value) return nullptr;
    std::lock_guard<std::mutex> lock(m->strings_mu);
    return m->strings.try_emplace(key, std::move(*value)).first->second.c_str();  // handed out once, kept
  } catch (...) {
    return nullptr;
  }
}

const char* bitsplit_model_chat_template(const bitsplit_model* m) {
  return bitsplit_model_meta_string(m, "tokenizer.chat_template");
}

bitsplit_status bitsplit_tokenize(const bitsplit_model* m, const char* text, size_t length, int32_t add_special,
                                  int32_t parse_special, bitsplit_token* tokens, size_t capacity, size_t* n_tokens) {
  return guarded([&] {
    if (!m || (!text && length > 0) || !n_tokens || (!tokens && capacity > 0)) {
      return invalid("bitsplit_tokenize: model, text and n_tokens must not be NULL");
    }
    const std::vector<int32_t> ids = m->loaded.tokenizer->encode(
        std::string_view(text ? text : "", length), {.add_special = add_special != 0, .parse_special = parse_special != 0});
    *n_tokens = ids.size();
    if (ids.size() > capacity) {
      return fail(BITSPLIT_ERR_BUFFER_TOO_SMALL, "the text has " + std::to_string(ids.size()) + " tokens, the buffer room for " +
                                                     std::to_string(capacity));
    }
    std::copy(ids.begin(), ids.end(), tokens);
    return BITSPLIT_OK;
  });
}

bitsplit_status bitsplit_detokenize(const bitsplit_model* m, const bitsplit_token* tokens, size_t n, char* buf,
                                    size_t capacity, size_t* length) {
  return guarded([&] {
    if (!m || (!tokens && n > 0) || !length || (!buf && capacity > 0)) {
      return invalid("bitsplit_detokenize: model, tokens and length must not be NULL");
    }
    const int64_t vocab = m->loaded.model.config().n_vocab;
    std::string text;
    for (size_t i = 0; i < n; ++i) {
      if (tokens[i] < 0 || tokens[i] >= vocab) {
        return invalid("token " + std::to_string(tokens[i]) + " is outside the vocabulary (0.." + std::to_string(vocab - 1) + ")");
      }
      text += m->loaded.tokenizer->token_to_piece(tokens[i]);
    }
    *length = text.size();
    if (text.size() > capacity) {
      return fail(BITSPLIT_ERR_BUFFER_TOO_SMALL, "the text needs " + std::to_string(text.size()) + " bytes");
    }
    std::memcpy(buf, text.data(), text.size());
    return BITSPLIT_OK;
  });
}

void bitsplit_chat_params_init(bitsplit_chat_params* p) {
  if (!p) return;
  *p = bitsplit_chat_params{};
  p->size = sizeof(*p);
  p->add_generation_prompt = 1;
}

}  // extern "C"

namespace {

// What both chat entry points share: the parameters, the template and the messages, checked.
struct ChatInput {
  bitsplit_chat_params params;
  std::optional<ChatTemplate> chat_template;
  nlohmann::ordered_json messages;
};

bitsplit_status read_chat_input(const bitsplit_model* m, const char* messages_json, size_t length,
                                const bitsplit_chat_params* given, const char* fn, ChatInput& in) {
  if (!m || (!messages_json && length > 0)) return invalid(std::string(fn) + ": model and messages_json must not be NULL");
  bitsplit_chat_params defaults;
  bitsplit_chat_params_init(&defaults);
  const Result<bitsplit_chat_params> read = read_params(given, defaults);
  if (!read) return invalid(read.status().message());
  in.params = *read;
  std::string source;
  if (in.params.chat_template) {
    source = in.params.chat_template;
  } else if (const char* own = bitsplit_model_chat_template(m)) {
    source = own;
  } else {
    return fail(BITSPLIT_ERR_NOT_FOUND, "the model has no chat template (tokenizer.chat_template): give one in "
                                        "bitsplit_chat_params.chat_template");
  }
  auto parsed = ChatTemplate::parse(source);
  if (!parsed) return invalid("the chat template cannot be used: " + parsed.status().message());
  in.chat_template.emplace(std::move(*parsed));
  in.messages = nlohmann::ordered_json::parse(std::string_view(messages_json ? messages_json : "", length), nullptr,
                                              /*allow_exceptions=*/false);
  if (in.messages.is_discarded()) return invalid("messages_json is not valid JSON");
  if (!in.messages.is_array()) return invalid("messages_json must be a JSON array of messages");
  for (size_t i = 0; i < in.messages.size(); ++i) {
    if (!in.messages[i].is_object()) return invalid("message " + std::to_string(i) + " is not a JSON object");
  }
  return BITSPLIT_OK;
}

}  // namespace

extern "C" {

bitsplit_status bitsplit_chat_render(const bitsplit_model* m, const char* messages_json, size_t length,
                                     const bitsplit_chat_params* params, char* buf, size_t capacity, size_t* length_out) {
  return guarded([&] {
    if (!length_out || (!buf && capacity > 0)) return invalid("bitsplit_chat_render: length_out must not be NULL");
    ChatInput in;
    if (bitsplit_status st = read_chat_input(m, messages_json, length, params, "bitsplit_chat_render", in); st) return st;
    // The BOS and EOS texts as encode_chat (the server's) hands them to the template.
    const Tokenizer& tokenizer = *m->loaded.tokenizer;
    const auto& vocab = tokenizer.vocab();
    const std::string bos = vocab.bos >= 0 ? tokenizer.token_to_piece(vocab.bos) : "";
    const std::string eos = vocab.eos >= 0 ? tokenizer.token_to_piece(vocab.eos) : "";
    auto text = in.chat_template->render_chat(in.messages, in.params.add_generation_prompt != 0, bos, eos);
    if (!text) return invalid("the chat template refused the conversation: " + text.status().message());
    return copy_out(std::vector<char>(text->begin(), text->end()), buf, capacity, length_out, "the rendered conversation");
  });
}

bitsplit_status bitsplit_chat_tokenize(const bitsplit_model* m, const char* messages_json, size_t length,
                                       const bitsplit_chat_params* params, bitsplit_token* tokens, size_t capacity,
                                       size_t* n_tokens) {
  return guarded([&] {
    if (!n_tokens || (!tokens && capacity > 0)) return invalid("bitsplit_chat_tokenize: n_tokens must not be NULL");
    ChatInput in;
    if (bitsplit_status st = read_chat_input(m, messages_json, length, params, "bitsplit_chat_tokenize", in); st) return st;
    auto ids = serve::encode_chat(*in.chat_template, *m->loaded.tokenizer, in.messages,
                                  {.add_generation_prompt = in.params.add_generation_prompt != 0,
                                   .special_tokens_in_content = in.params.special_tokens_in_content != 0});
    if (!ids) return invalid("the chat template refused the conversation: " + ids.status().message());
    return copy_out(*ids, tokens, capacity, n_tokens, "the conversation's tokens");
  });
}

void bitsplit_session_params_init(bitsplit_session_params* p) {
  if (!p) return;
  *p = bitsplit_session_params{};
  p->size = sizeof(*p);
  const SamplingParams s;
  p->temperature = s.temperature;
  p->top_k = s.top_k;
  p->top_p = s.top_p;
  p->min_p = s.min_p;
  p->repeat_penalty = s.repeat_penalty;
  p->repeat_last_n = s.repeat_last_n;
  p->seed = s.seed;
  p->speculative = 1;
  p->lookup = -1;
  p->reuse_prefix = 1;
}

bitsplit_status bitsplit_session_create(bitsplit_model* model, const bitsplit_session_params* given,
                                        bitsplit_session** out) {
  return guarded([&] {
    if (!model || !out) return invalid("bitsplit_session_create: model and out_session must not be NULL");
    bitsplit_session_params defaults;
    bitsplit_session_params_init(&defaults);
    const Result<bitsplit_session_params> read = read_params(given, defaults);
    if (!read) return invalid(read.status().message());
    const bitsplit_session_params& p = *read;
    GenerationArgs args;
    args.sampling = {p.temperature, p.top_k, p.top_p, p.min_p, p.repeat_penalty, p.repeat_last_n, p.seed};
    args.seed = p.seed;
    args.speculative = p.speculative != 0;
    if (p.budget != 0) args.budget = p.budget;  // 0: chosen online
    if (p.lookup != -1) args.lookup = p.lookup;  // -1: the default
    args.shape = p.draft_chain ? spec::DraftShape::kChain : spec::DraftShape::kTree;
    args.reuse_prefix = p.reuse_prefix != 0;
    auto config = generation_config(args);
    if (!config) return invalid(config.status().message());
    std::shared_ptr<const Variant> variant;
    if (p.variant) {
      auto v = model->variants->get(p.variant);
      if (!v) return fail(model->variants->contains(p.variant) ? BITSPLIT_ERR_LOAD : BITSPLIT_ERR_NOT_FOUND, v.status().message());
      variant = *v;
    }
    SessionOptions options = config->session;
    options.batcher = &model->batcher;
    const int64_t ctx_train = model->loaded.model.config().n_ctx_train;
    if (p.n_ctx < 0 || p.n_ctx > ctx_train) {
      return invalid("n_ctx must be 0 (the model's) or 1.." + std::to_string(ctx_train) + ", not " + std::to_string(p.n_ctx));
    }
    auto s = std::make_unique<bitsplit_session>(model, std::move(variant), options, config->sampling);
    s->n_ctx = p.n_ctx > 0 ? p.n_ctx : ctx_train;
    if (Status st = s->session.validate(); !st) return invalid(st.message());
    *out = s.release();
    return BITSPLIT_OK;
  });
}

void bitsplit_session_free(bitsplit_session* session) { delete session; }

void bitsplit_session_abort(bitsplit_session* session) {
  if (session) session->abort.store(true);
}

bitsplit_status bitsplit_session_stats(const bitsplit_session* s, bitsplit_generation_stats* stats) {
  if (!s || !stats) return invalid("bitsplit_session_stats: session and stats must not be NULL");
  if (Status st = check_size(*stats); !st) return invalid(st.message());
  const size_t n = std::min(stats->size, sizeof(*stats));
  std::memcpy(static_cast<void*>(stats), &s->last, n);
  stats->size = n;
  return BITSPLIT_OK;
}

bitsplit_status bitsplit_session_setting_checks(const bitsplit_session* s, int32_t index, const char** name,
                                                int64_t* checks) {
  if (!s || !name || !checks) return invalid("bitsplit_session_setting_checks: no argument may be NULL");
  if (index < 0 || size_t(index) >= s->last_settings.size()) {
    return fail(BITSPLIT_ERR_NOT_FOUND, "the last generation checked with " + std::to_string(s->last_settings.size()) +
                                            " draft settings; there is none at index " + std::to_string(index));
  }
  *name = s->last_settings[size_t(index)].first.c_str();
  *checks = s->last_settings[size_t(index)].second;
  return BITSPLIT_OK;
}

bitsplit_status bitsplit_session_generate(bitsplit_session* s, const bitsplit_token* prompt, size_t n_prompt,
                                          int32_t n_predict, bitsplit_token_callback callback, void* user_data,
                                          bitsplit_generation_stats* stats) {
  return bitsplit_session_generate_logprobs(s, prompt, n_prompt, n_predict, 0, nullptr, callback, user_data, stats);
}

bitsplit_status bitsplit_session_generate_logprobs(bitsplit_session* s, const bitsplit_token* prompt, size_t n_prompt,
                                                   int32_t n_predict, int32_t top_logprobs,
                                                   bitsplit_logprob_callback logprob_callback,
                                                   bitsplit_token_callback callback, void* user_data,
                                                   bitsplit_generation_stats* stats) {
  return guarded([&] {
    if (!s || (!prompt && n_prompt > 0)) return invalid("bitsplit_session_generate: session and prompt must not be NULL");
    if (top_logprobs < 0 || top_logprobs > BITSPLIT_MAX_TOP_LOGPROBS) {
      return invalid("top_logprobs must be 0.." + std::to_string(BITSPLIT_MAX_TOP_LOGPROBS) + ", not " +
                     std::to_string(top_logprobs));
    }
    if (stats) {  // refused before anything runs, not after the generation
      if (Status st = check_size(*stats); !st) return invalid(st.message());
    }
    bitsplit_model& m = *s->model;
    const ModelConfig& c = m.loaded.model.config();
    if (Status st = check_generation(c, n_prompt, n_predict, s->session.options().prefill_chunk); !st) {
      const bool overflow = n_prompt > 0 && n_predict >= 0 && int64_t(n_prompt) + n_predict > c.n_ctx_train;
      return fail(overflow ? BITSPLIT_ERR_CONTEXT_OVERFLOW : BITSPLIT_ERR_INVALID_ARGUMENT, st.message());
    }
    for (size_t i = 0; i < n_prompt; ++i) {
      if (prompt[i] < 0 || prompt[i] >= c.n_vocab) {
        return invalid("prompt token " + std::to_string(prompt[i]) + " is outside the vocabulary");
      }
    }
    s->abort.store(false);
    const int32_t eos = m.loaded.tokenizer->vocab().eos;
    Utf8StreamDecoder stream;
    bool stopped_by_abort = false;
    // The token's log-probability, computed from its logits (which come just before the token)
    // and handed over with the token, so that a token refused on abort reports none.
    std::optional<serve::TokenLogprob> pending;
    struct Unhook {
      bitsplit_session* s;
      ~Unhook() { s->on_logits = nullptr; }
    } unhook{s};
    if (logprob_callback) {
      s->on_logits = [&](int32_t token, std::span<const float> logits) {
        pending = serve::token_logprob(logits, token, top_logprobs);
      };
    }
    std::vector<bitsplit_token> top_tokens;
    std::vector<float> top_values;
    auto on_token = [&](int32_t token) {
      if (s->abort.load()) {
        stopped_by_abort = true;
        return false;
      }
      if (logprob_callback && pending && pending->token == token) {
        top_tokens.clear();
        top_values.clear();
        for (const auto& [id, lp] : pending->top) {
          top_tokens.push_back(id);
          top_values.push_back(lp);
        }
        logprob_callback(user_data, token, pending->logprob, top_tokens.data(), top_values.data(),
                         int32_t(top_tokens.size()));
        pending.reset();
      }
      if (!callback) return true;
      const std::string text = token == eos ? std::string() : stream.push(m.loaded.tokenizer->token_to_piece(token));
      return callback(user_data, token, text.data(), text.size()) == 0;
    };
    Sampler sampler(s->sampling);
    Result<SessionResult> r = s->session.generate(std::span<const int32_t>(prompt, n_prompt), n_predict, eos, sampler, on_token);
    if (!r) return fail(BITSPLIT_ERR_INTERNAL, r.status().message());
    // Aborted in the prompt (between two of its chunks), or after a pass, its first token refused.
    const bool aborted = stopped_by_abort || r->generation.stopped;
    const std::string tail = stream.flush();
    if (callback && !tail.empty() && !aborted) callback(user_data, -1, tail.data(), tail.size());
    bitsplit_generation_stats st{};
    st.size = sizeof(st);
    st.prompt_tokens = r->generation.prompt_tokens;
    st.prompt_seconds = r->generation.prompt_seconds;
    // A token refused because of an abort was counted but not delivered.
    st.generated_tokens = r->generation.generated_tokens - (stopped_by_abort ? 1 : 0);
    st.generate_seconds = r->generation.generate_seconds;
    st.stopped_at_eos = r->generation.stopped_at_eos ? 1 : 0;
    st.reused_tokens = r->generation.reused_tokens;
    if (r->speculative) {
      const auto& a = r->speculative->acceptance;
      st.speculative = 1;
      st.checks = a.checks;
      st.drafted_tokens = a.drafted;
      st.accepted_tokens = a.accepted;
      st.tokens_per_check = a.tokens_per_check();
      st.draft_seconds = a.draft_seconds;
      st.verify_seconds = a.verify_seconds;
      st.lookup_drafted_tokens = a.lookup_drafted;
      st.lookup_accepted_tokens = a.lookup_accepted;
      const size_t depths = std::min({a.accepted_at_depth.size(), a.drafted_at_depth.size(), size_t(BITSPLIT_MAX_DRAFT_DEPTH)});
      st.n_depths = int32_t(depths);
      std::copy_n(a.accepted_at_depth.begin(), depths, st.accepted_at_depth);
      std::copy_n(a.drafted_at_depth.begin(), depths, st.drafted_at_depth);
      s->last_settings = r->speculative->checks_per_setting;
    } else {
      s->last_settings.clear();
    }
    s->last = st;
    if (stats) (void)bitsplit_session_stats(s, stats);
    if (aborted) return fail(BITSPLIT_ERR_ABORTED, "the generation was aborted");
    return BITSPLIT_OK;
  });
}

bitsplit_status bitsplit_session_feed(bitsplit_session* s, const bitsplit_token* tokens, size_t n) {
  return guarded([&] {
    if (!s || (!tokens && n > 0)) return invalid("bitsplit_session_feed: session and tokens must not be NULL");
    if (n == 0) return BITSPLIT_OK;
    bitsplit_model& m = *s->model;
    const ModelConfig& c = m.loaded.model.config();
    for (size_t i = 0; i < n; ++i) {
      if (tokens[i] < 0 || tokens[i] >= c.n_vocab) return invalid("token " + std::to_string(tokens[i]) + " is outside the vocabulary");
    }
    const int64_t past = int64_t(s->history.size());
    if (past + int64_t(n) > s->n_ctx) {
      return fail(BITSPLIT_ERR_CONTEXT_OVERFLOW, std::to_string(past) + " tokens + " + std::to_string(n) +
                                                     " more exceed the session's context of " + std::to_string(s->n_ctx));
    }
    if (!s->cache) s->cache.emplace(c, s->n_ctx);
    if (!s->step_sampler) s->step_sampler.emplace(s->sampling);
    std::vector<float> logits;
    {
      auto r = prefill(m.loaded.model, *s->cache, std::span<const int32_t>(tokens, n), s->session.options().prefill_chunk,
                       Pass::kDefault, s->session.variant(), true, int32_t(past), &m.batcher);
      if (!r) return fail(BITSPLIT_ERR_INTERNAL, r.status().message());
      logits = std::move(r->logits);
    }
    s->history.insert(s->history.end(), tokens, tokens + n);
    s->logits = std::move(logits);
    return BITSPLIT_OK;
  });
}

bitsplit_status bitsplit_session_logits(bitsplit_session* s, const float** logits, int32_t* n_vocab) {
  if (!s || !logits) return invalid("bitsplit_session_logits: session and logits must not be NULL");
  if (s->logits.empty()) return invalid("no logits yet: feed tokens first");
  *logits = s->logits.data();
  if (n_vocab) *n_vocab = int32_t(s->logits.size());
  return BITSPLIT_OK;
}

bitsplit_status bitsplit_session_sample(bitsplit_session* s, bitsplit_token* token) {
  return guarded([&] {
    if (!s || !token) return invalid("bitsplit_session_sample: session and token must not be NULL");
    if (s->logits.empty()) return invalid("no logits yet: feed tokens first");
    *token = s->step_sampler->sample(s->logits, s->history);
    return BITSPLIT_OK;
  });
}

void bitsplit_session_reset(bitsplit_session* s) {
  if (!s) return;
  s->history.clear();
  s->logits.clear();
  s->step_sampler.reset();
  s->session.forget();
}

int32_t bitsplit_session_n_past(const bitsplit_session* s) { return s ? int32_t(s->history.size()) : 0; }

}  // extern "C"
