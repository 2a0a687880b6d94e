// The C API (engine/capi/include/bitsplit/bitsplit.h) over the engine: a model is an opened file with
// its tokenizer, loaded model and variant registry; a session is a decode::Session plus the
// state of the step-by-step API. Every entry point catches everything: no exception leaves.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "bitsplit/file_kind.h"
#include "bitsplit/generation_args.h"
#include "bitsplit/logprobs.h"
#include "bitsplit/stop_strings.h"
#include "bitsplit/version.h"
#include "capi_internal.h"

using namespace bitsplit;
using namespace bitsplit::capi;

namespace bitsplit::capi {

std::string& last_error() {
  thread_local std::string message;
  return message;
}

const char* keep_string(bitsplit_model& model, const std::string& slot, std::string text) {
  std::lock_guard<std::mutex> lock(model.strings_mu);
  return model.strings.try_emplace(slot, std::move(text)).first->second.c_str();
}

// Where a versioned struct's field ends: the sizes a caller built against an older header has.
#define BITSPLIT_END_OF(type, field) (offsetof(type, field) + sizeof(type::field))

namespace {

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

}  // namespace

Status check_size(const bitsplit_model_params& p) {
  using T = bitsplit_model_params;
  return check_struct_size("bitsplit_model_params", p.size, sizeof(T),
                           {BITSPLIT_END_OF(T, progress_user_data), BITSPLIT_END_OF(T, target_activations),
                            BITSPLIT_END_OF(T, reserved0), BITSPLIT_END_OF(T, mlock)});
}

Status check_size(const bitsplit_session_params& p) {
  using T = bitsplit_session_params;
  return check_struct_size("bitsplit_session_params", p.size, sizeof(T),
                           {BITSPLIT_END_OF(T, n_ctx), BITSPLIT_END_OF(T, lookup), BITSPLIT_END_OF(T, reserved0),
                            BITSPLIT_END_OF(T, reuse_prefix), BITSPLIT_END_OF(T, reserved1),
                            BITSPLIT_END_OF(T, base_draft), BITSPLIT_END_OF(T, n_stop), BITSPLIT_END_OF(T, stop)});
}

Status check_size(const bitsplit_generation_stats& s) {
  using T = bitsplit_generation_stats;
  return check_struct_size("bitsplit_generation_stats", s.size, sizeof(T),
                           {BITSPLIT_END_OF(T, tokens_per_check), BITSPLIT_END_OF(T, reused_tokens),
                            BITSPLIT_END_OF(T, draft_seconds), BITSPLIT_END_OF(T, verify_seconds),
                            BITSPLIT_END_OF(T, lookup_drafted_tokens), BITSPLIT_END_OF(T, lookup_accepted_tokens),
                            BITSPLIT_END_OF(T, n_depths), BITSPLIT_END_OF(T, reserved1),
                            BITSPLIT_END_OF(T, accepted_at_depth), BITSPLIT_END_OF(T, drafted_at_depth),
                            BITSPLIT_END_OF(T, stopped_at_stop), BITSPLIT_END_OF(T, reserved2)});
}

Status check_size(const bitsplit_chat_params& p) {
  using T = bitsplit_chat_params;
  return check_struct_size("bitsplit_chat_params", p.size, sizeof(T), {BITSPLIT_END_OF(T, special_tokens_in_content)});
}

// The struct layouts the size rule relies on: a field added to a struct whose end was padding
// would be read from an older caller's padding; a reserved field fills it first.
static_assert(sizeof(void*) != 8 || (offsetof(bitsplit_model_params, mlock) == 56 && sizeof(bitsplit_model_params) == 64));
static_assert(sizeof(void*) != 8 ||
              (offsetof(bitsplit_session_params, base_draft) == 80 && sizeof(bitsplit_session_params) == 96));
static_assert(sizeof(bitsplit_generation_stats) % 8 == 0);

}  // namespace bitsplit::capi

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
  std::vector<std::string> stops;  // stop strings (bitsplit_session_set_stop), none empty
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

namespace {

// bitsplit_model_params.mlock: the planes pinned in RAM, or the engine's error naming the
// locked-memory limit (its advice worded for this API rather than the CLI's --mlock).
bitsplit_status lock_planes(bitsplit_model& m) {
  if (!m.loaded.model.has_planes()) {
    return invalid("mlock pins a bit-split model's planes; this model has none (convert it with `bitsplit convert` "
                   "first, or load it without mlock)");
  }
  auto locked = m.loaded.model.lock_planes();
  if (!locked) {
    std::string message = locked.status().message();
    const std::string cli_advice = "or run without --mlock";
    if (const size_t at = message.rfind(cli_advice); at != std::string::npos) {
      message.replace(at, cli_advice.size(), "or load without mlock");
    }
    return fail(BITSPLIT_ERR_LOAD, "mlock: " + message);
  }
  m.locked_bytes = *locked;
  return BITSPLIT_OK;
}

// Stop strings from the caller's array (copied; empty ones dropped), or an error for a NULL entry.
Result<std::vector<std::string>> read_stops(const char* const* stop, size_t n) {
  std::vector<std::string> out;
  if (n > 0 && !stop) return Status::error("stop is NULL with " + std::to_string(n) + " stop strings");
  for (size_t i = 0; i < n; ++i) {
    if (!stop[i]) return Status::error("stop string " + std::to_string(i) + " is NULL");
    if (*stop[i]) out.emplace_back(stop[i]);
  }
  return out;
}

// A generation's statistics as bitsplit_generation_stats reports them. A token refused because of
// an abort was counted by the session but not delivered.
bitsplit_generation_stats generation_stats(const SessionResult& r, bool stopped_by_abort, bool stopped_at_stop) {
  bitsplit_generation_stats st{};
  st.size = sizeof(st);
  st.prompt_tokens = r.generation.prompt_tokens;
  st.prompt_seconds = r.generation.prompt_seconds;
  st.generated_tokens = r.generation.generated_tokens - (stopped_by_abort ? 1 : 0);
  st.generate_seconds = r.generation.generate_seconds;
  st.stopped_at_eos = r.generation.stopped_at_eos ? 1 : 0;
  st.reused_tokens = r.generation.reused_tokens;
  st.stopped_at_stop = stopped_at_stop ? 1 : 0;
  if (!r.speculative) return st;
  const auto& a = r.speculative->acceptance;
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
  return st;
}

}  // namespace

extern "C" {

uint32_t bitsplit_api_version(void) { return BITSPLIT_API_VERSION; }

const char* bitsplit_version_string(void) { return BITSPLIT_VERSION_STRING; }

const char* bitsplit_last_error(void) { return last_error().c_str(); }

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
    if (p.mlock) {
      if (bitsplit_status st = lock_planes(*m); st != BITSPLIT_OK) return st;
    }
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

int32_t bitsplit_model_n_vocab(const bitsplit_model* m) { return m ? int32_t(m->loaded.model.config().n_vocab) : 0; }
int32_t bitsplit_model_n_ctx_train(const bitsplit_model* m) {
  return m ? int32_t(m->loaded.model.config().n_ctx_train) : 0;
}
int32_t bitsplit_model_n_layers(const bitsplit_model* m) { return m ? int32_t(m->loaded.model.config().n_layers) : 0; }
int32_t bitsplit_model_is_bitsplit(const bitsplit_model* m) { return m && m->loaded.model.has_planes() ? 1 : 0; }
bitsplit_token bitsplit_model_bos(const bitsplit_model* m) { return m ? m->loaded.tokenizer->vocab().bos : -1; }
bitsplit_token bitsplit_model_eos(const bitsplit_model* m) { return m ? m->loaded.tokenizer->vocab().eos : -1; }

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
    args.base_draft = p.base_draft != 0;
    if (p.n_stop < 0) return invalid("n_stop must be >= 0, not " + std::to_string(p.n_stop));
    auto stops = read_stops(p.stop, size_t(p.n_stop));
    if (!stops) return invalid(stops.status().message());
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
    s->stops = std::move(*stops);
    if (Status st = s->session.validate(); !st) return invalid(st.message());
    *out = s.release();
    return BITSPLIT_OK;
  });
}

void bitsplit_session_free(bitsplit_session* session) { delete session; }

bitsplit_status bitsplit_session_set_stop(bitsplit_session* session, const char* const* stop, size_t n) {
  return guarded([&] {
    if (!session) return invalid("bitsplit_session_set_stop: session must not be NULL");
    auto stops = read_stops(stop, n);
    if (!stops) return invalid(stops.status().message());
    session->stops = std::move(*stops);
    return BITSPLIT_OK;
  });
}

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
    // Text that could begin a stop string waits in the matcher until it cannot.
    serve::StopMatcher stop_matcher(s->stops);
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
      if (!callback && s->stops.empty()) return true;
      std::string text = token == eos ? std::string() : stream.push(m.loaded.tokenizer->token_to_piece(token));
      if (!s->stops.empty()) text = stop_matcher.push(text);
      const bool go_on = !callback || callback(user_data, token, text.data(), text.size()) == 0;
      return go_on && !stop_matcher.stopped();
    };
    Sampler sampler(s->sampling);
    Result<SessionResult> r = s->session.generate(std::span<const int32_t>(prompt, n_prompt), n_predict, eos, sampler, on_token);
    if (!r) return fail(BITSPLIT_ERR_INTERNAL, r.status().message());
    // Aborted in the prompt (between two of its chunks), or after a pass, its first token refused.
    const bool aborted = stopped_by_abort || r->generation.stopped;
    std::string tail = stream.flush();
    if (!s->stops.empty()) tail = stop_matcher.push(tail) + stop_matcher.flush();
    if (callback && !tail.empty() && !aborted) callback(user_data, -1, tail.data(), tail.size());
    s->last = generation_stats(*r, stopped_by_abort, stop_matcher.stopped());
    if (r->speculative) s->last_settings = r->speculative->checks_per_setting;
    else s->last_settings.clear();
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
