// `bitsplit chat`: an interactive chat in the terminal with the model's chat template, the
// conversation kept as history, replies streamed. /reset forgets the history, /exit (or Ctrl-D)
// leaves, Ctrl-C stops the reply being written and returns to the prompt.
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <memory>

#include "bitsplit/chat_prompt.h"
#include "bitsplit/chat_template.h"
#include "bitsplit/generation_args.h"
#include "bitsplit/interrupt.h"
#include "bitsplit/session.h"
#include "bitsplit/tokenizer.h"
#include "commands.h"
#include "option_checks.h"

namespace bitsplit::cli {
namespace {

struct ChatArgs {
  std::string model, chat_template, system;
  int32_t n_predict = 512;
  GenerationArgs generation;  // sampling and seed: bound to their options
  int threads = 0;
  bool no_spec = false;
  bool timings = false;
  bool no_reuse = false;
  bool trust_special_tokens = false;
  TargetActivations target_activations = TargetActivations::kDraftRemainder;
};

// The chat template: --chat-template FILE, else the model's tokenizer.chat_template.
Result<ChatTemplate> read_chat_template(const ChatArgs& a, const LoadedModel& loaded) {
  std::string source;
  if (!a.chat_template.empty()) {
    auto t = read_text_file(a.chat_template);
    if (!t) return t.status().with_context("--chat-template");
    source = *t;
  } else {
    auto t = loaded.source->metadata().get_string_or("tokenizer.chat_template", "");
    if (!t || t->empty()) return Status::error(a.model + " has no chat template; give one with --chat-template FILE");
    source = *t;
  }
  auto tmpl = ChatTemplate::parse(source);
  if (!tmpl) return tmpl.status().with_context("the chat template cannot be used");
  return std::move(*tmpl);
}

// Answers the conversation's last (user) message: the conversation through the template, the
// reply streamed to stdout until end-of-sequence, -n tokens, the context's end or Ctrl-C, and
// added to `messages`. An error leaves `messages` as it was given.
Status answer(const ChatArgs& a, const ChatTemplate& tmpl, const LoadedModel& loaded, Session& session,
              Sampler& sampler, nlohmann::ordered_json& messages) {
  const Tokenizer& tokenizer = *loaded.tokenizer;
  const int32_t eos = tokenizer.vocab().eos;
  // What is typed (or pasted) is text, as a server's messages are: "<|im_end|>" in it is not a turn's end.
  auto encoded = serve::encode_chat(tmpl, tokenizer, messages, {.special_tokens_in_content = a.trust_special_tokens});
  if (!encoded) return encoded.status().with_context("the chat template refused the conversation");
  const std::vector<int32_t>& prompt = *encoded;
  const int64_t room = loaded.model.config().n_ctx_train - int64_t(prompt.size());
  if (room <= 1) {
    return Status::error("the conversation fills the model's context (" + std::to_string(prompt.size()) + " tokens); /reset");
  }
  Utf8StreamDecoder utf8;
  std::string reply;
  auto on_token = [&](int32_t token) {
    if (token == eos) return true;
    const std::string text = utf8.push(tokenizer.token_to_piece(token));
    reply += text;
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
    return CooperativeInterrupt::signal_received() == 0;
  };
  auto r = session.generate(prompt, int32_t(std::min<int64_t>(a.n_predict, room - 1)), eos, sampler, on_token);
  const std::string tail = utf8.flush();
  reply += tail;
  std::fwrite(tail.data(), 1, tail.size(), stdout);
  std::fputc('\n', stdout);
  std::fflush(stdout);
  if (!r) return r.status();
  if (CooperativeInterrupt::signal_received() != 0) std::fprintf(stderr, "(stopped)\n");
  if (a.timings) {
    const GenerationStats& g = r->generation;
    std::fprintf(stderr, "(prompt: %lld tokens, %lld of them kept from the last turn, %.3f s; reply: %lld tokens in %.3f s, %.1f tokens/s)\n",
                 (long long)g.prompt_tokens, (long long)g.reused_tokens, g.prompt_seconds,
                 (long long)g.generated_tokens, g.generate_seconds, g.generate_tokens_per_second());
  }
  messages.push_back({{"role", "assistant"}, {"content", reply}});
  return Status::ok();
}

int chat(const ChatArgs& a) {
  GenerationArgs args = a.generation;
  args.speculative = !a.no_spec;
  args.reuse_prefix = !a.no_reuse;
  auto config = generation_config(args);
  if (!config) return report_error(config.status().message());
  const auto threads = limit_threads(a.threads);
  auto loaded = load_model(a.model, {.q8_0_kernels = true, .target_activations = a.target_activations});
  if (!loaded) return report_error(loaded.status().message());
  auto tmpl = read_chat_template(a, *loaded);
  if (!tmpl) return report_error(tmpl.status().message());
  Session session(loaded->model, nullptr, config->session);
  if (Status st = session.validate(); !st) return report_error(st.message());

  const bool interactive = ::isatty(STDIN_FILENO);
  if (interactive) std::fprintf(stderr, "chat: /reset forgets the conversation, /exit or Ctrl-D leaves, Ctrl-C stops a reply\n");
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  auto reset = [&] {
    messages = nlohmann::ordered_json::array();
    if (!a.system.empty()) messages.push_back({{"role", "system"}, {"content", a.system}});
  };
  reset();
  CooperativeInterrupt interrupt;
  Sampler sampler(config->sampling);
  for (std::string line;;) {
    if (interactive) std::fputs("> ", stdout), std::fflush(stdout);
    if (!std::getline(std::cin, line)) break;
    CooperativeInterrupt::clear();  // a Ctrl-C at the prompt does not stop the next reply
    if (line.empty()) continue;
    if (line == "/exit" || line == "/quit") break;
    if (line == "/reset") {
      reset();
      std::fprintf(stderr, "(conversation reset)\n");
      continue;
    }
    if (line == "/help") {
      std::fprintf(stderr, "/reset forgets the conversation, /exit leaves, Ctrl-C stops a reply\n");
      continue;
    }
    messages.push_back({{"role", "user"}, {"content", line}});
    if (Status st = answer(a, *tmpl, *loaded, session, sampler, messages); !st) {
      messages.erase(messages.end() - 1);
      report_error(st.message());
    }
  }
  return 0;
}

}  // namespace

void add_chat_command(CLI::App& app, int* exit_code) {
  auto a = std::make_shared<ChatArgs>();
  CLI::App* cmd = app.add_subcommand("chat", "Chat with a model in the terminal (its chat template, history, streaming)");
  cmd->add_option("-m,--model", a->model, "Model file (.gguf) or a Hugging Face folder")->required()->check(CLI::ExistingPath);
  cmd->add_option("--chat-template", a->chat_template, "Chat template (Jinja) to use instead of the model's")
      ->check(CLI::ExistingFile);
  cmd->add_option("--system", a->system, "A system message that starts every conversation");
  cmd->add_option("-n,--n-predict", a->n_predict, "Most tokens per reply")->capture_default_str()->check(whole_in(1, 1 << 20));
  cmd->add_option("--temp", a->generation.sampling.temperature, "Sampling temperature; 0 = greedy")->capture_default_str()->check(real_in(0.0, 100.0));
  cmd->add_option("--top-k", a->generation.sampling.top_k, "Keep the k most likely tokens; 0 = off")->capture_default_str()->check(whole_at_least(0));
  cmd->add_option("--top-p", a->generation.sampling.top_p, "Nucleus sampling threshold; 1 = off")->capture_default_str()->check(real_in(0.0, 1.0));
  cmd->add_option("-s,--seed", a->generation.seed, "Random seed (default: random)")->check(seed_number());
  cmd->add_flag("--no-spec", a->no_spec, "Decode plainly (no speculative decoding)");
  cmd->add_flag("--timings", a->timings, "After each reply, print the prompt's and the reply's token counts and times");
  cmd->add_flag("--no-reuse", a->no_reuse,
                "Run the whole conversation through the model every turn instead of continuing from the last turn's KV cache (for comparison)");
  cmd->add_flag("--trust-special-tokens", a->trust_special_tokens,
                "Control-token text in what you type and in --system (<|im_start|>...) becomes control tokens; by "
                "default it is plain text");
  add_target_activations_option(cmd, &a->target_activations);
  cmd->add_option("-t,--threads", a->threads, "Worker threads (default: all cores)")->check(whole_in(1, 4096));
  cmd->callback([a, exit_code] { *exit_code = chat(*a); });
}

}  // namespace bitsplit::cli
