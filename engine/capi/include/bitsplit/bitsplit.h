/* bitsplit C API: load a model (plain or bit-split GGUF), register fine-tuned variants, and
 * generate text through sessions, from C or any language with a C FFI.
 *
 * Conventions
 * - Every function that can fail returns a bitsplit_status; BITSPLIT_OK (0) is success. The
 *   message of the last failure on the calling thread is bitsplit_last_error() (valid until the
 *   next failing call on that thread). No C++ exception ever crosses this interface.
 * - Objects are opaque handles made by *_create / *_load and released by the matching *_free
 *   (NULL is accepted and ignored). Output pointers are written only on success.
 * - Parameter and statistics structs start with `size`: sizeof(the struct) as the caller's
 *   header declares it (the *_init functions set it). A library built for a later minor version
 *   reads (or writes) only the fields the caller's struct has; one built for an earlier version
 *   ignores the fields it does not know. A size below the struct's first version (whose last
 *   field is marked "the end of the first version"), or one that ends inside a field or its
 *   padding, is refused with BITSPLIT_ERR_INVALID_ARGUMENT, a message naming the struct and the
 *   size, and nothing read or written (size 0 too). The *_init functions write the whole
 *   struct as the library's header declares it: a caller built against an older header, whose
 *   struct is smaller, sets size and its fields itself instead of calling a newer library's
 *   *_init on it (bindings that declare the structs, such as ctypes, declare every field).
 * - Strings are UTF-8 and NUL-terminated unless a length is given.
 *
 * Threads
 * - A model may be used by many sessions at once, from many threads: the calls on one model
 *   are safe to make concurrently. Generations running at once on one model have their forward
 *   passes combined (one pass over the weights for all of their rows), so N sessions decoding
 *   together cost far less than N times one; each session's output is what it would be alone.
 * - A session is used by one thread at a time, except bitsplit_session_abort, which any
 *   thread may call at any time.
 * - Callbacks run on the thread that made the call they belong to.
 *
 * Memory
 * - Memory the library returns (const char* from *_name, chat templates, error messages) is
 *   owned by the library and lives as long as the object it came from (the model), or until
 *   the next failing call on the thread (bitsplit_last_error). Callers own every buffer they
 *   pass in; the library never keeps a caller's pointer beyond the call, except the callbacks'
 *   user data during that call.
 *
 * Versions
 * - BITSPLIT_API_VERSION is (major << 16) | minor. Within a major version the ABI only grows:
 *   functions are added, parameter structs gain fields at their end, enums gain values;
 *   nothing is removed or changes meaning. bitsplit_api_version() returns the library's own.
 */
#ifndef BITSPLIT_BITSPLIT_H
#define BITSPLIT_BITSPLIT_H

#include <stddef.h>
#include <stdint.h>

#if defined(_WIN32)
#define BITSPLIT_API __declspec(dllexport)
#else
#define BITSPLIT_API __attribute__((visibility("default")))
#endif

#ifdef __cplusplus
extern "C" {
#endif

#define BITSPLIT_API_VERSION_MAJOR 0
#define BITSPLIT_API_VERSION_MINOR 6  /* 2: bitsplit_model_add_lora; 3: bitsplit_model_params.target_activations;
                                         4: chat prompts (bitsplit_chat_render, bitsplit_chat_tokenize);
                                         5: speculative statistics in bitsplit_generation_stats (per depth,
                                            draft / verify time, lookup), bitsplit_session_setting_checks,
                                            log-probabilities (bitsplit_session_generate_logprobs);
                                         6: bitsplit_model_params.mlock and bitsplit_model_locked_bytes,
                                            variant names (bitsplit_model_variant_name), every metadata key
                                            and value (bitsplit_model_meta_count, _meta_key, _meta_json),
                                            stop strings (bitsplit_session_params.stop,
                                            bitsplit_session_set_stop, stats.stopped_at_stop),
                                            bitsplit_session_params.base_draft */
#define BITSPLIT_API_VERSION ((BITSPLIT_API_VERSION_MAJOR << 16) | BITSPLIT_API_VERSION_MINOR)

typedef enum bitsplit_status {
  BITSPLIT_OK = 0,
  BITSPLIT_ERR_INVALID_ARGUMENT = 1, /* a NULL handle or pointer, an out-of-range option */
  BITSPLIT_ERR_LOAD = 2,             /* a model or delta file that cannot be read or is not valid */
  BITSPLIT_ERR_NOT_FOUND = 3,        /* an unknown variant name or metadata key */
  BITSPLIT_ERR_CONTEXT_OVERFLOW = 4, /* prompt + tokens to generate exceed the context */
  BITSPLIT_ERR_BUFFER_TOO_SMALL = 5, /* the caller's buffer is too small; the size needed is returned */
  BITSPLIT_ERR_CANCELLED = 6,        /* a progress callback asked to stop */
  BITSPLIT_ERR_ABORTED = 7,          /* bitsplit_session_abort stopped a generation */
  BITSPLIT_ERR_OUT_OF_MEMORY = 8,
  BITSPLIT_ERR_INTERNAL = 9 /* anything else; the message says what */
} bitsplit_status;

typedef int32_t bitsplit_token;
typedef struct bitsplit_model bitsplit_model;
typedef struct bitsplit_session bitsplit_session;

BITSPLIT_API uint32_t bitsplit_api_version(void);
/* The library's version, "MAJOR.MINOR.PATCH" (the CMake project's version) */
BITSPLIT_API const char* bitsplit_version_string(void);
/* The message of the calling thread's last failure ("" when there was none). */
BITSPLIT_API const char* bitsplit_last_error(void);
/* "ok", "invalid argument", ... */
BITSPLIT_API const char* bitsplit_status_name(bitsplit_status status);

/* ---- Models ------------------------------------------------------------------------------ */

/* Loading progress: `done` of `total` steps; return nonzero to cancel (the load then fails with
 * BITSPLIT_ERR_CANCELLED). */
typedef int (*bitsplit_progress_callback)(void* user_data, int64_t done, int64_t total);

typedef struct bitsplit_model_params {
  size_t size;           /* sizeof(bitsplit_model_params) */
  int32_t n_threads;     /* worker threads; 0: one per physical core */
  uint64_t vram_budget;  /* bytes of VRAM for the draft planes; 0: free memory minus a margin */
  int32_t use_gpu;       /* 1 (default): a CUDA device when there is one; 0: the CPU only */
  bitsplit_progress_callback progress;
  void* progress_user_data; /* the end of the first version (API 0.1) */
  /* How a bit-split target rounds its activations (`--target-activations`, docs/FORMAT.md steps 1
   * and 1b): BITSPLIT_TARGET_ACTIVATIONS_DRAFT_REMAINDER (default) or one of the others. */
  int32_t target_activations;
  int32_t reserved0;     /* ignored (it keeps mlock past the 56 bytes of the struct before it) */
  /* API 0.6: 1: lock a bit-split model's planes in RAM (mlock(2)) so they are never paged out, as
   * `--mlock`. The load fails with BITSPLIT_ERR_LOAD, naming the locked-memory limit
   * (RLIMIT_MEMLOCK, `ulimit -l`), when the planes exceed what the process may lock (nothing stays
   * locked then), and with BITSPLIT_ERR_INVALID_ARGUMENT for a model without planes (not converted
   * by `bitsplit convert`). 0 (default): not locked. */
  int32_t mlock;
} bitsplit_model_params;

enum {
  BITSPLIT_TARGET_ACTIVATIONS_INT8 = 0,             /* one int8 row per row: fastest prefill */
  BITSPLIT_TARGET_ACTIVATIONS_DRAFT_REMAINDER = 1,  /* D also multiplies the int8 remainder */
  BITSPLIT_TARGET_ACTIVATIONS_REMAINDER = 2         /* D and R both: the weights' own error */
};

BITSPLIT_API void bitsplit_model_params_init(bitsplit_model_params* params);
/* Loads a GGUF model (original or converted by `bitsplit convert`). params may be NULL. */
BITSPLIT_API bitsplit_status bitsplit_model_load(const char* path, const bitsplit_model_params* params,
                                                 bitsplit_model** out_model);
/* The model must outlive its sessions. */
BITSPLIT_API void bitsplit_model_free(bitsplit_model* model);
/* API 0.6: bytes of the model's planes locked in RAM by bitsplit_model_params.mlock (0 without it). */
BITSPLIT_API uint64_t bitsplit_model_locked_bytes(const bitsplit_model* model);

/* Registers a fine-tuned variant of this base: a BitDelta file from `bitsplit delta`, made
 * against the file this model was loaded from (or its original, for a converted model), or a
 * LoRA adapter in llama.cpp's GGUF format (at scale 1). */
BITSPLIT_API bitsplit_status bitsplit_model_add_variant(bitsplit_model* model, const char* name, const char* delta_path);
/* Registers a LoRA adapter (llama.cpp's GGUF adapter format) as the variant `name`; `scale`
 * multiplies the adapter's alpha / rank (1: as trained). BITSPLIT_ERR_LOAD for a file that is
 * not an adapter of this base's architecture and shapes, BITSPLIT_ERR_INVALID_ARGUMENT for a
 * scale that is not finite. */
BITSPLIT_API bitsplit_status bitsplit_model_add_lora(bitsplit_model* model, const char* name, const char* lora_path,
                                                     float scale);
/* Forgets a variant; sessions already using it keep it until they are freed. */
BITSPLIT_API bitsplit_status bitsplit_model_remove_variant(bitsplit_model* model, const char* name);
BITSPLIT_API int32_t bitsplit_model_variant_count(const bitsplit_model* model);
/* API 0.6: the name of registered variant `index` (0 .. bitsplit_model_variant_count - 1, in the order
 * of the names' bytes), or NULL past the last. The string lives as long as the model. Variants added
 * or removed by another thread between the two calls shift the indices. */
BITSPLIT_API const char* bitsplit_model_variant_name(const bitsplit_model* model, int32_t index);

BITSPLIT_API int32_t bitsplit_model_n_vocab(const bitsplit_model* model);
BITSPLIT_API int32_t bitsplit_model_n_ctx_train(const bitsplit_model* model);
BITSPLIT_API int32_t bitsplit_model_n_layers(const bitsplit_model* model);
/* 1 for a converted bit-split model (decoded speculatively), 0 otherwise. */
BITSPLIT_API int32_t bitsplit_model_is_bitsplit(const bitsplit_model* model);
/* Beginning- and end-of-sequence tokens (-1 when the vocabulary has none). */
BITSPLIT_API bitsplit_token bitsplit_model_bos(const bitsplit_model* model);
BITSPLIT_API bitsplit_token bitsplit_model_eos(const bitsplit_model* model);
/* A string metadata value ("general.name", "general.architecture", ...), or NULL. */
BITSPLIT_API const char* bitsplit_model_meta_string(const bitsplit_model* model, const char* key);
/* API 0.6: every metadata entry of the file, in file order: the count, the key of entry `index` (NULL
 * past the last), and the value of `key` as JSON text (NULL for a key the file lacks): a string as a
 * JSON string, an integer as a number, a float as a number (widened to double), a bool as true or
 * false, an array as a JSON array (of any of these). Strings live as long as the model. */
BITSPLIT_API int32_t bitsplit_model_meta_count(const bitsplit_model* model);
BITSPLIT_API const char* bitsplit_model_meta_key(const bitsplit_model* model, int32_t index);
BITSPLIT_API const char* bitsplit_model_meta_json(const bitsplit_model* model, const char* key);
/* The GGUF chat template (tokenizer.chat_template), or NULL when the file has none. */
BITSPLIT_API const char* bitsplit_model_chat_template(const bitsplit_model* model);

/* ---- Tokens -------------------------------------------------------------------------------- */

/* Tokenizes text[0..length) into tokens[0..capacity). add_special adds the BOS token when the
 * vocabulary asks for it; parse_special turns text such as "<s>" into special tokens.
 * *n_tokens gets the count; with too small a buffer the call fails with
 * BITSPLIT_ERR_BUFFER_TOO_SMALL and *n_tokens is the capacity needed. */
BITSPLIT_API bitsplit_status bitsplit_tokenize(const bitsplit_model* model, const char* text, size_t length,
                                               int32_t add_special, int32_t parse_special, bitsplit_token* tokens,
                                               size_t capacity, size_t* n_tokens);
/* The text of tokens[0..n) into buf[0..capacity) (not NUL-terminated; *length bytes). With too
 * small a buffer: BITSPLIT_ERR_BUFFER_TOO_SMALL and *length is the size needed. */
BITSPLIT_API bitsplit_status bitsplit_detokenize(const bitsplit_model* model, const bitsplit_token* tokens, size_t n,
                                                 char* buf, size_t capacity, size_t* length);

/* ---- Chat prompts (API 0.4) ----------------------------------------------------------------- */

/* A conversation is a JSON array of messages ({"role": ..., "content": ...}, and whatever else the
 * template reads), rendered by the engine's chat-template interpreter (docs/CHAT_TEMPLATES.md) the
 * way `bitsplit chat` and `bitsplit serve` render it. */
typedef struct bitsplit_chat_params {
  size_t size;                       /* sizeof(bitsplit_chat_params) */
  const char* chat_template;         /* a Jinja template to use; NULL (default): the model's own */
  int32_t add_generation_prompt;     /* 1 (default): end with the opening of the assistant's turn */
  int32_t special_tokens_in_content; /* bitsplit_chat_tokenize: 0 (default): control-token text inside the
                                        messages is tokenized as plain text, so a message cannot forge a
                                        turn; only the template's own markup becomes control tokens. 1: it
                                        becomes control tokens too (trusted input only); the end of the first
                                        version (API 0.4) */
} bitsplit_chat_params;

BITSPLIT_API void bitsplit_chat_params_init(bitsplit_chat_params* params);
/* The conversation messages_json[0..length) rendered by the template into buf[0..capacity) (not
 * NUL-terminated; *length_out bytes). With too small a buffer: BITSPLIT_ERR_BUFFER_TOO_SMALL and
 * *length_out is the size needed. BITSPLIT_ERR_NOT_FOUND when params gives no template and the
 * model has none; BITSPLIT_ERR_INVALID_ARGUMENT for JSON that is not an array of objects, or a
 * template that fails to parse or refuses the conversation (the message says where and why).
 * params may be NULL (the defaults). */
BITSPLIT_API bitsplit_status bitsplit_chat_render(const bitsplit_model* model, const char* messages_json, size_t length,
                                                  const bitsplit_chat_params* params, char* buf, size_t capacity,
                                                  size_t* length_out);
/* The rendered conversation as the prompt's tokens (what `bitsplit serve` feeds the model for
 * /v1/chat/completions: the BOS token added unless the template wrote it, control tokens as
 * special_tokens_in_content says). Buffer and statuses as bitsplit_tokenize and bitsplit_chat_render. */
BITSPLIT_API bitsplit_status bitsplit_chat_tokenize(const bitsplit_model* model, const char* messages_json, size_t length,
                                                    const bitsplit_chat_params* params, bitsplit_token* tokens,
                                                    size_t capacity, size_t* n_tokens);

/* ---- Sessions ------------------------------------------------------------------------------ */

typedef struct bitsplit_session_params {
  size_t size;            /* sizeof(bitsplit_session_params) */
  const char* variant;    /* a registered variant's name, or NULL for the base */
  float temperature;      /* 0.8; 0 = greedy; >= 0 */
  int32_t top_k;          /* 40; 0 = off */
  float top_p;            /* 0.95; 1 = off */
  float min_p;            /* 0.05; 0 = off */
  float repeat_penalty;   /* 1 = off */
  int32_t repeat_last_n;  /* 64 */
  uint64_t seed;          /* random seed (sampling is reproducible for a fixed seed and budget) */
  int32_t speculative;    /* 1 (default): speculative decoding on a bit-split model; 0: plain */
  int32_t budget;         /* drafted nodes per check, 1..64; 0 (default): chosen online */
  int32_t draft_chain;    /* 1: draft a chain of `budget` tokens; 0 (default): a dynamic tree */
  int32_t n_ctx;          /* context of the step-by-step API (bitsplit_session_feed); 0: the model's;
                             the end of the first version (API 0.1) */
  int32_t lookup;         /* context lookup (greedy decoding): also propose up to N tokens that followed an
                             earlier occurrence of the text's last tokens, verified in the same pass;
                             0..64, 0 = off; -1 (default): 8 with an online budget, off with a fixed one */
  int32_t reserved0;      /* ignored (it keeps reuse_prefix past the 72 bytes of the struct before it) */
  int32_t reuse_prefix;   /* 1 (default): keep the last generation's KV cache, and run only the part of the
                             next prompt after its longest common prefix with the last prompt + output
                             (the same output as without; costs the cache's memory between calls); 0: off */
  int32_t reserved1;      /* ignored (it keeps base_draft past the 80 bytes of the struct before it) */
  /* API 0.6: with a variant, draft with the plain base's draft planes instead of the variant's own
     (the variant's output is unchanged: it still verifies; for comparing acceptance, as `bitsplit
     bench accept`'s NAME/base-draft rows). BITSPLIT_ERR_INVALID_ARGUMENT without a variant. */
  int32_t base_draft;
  /* API 0.6: stop strings, as bitsplit_session_set_stop sets them (copied at creation). */
  int32_t n_stop;
  const char* const* stop;
} bitsplit_session_params;

BITSPLIT_API void bitsplit_session_params_init(bitsplit_session_params* params);
/* params may be NULL (the defaults above). */
BITSPLIT_API bitsplit_status bitsplit_session_create(bitsplit_model* model, const bitsplit_session_params* params,
                                                     bitsplit_session** out_session);
BITSPLIT_API void bitsplit_session_free(bitsplit_session* session);
/* API 0.6: the stop strings of the session's next generations (replacing those it had; n = 0: none):
 * a generation ends at the first complete one, which is not handed to the callback, nor is any
 * text after it; text that could still begin one is held back until it cannot (so a caller never
 * sees part of a stop string) and handed over with a later token, or with the last call (token -1)
 * when the generation ends. Matched on the text's bytes. The strings are copied; empty ones are
 * ignored; a NULL entry is BITSPLIT_ERR_INVALID_ARGUMENT. */
BITSPLIT_API bitsplit_status bitsplit_session_set_stop(bitsplit_session* session, const char* const* stop, size_t n);

/* Called with each generated token and its text (bytes of complete UTF-8 characters; may be
 * empty while a character is incomplete). Return nonzero to stop the generation there. When a
 * generation ends inside a character, or with text held back for a stop string that never completed
 * (bitsplit_session_set_stop), one last call with token -1 carries the leftover bytes. */
typedef int (*bitsplit_token_callback)(void* user_data, bitsplit_token token, const char* text, size_t length);

/* The length of bitsplit_generation_stats' per-depth arrays (API 0.5): the deepest a draft goes. */
#define BITSPLIT_MAX_DRAFT_DEPTH 64

typedef struct bitsplit_generation_stats {
  size_t size;                   /* sizeof(bitsplit_generation_stats); set to the bytes written */
  int64_t prompt_tokens;         /* aborted during the prompt: the prompt tokens run before */
  double prompt_seconds;
  int64_t generated_tokens;
  double generate_seconds;
  int32_t stopped_at_eos;
  int32_t speculative;           /* 1 when the generation decoded speculatively */
  int64_t checks;                /* target verification passes */
  int64_t drafted_tokens;        /* drafted tree nodes */
  int64_t accepted_tokens;       /* drafted tokens accepted */
  double tokens_per_check;       /* accepted + the target's own token, per check; the end of the first
                                    version (API 0.1) */
  int64_t reused_tokens;         /* prompt tokens whose K/V came from the last generation (reuse_prefix) */
  /* API 0.5: where a speculative generation's time went, and how deep its drafts were accepted
     (all 0 when it did not decode speculatively). */
  double draft_seconds;          /* drafting (the draft model's passes and the context lookup) */
  double verify_seconds;         /* the target's verification passes */
  int64_t lookup_drafted_tokens; /* drafted nodes that came from the context lookup (of drafted_tokens) */
  int64_t lookup_accepted_tokens; /* accepted tokens that came from the lookup's chain (of accepted_tokens) */
  int32_t n_depths;              /* valid entries of the two arrays below: the deepest draft's depth */
  int32_t reserved1;             /* ignored (keeps the arrays 8-byte aligned) */
  /* Per draft depth d (index d - 1), as vLLM's num_accepted_tokens_per_pos: checks whose accepted path
     reached depth d (their sum is accepted_tokens), and checks whose draft had a node at depth d (the
     ratio of the two is the acceptance rate at that depth). A draft is at most BITSPLIT_MAX_DRAFT_DEPTH
     deep (the largest budget: drafts of at most 64 nodes). */
  int64_t accepted_at_depth[BITSPLIT_MAX_DRAFT_DEPTH];
  int64_t drafted_at_depth[BITSPLIT_MAX_DRAFT_DEPTH];
  int32_t stopped_at_stop;       /* API 0.6: 1 when a stop string ended the generation */
  int32_t reserved2;             /* ignored */
} bitsplit_generation_stats;

/* Generates up to n_predict tokens after prompt[0..n_prompt) (a new sequence each call; with
 * reuse_prefix, the prompt's tokens that repeat the start of the last call's prompt + output are
 * not run again),
 * handing each to `callback` (may be NULL); stops at the end-of-sequence token, when the
 * callback returns nonzero, or when bitsplit_session_abort is called (BITSPLIT_ERR_ABORTED,
 * after at most one more forward pass: a chunk of the prompt, which runs in chunks of 256
 * tokens, or a verification pass). stats (may be NULL; set its size, checked before anything
 * runs) receives the counts, also on abort. */
BITSPLIT_API bitsplit_status bitsplit_session_generate(bitsplit_session* session, const bitsplit_token* prompt,
                                                       size_t n_prompt, int32_t n_predict,
                                                       bitsplit_token_callback callback, void* user_data,
                                                       bitsplit_generation_stats* stats);
/* Statistics of the session's last generation (the fields `stats->size` holds; size set to the
 * bytes written). */
BITSPLIT_API bitsplit_status bitsplit_session_stats(const bitsplit_session* session, bitsplit_generation_stats* stats);
/* API 0.5: the draft settings the session's last generation checked with ("plain", "chain-4",
 * "tree-16+lookup", ... as `bitsplit run` prints them), in the order first used: *name (owned by the
 * session, valid until its next generation) and *checks of setting `index`. BITSPLIT_ERR_NOT_FOUND
 * past the last (index 0 of a generation that did not decode speculatively). */
BITSPLIT_API bitsplit_status bitsplit_session_setting_checks(const bitsplit_session* session, int32_t index,
                                                             const char** name, int64_t* checks);

/* API 0.5: log-probabilities. A generated token's log-probability under the target model's
 * distribution at its position: the log-softmax of its raw logits (temperature 1, no penalties
 * or filters, as `bitsplit serve` reports them in `logprobs`), whatever the sampling options; and
 * the n_top most probable tokens there (most probable first; ties: the lower id). top_tokens and
 * top_logprobs hold n_top entries each and are valid during the call only. */
typedef void (*bitsplit_logprob_callback)(void* user_data, bitsplit_token token, float logprob,
                                          const bitsplit_token* top_tokens, const float* top_logprobs, int32_t n_top);
/* bitsplit_session_generate, and logprob_callback (may be NULL) called with each generated token's
 * log-probability and top_logprobs (0..BITSPLIT_MAX_TOP_LOGPROBS) alternatives, right before the
 * token's own callback, with the same user_data (the end-of-sequence token too; not the leftover
 * bytes' call with token -1). */
BITSPLIT_API bitsplit_status bitsplit_session_generate_logprobs(bitsplit_session* session, const bitsplit_token* prompt,
                                                                size_t n_prompt, int32_t n_predict, int32_t top_logprobs,
                                                                bitsplit_logprob_callback logprob_callback,
                                                                bitsplit_token_callback callback, void* user_data,
                                                                bitsplit_generation_stats* stats);
#define BITSPLIT_MAX_TOP_LOGPROBS 20
/* Asks a running bitsplit_session_generate to stop; safe from any thread, also when nothing
 * runs (the flag is cleared when the next generation starts). */
BITSPLIT_API void bitsplit_session_abort(bitsplit_session* session);

/* Step by step (plain decoding of the target model, on the session's own KV cache of n_ctx
 * slots): feed tokens, read the logits after the last one, sample, feed the sample, ... */
/* Appends tokens[0..n) to the session's sequence and runs them through the model. */
BITSPLIT_API bitsplit_status bitsplit_session_feed(bitsplit_session* session, const bitsplit_token* tokens, size_t n);
/* The logits after the last fed token: *logits points at n_vocab floats owned by the session,
 * valid until the next feed or reset. */
BITSPLIT_API bitsplit_status bitsplit_session_logits(bitsplit_session* session, const float** logits, int32_t* n_vocab);
/* Samples the next token from the current logits with the session's sampling options and
 * history (it is not fed: feed it to continue). */
BITSPLIT_API bitsplit_status bitsplit_session_sample(bitsplit_session* session, bitsplit_token* token);
/* Empties the step-by-step sequence and drops the KV cache kept from the last generation. */
BITSPLIT_API void bitsplit_session_reset(bitsplit_session* session);
/* Tokens in the step-by-step sequence. */
BITSPLIT_API int32_t bitsplit_session_n_past(const bitsplit_session* session);

#ifdef __cplusplus
}
#endif

#endif /* BITSPLIT_BITSPLIT_H */
