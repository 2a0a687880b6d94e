// `bitsplit serve`: the OpenAI-compatible HTTP server (engine/serve/include/bitsplit/server.h).
#include <chrono>
#include <csignal>
#include <cstdio>
#include <memory>
#include <thread>

#include "bitsplit/generation_args.h"
#include "bitsplit/interrupt.h"
#include "bitsplit/memory_plan.h"
#include "bitsplit/server.h"
#include "bitsplit/vram_plan.h"
#include "commands.h"
#include "option_checks.h"
#include "variant_options.h"

namespace bitsplit::cli {
namespace {

struct ServeArgs {
  std::string model, host = "127.0.0.1", api_key_file, chat_template, vram_budget, budget = "auto",
                     max_body = "8M", name;
  std::vector<std::string> api_keys;
  int port = 8080, parallel = 4, queue = 64, threads = 0, max_connections = 512;
  bool trust_special_tokens = false;
  bool no_webui = false;
  double drain_timeout = 120;  // seconds
  int prompt_cache = -1;  // -1: --parallel's number, as many as fit in RAM
  int64_t ctx = 0;
  int spec_max_sequences = 2;
  cli::VariantSpecs variant_specs;
  bool no_spec = false;
  bool mlock = false;
  bool no_mmap = false;
  TargetActivations target_activations = TargetActivations::kDraftRemainder;
};

// Reads the chat template: --chat-template FILE, else the model's tokenizer.chat_template.
Result<std::optional<ChatTemplate>> chat_template_for(const ServeArgs& a, const LoadedModel& m) {
  std::string source;
  std::string origin;
  if (!a.chat_template.empty()) {
    BITSPLIT_ASSIGN_OR_RETURN(source, read_text_file(a.chat_template));
    origin = a.chat_template;
  } else {
    auto t = m.source->metadata().get_string_or("tokenizer.chat_template", "");
    if (!t || t->empty()) {
      std::fprintf(stderr, "chat: the model has no chat template; /v1/chat/completions is off (give --chat-template FILE)\n");
      return std::optional<ChatTemplate>();
    }
    source = *t;
    origin = "the model's tokenizer.chat_template";
  }
  auto parsed = ChatTemplate::parse(source);
  if (!parsed) {
    if (!a.chat_template.empty()) return parsed.status().with_context("--chat-template " + a.chat_template);
    std::fprintf(stderr, "chat: %s cannot be used (%s); /v1/chat/completions is off (give --chat-template FILE)\n",
                 origin.c_str(), parsed.status().message().c_str());
    return std::optional<ChatTemplate>();
  }
  std::fprintf(stderr, "chat: template from %s\n", origin.c_str());
  return std::optional<ChatTemplate>(std::move(*parsed));
}

// --ctx against the model, and what the model, the --parallel full-context KV caches and the
// kept ones (--prompt-cache) take in RAM, checked before anything is loaded. Sets how many
// caches are kept: the number asked for, or by default up to --parallel as many as fit.
int check_serve_memory(const ServeArgs& a, int* prompt_cache) {
  auto source = open_weights(a.model);
  if (!source) return report_error(source.status().message());
  auto config = read_model_config(**source);
  if (!config) return report_error(config.status().message());
  if (a.ctx > config->n_ctx_train) {
    return report_error("--ctx " + std::to_string(a.ctx) + " is over the model's context of " +
                        std::to_string(config->n_ctx_train) + " tokens");
  }
  const int64_t ctx = a.ctx > 0 ? a.ctx : config->n_ctx_train;
  auto machine = system_memory();
  if (!machine) return report_error(machine.status().message());
  const bool asked = a.prompt_cache >= 0;
  for (int kept = asked ? a.prompt_cache : a.parallel;; --kept) {
    auto plan = plan_memory(**source, *config,
                            {.n_slots = ctx + spec::kMaxBudget + 1, .sequences = a.parallel + kept});
    if (!plan) return report_error(plan.status().message());
    const Status st = check_memory(*plan, *machine);
    if (st || asked || kept == 0) {
      std::fprintf(stderr, "memory: %s (%d decoding, %d kept for the next requests); machine: %s\n",
                   plan->summary().c_str(), a.parallel, kept, machine->summary().c_str());
      if (!st) return report_error(st.message() + (kept > 0 ? "; lower --parallel, --ctx or --prompt-cache" : "; lower --parallel or --ctx"));
      *prompt_cache = kept;
      return 0;
    }
  }
}

// The API keys: --api-key (repeatable) or --api-key-file (one per line; blank lines and lines
// starting with # skipped). A key given but empty is refused: it must never mean "no
// authentication".
Result<std::vector<std::string>> api_keys(const ServeArgs& a) {
  std::vector<std::string> keys = a.api_keys;
  if (!a.api_key_file.empty()) {
    BITSPLIT_ASSIGN_OR_RETURN(std::string text, read_text_file(a.api_key_file));
    size_t start = 0;
    while (start < text.size()) {
      size_t end = text.find('\n', start);
      if (end == std::string::npos) end = text.size();
      std::string line = text.substr(start, end - start);
      start = end + 1;
      while (!line.empty() && (line.back() == '\r' || line.back() == ' ' || line.back() == '\t')) line.pop_back();
      if (!line.empty() && line[0] != '#') keys.push_back(std::move(line));
    }
    if (keys.empty()) return Status::error("--api-key-file: " + a.api_key_file + " has no key");
  }
  for (const auto& k : keys) {
    if (k.empty()) return Status::error("--api-key is empty: give a key, or leave the option out to serve without authentication");
    for (char c : k) {
      if (uint8_t(c) <= 0x20 || uint8_t(c) >= 0x7f) {
        return Status::error("an API key may only hold visible ASCII characters (no spaces or control characters)");
      }
    }
  }
  return keys;
}

int serve(const ServeArgs& a) {
  serve::ServerOptions so;
  so.host = a.host;
  so.port = a.port;
  so.parallel = a.parallel;
  so.queue = a.queue;
  so.model_name = a.name;
  auto keys = api_keys(a);
  if (!keys) return report_error(keys.status().message());
  so.api_keys = std::move(*keys);
  auto body = parse_byte_size(a.max_body);
  if (!body || *body == 0) return report_error("--max-body: " + (body ? std::string("must be positive") : body.status().message()));
  so.http.max_body_bytes = size_t(*body);
  so.http.max_connections = a.max_connections;
  so.special_tokens_in_chat = a.trust_special_tokens;
  so.webui = !a.no_webui;
  GenerationArgs defaults;  // the session options of a request that sets none
  defaults.speculative = !a.no_spec;
  auto budget = spec::parse_budget(a.budget);
  if (!budget) return report_error("--budget: " + budget.status().message());
  defaults.budget = *budget;
  defaults.draft_max_sequences = a.spec_max_sequences;
  if (auto config = generation_config(defaults); !config) return report_error(config.status().message());
  so.generation = defaults;
  auto vram_budget = vram_budget_option(a.vram_budget);
  if (!vram_budget) return report_error(vram_budget.status().message());
  const auto threads = limit_threads(a.threads);
  so.ctx = a.ctx;
  if (int code = check_serve_memory(a, &so.prompt_cache); code != 0) return code;

  // Listen first, so /health answers (503, loading) while the model loads.
  std::atomic<bool> drain_requested{false};
  so.on_drain_request = [&drain_requested] { drain_requested.store(true); };
  serve::Server server(so);
  if (Status st = server.bind(); !st) return report_error(st.message());
  std::fprintf(stderr, "listening on http://%s:%d%s\n", a.host.c_str(), server.port(),
               so.api_keys.empty() ? "" : (" (API key required; " + std::to_string(so.api_keys.size()) + " key(s))").c_str());
  Status served = Status::ok();
  std::thread http([&] { served = server.serve(); });
  // SIGINT stops the server at once (requests in flight end with the connection). SIGTERM and
  // POST /admin/drain drain it: no new requests, those admitted finish (within --drain-timeout),
  // then it exits; a second signal exits at once.
  CooperativeInterrupt interrupt("\nsignal received: SIGINT stops now, SIGTERM drains (again to quit at once)\n");
  std::atomic<bool> done{false};
  bool drain_timed_out = false;
  std::thread watcher([&] {
    while (!done.load() && CooperativeInterrupt::signal_received() == 0 && !drain_requested.load()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    if (done.load() || CooperativeInterrupt::signal_received() == SIGINT) return server.stop();
    std::fprintf(stderr, "draining (%s): admitting no new requests, finishing those admitted (at most %g s)\n",
                 drain_requested.load() ? "POST /admin/drain" : "SIGTERM", a.drain_timeout);
    const auto timeout = std::chrono::milliseconds(int64_t(a.drain_timeout * 1000));
    drain_timed_out = !server.drain(timeout, [&] { return done.load(); });
    if (drain_timed_out && !done.load()) {
      std::fprintf(stderr, "drain: --drain-timeout %g s passed with requests still running; they are cut short\n",
                   a.drain_timeout);
    }
    server.stop_gracefully();
  });
  auto stop_all = [&](int code) {
    done.store(true);
    server.stop();
    watcher.join();
    http.join();
    return code;
  };

  auto loaded = load_model(a.model, {.q8_0_kernels = true, .target_activations = a.target_activations, .copy_residual = a.no_mmap},
                           *vram_budget);
  if (!loaded) return stop_all(report_error(loaded.status().message()));
  if (a.mlock) {
    if (int rc = lock_model_planes(loaded->model); rc != 0) return stop_all(rc);
  }
  VariantRegistry variants(loaded->model, *loaded->source, {.budget_bytes = UINT64_MAX}, log_line);
  if (Status st = cli::register_variants(variants, a.variant_specs, *loaded, log_line); !st) {
    return stop_all(report_error(st.message()));
  }
  auto tmpl = chat_template_for(a, *loaded);
  if (!tmpl) return stop_all(report_error(tmpl.status().message()));
  server.attach(*loaded, variants, std::move(*tmpl));
  std::fprintf(stderr, "ready: %s%s\n", a.model.c_str(),
               variants.names().empty() ? "" : (" with " + std::to_string(variants.names().size()) + " variant(s)").c_str());
  watcher.join();
  done.store(true);
  http.join();
  if (!served) return report_error(served.message());
  if (drain_timed_out) return 1;
  if (const int sig = CooperativeInterrupt::signal_received(); sig != 0) {
    std::fprintf(stderr, "stopped by %s%s\n", sig == SIGTERM ? "SIGTERM" : "SIGINT", sig == SIGTERM ? " (drained)" : "");
  } else if (drain_requested.load()) {
    std::fprintf(stderr, "stopped: drained (POST /admin/drain)\n");
  }
  return 0;
}

}  // namespace

void add_serve_command(CLI::App& app, int* exit_code) {
  auto a = std::make_shared<ServeArgs>();
  CLI::App* cmd = app.add_subcommand("serve", "An OpenAI-compatible HTTP server (completions, chat, models, metrics)");
  cmd->add_option("-m,--model", a->model,
                  "Model file (.gguf; a bit-split model decodes speculatively) or a Hugging Face folder")
      ->required()->check(CLI::ExistingPath);
  cli::add_variant_options(cmd, &a->variant_specs, "served as model NAME");
  cmd->add_option("--host", a->host, "Address to listen on")->capture_default_str();
  cmd->add_option("--port", a->port, "Port to listen on (0: any free port)")->capture_default_str()->check(whole_in(0, 65535));
  auto* key = cmd->add_option("--api-key", a->api_keys,
                              "Require Authorization: Bearer KEY on every route but /health (repeat for several "
                              "keys: each is a tenant, whose kept prompt caches no other key's requests use)");
  cmd->add_option("--api-key-file", a->api_key_file, "Read the API keys from a file, one per line")
      ->check(CLI::ExistingFile)->excludes(key);
  cmd->add_option("--max-connections", a->max_connections, "Connections open at once; more are answered 503 and closed")
      ->capture_default_str()->check(whole_in(1, 65536));
  cmd->add_flag("--no-webui", a->no_webui, "Do not serve the chat page at GET /");
  cmd->add_flag("--trust-special-tokens", a->trust_special_tokens,
                "Chat content may carry control tokens as text (<|im_start|>...): only for trusted clients; by default "
                "such text in a message is plain text");
  cmd->add_option("--parallel", a->parallel,
                  "Requests decoding at once (their passes combined: one pass over the weights for all of them)")
      ->capture_default_str()->check(whole_in(1, 256));
  cmd->add_option("--ctx", a->ctx, "A request's context, prompt + max_tokens (default: the model's); with --parallel it "
                                   "sizes the KV caches checked against the RAM before loading")
      ->check(whole_in(1, int64_t(1) << 24));
  cmd->add_option("--prompt-cache", a->prompt_cache,
                  "KV caches of finished requests kept for the next ones: a request whose prompt starts as a kept "
                  "one's prompt + reply did (a chat's next turn) runs only the rest (default: one per --parallel "
                  "slot, as many as fit in RAM; 0: off)")
      ->check(whole_in(0, 256));
  cmd->add_option("--drain-timeout", a->drain_timeout,
                  "On SIGTERM or POST /admin/drain: seconds the requests already admitted may take to finish "
                  "before the server exits anyway (exit status 1)")
      ->capture_default_str()->check(CLI::Range(0.0, 86400.0));
  cmd->add_option("--queue", a->queue, "Requests that may wait for a slot; beyond: 503 with Retry-After")
      ->capture_default_str()->check(whole_in(0, 4096));
  cmd->add_option("--max-body", a->max_body, "Largest request body (e.g. 8M); larger: 413")->capture_default_str()->type_name("SIZE");
  cmd->add_option("--name", a->name, "The base model's id in /v1/models and responses (default: the file name)");
  cmd->add_option("--chat-template", a->chat_template, "Chat template (Jinja) to use instead of the model's")
      ->check(CLI::ExistingFile);
  cmd->add_option("--budget", a->budget, "Default draft budget: auto or 1.." + std::to_string(spec::kMaxBudget) +
                                              " (a request may set \"bitsplit\": {\"budget\": ...})")
      ->capture_default_str();
  cmd->add_option("--spec-max-sequences", a->spec_max_sequences,
                  "Draft only while at most N requests decode at once (more: their combined passes share the weights "
                  "already, so drafting costs more than it saves); 0: always")
      ->capture_default_str()->check(whole_in(0, 4096));
  add_plane_memory_flags(cmd, &a->mlock, &a->no_mmap);
  add_target_activations_option(cmd, &a->target_activations);
  cmd->add_flag("--no-spec", a->no_spec, "Decode plainly by default (a request may set \"bitsplit\": {\"speculative\": true})");
  cmd->add_option("--vram-budget", a->vram_budget, "Bytes of VRAM for the draft planes (e.g. 6G)")->type_name("SIZE");
  cmd->add_option("-t,--threads", a->threads, "Worker threads (default: all cores)")->check(whole_in(1, 4096));
  cmd->callback([a, exit_code] { *exit_code = serve(*a); });
}

}  // namespace bitsplit::cli
