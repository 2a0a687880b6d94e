// API 0.6 of the C API: stop strings end the text before them (never showing part of one), the
// registered variants' names and every metadata entry come from the library, mlock locks the planes
// or names the locked-memory limit, a variant may draft with the base's draft, and callers built
// against API 0.5's header keep working (the new fields are not read from their structs).
#include <gtest/gtest.h>

#include <cstddef>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bitsplit/bitsplit.h"
#include "bitsplit/gguf.h"
#include "capi_testing.h"

namespace bitsplit {
namespace {

using namespace capi_testing;

const char* const kPrompt = "And it came to pass, when the king of Israel";

struct Generated {
  Collected c;
  bitsplit_generation_stats stats{sizeof(bitsplit_generation_stats)};
  bitsplit_status status = BITSPLIT_OK;
};

// Every piece's text is appended to `text`; `seen` keeps the text as it stood after each call, so
// a test can check no call ever showed part of a stop string.
struct Pieces {
  std::string text;
  std::vector<std::string> seen;
  int leftover_calls = 0;  // calls with token -1
};

int collect_pieces(void* user, bitsplit_token token, const char* text, size_t length) {
  auto* p = static_cast<Pieces*>(user);
  p->text.append(text, length);
  p->seen.push_back(p->text);
  if (token < 0) ++p->leftover_calls;
  return 0;
}

Generated run(bitsplit_session* s, bitsplit_model* m, int n, Pieces* pieces = nullptr) {
  Generated g;
  const auto ids = tokenize(m, kPrompt);
  g.status = pieces ? bitsplit_session_generate(s, ids.data(), ids.size(), n, collect_pieces, pieces, &g.stats)
                    : bitsplit_session_generate(s, ids.data(), ids.size(), n, collect, &g.c, &g.stats);
  return g;
}

TEST(CApiOptions, StopStringsEndTheTextBeforeThem) {
  BITSPLIT_REQUIRE_FILE(fixture("bible-base.gguf"));
  Loaded l;
  ASSERT_EQ(bitsplit_model_load(converted_base().c_str(), nullptr, &l.model), BITSPLIT_OK) << bitsplit_last_error();
  bitsplit_session_params p = greedy_params();
  bitsplit_session* s = nullptr;
  ASSERT_EQ(bitsplit_session_create(l.model, &p, &s), BITSPLIT_OK);
  const Generated full = run(s, l.model, 40);
  ASSERT_EQ(full.status, BITSPLIT_OK);
  ASSERT_GT(full.c.text.size(), 20u);
  EXPECT_EQ(full.stats.stopped_at_stop, 0);
  const std::string stop = full.c.text.substr(10, 6);
  const std::string cut = full.c.text.substr(0, full.c.text.find(stop));

  // Set on the session: the text ends before the stop string, and no call showed part of it.
  const char* stops[] = {"never in this text", stop.c_str(), ""};
  ASSERT_EQ(bitsplit_session_set_stop(s, stops, 3), BITSPLIT_OK) << bitsplit_last_error();
  for (int round = 0; round < 2; ++round) {  // kept for the session's next generations
    Pieces pieces;
    const Generated g = run(s, l.model, 40, &pieces);
    ASSERT_EQ(g.status, BITSPLIT_OK) << bitsplit_last_error();
    EXPECT_EQ(pieces.text, cut);
    EXPECT_EQ(g.stats.stopped_at_stop, 1);
    EXPECT_LT(g.stats.generated_tokens, 40);
    for (const std::string& shown : pieces.seen) EXPECT_EQ(cut.compare(0, shown.size(), shown), 0) << shown;
  }
  // A stop string that only begins at the end of the text holds that end back until the
  // generation ends, then hands it over in the last call (token -1).
  const std::string tail = full.c.text.substr(full.c.text.size() - 3);
  const std::string never = tail + "\x01never";
  const char* held[] = {never.c_str()};
  ASSERT_EQ(bitsplit_session_set_stop(s, held, 1), BITSPLIT_OK);
  Pieces pieces;
  const Generated g = run(s, l.model, 40, &pieces);
  EXPECT_EQ(pieces.text, full.c.text);
  EXPECT_EQ(pieces.leftover_calls, 1);
  EXPECT_EQ(g.stats.stopped_at_stop, 0);
  ASSERT_GE(pieces.seen.size(), 2u);
  EXPECT_EQ(pieces.seen[pieces.seen.size() - 2], full.c.text.substr(0, full.c.text.size() - 3));
  // None: the whole text again.
  ASSERT_EQ(bitsplit_session_set_stop(s, nullptr, 0), BITSPLIT_OK);
  EXPECT_EQ(run(s, l.model, 40).c.text, full.c.text);
  // Bad arguments are statuses with messages.
  EXPECT_EQ(bitsplit_session_set_stop(s, nullptr, 2), BITSPLIT_ERR_INVALID_ARGUMENT);
  const char* with_null[] = {"a", nullptr};
  EXPECT_EQ(bitsplit_session_set_stop(s, with_null, 2), BITSPLIT_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(bitsplit_last_error()).find("stop string 1 is NULL"), std::string::npos);
  EXPECT_EQ(bitsplit_session_set_stop(nullptr, stops, 1), BITSPLIT_ERR_INVALID_ARGUMENT);
  bitsplit_session_free(s);

  // Given in the session's parameters (copied at creation), on plain decoding too: the same cut.
  const std::string copied = stop;
  const char* param_stops[] = {copied.c_str()};
  p.stop = param_stops;
  p.n_stop = 1;
  for (int speculative : {1, 0}) {
    p.speculative = speculative;
    ASSERT_EQ(bitsplit_session_create(l.model, &p, &s), BITSPLIT_OK) << bitsplit_last_error();
    Pieces plain_pieces;
    const Generated pg = run(s, l.model, 40, &plain_pieces);
    EXPECT_EQ(plain_pieces.text, cut) << speculative;
    EXPECT_EQ(pg.stats.stopped_at_stop, 1);
    bitsplit_session_free(s);
  }
  p.n_stop = -1;
  EXPECT_EQ(bitsplit_session_create(l.model, &p, &s), BITSPLIT_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(bitsplit_last_error()).find("n_stop"), std::string::npos);
}

TEST(CApiOptions, VariantNamesComeFromTheRegistry) {
  BITSPLIT_REQUIRE_FILE(fixture("bible-devil-lora.gguf"));
  Loaded l;
  ASSERT_EQ(bitsplit_model_load(converted_base().c_str(), nullptr, &l.model), BITSPLIT_OK);
  EXPECT_EQ(bitsplit_model_variant_count(l.model), 0);
  EXPECT_EQ(bitsplit_model_variant_name(l.model, 0), nullptr);
  const std::string lora = fixture("bible-devil-lora.gguf");
  ASSERT_EQ(bitsplit_model_add_lora(l.model, "zero", lora.c_str(), 0.0f), BITSPLIT_OK);
  ASSERT_EQ(bitsplit_model_add_lora(l.model, "devil", lora.c_str(), 1.0f), BITSPLIT_OK);
  ASSERT_EQ(bitsplit_model_variant_count(l.model), 2);
  const char* first = bitsplit_model_variant_name(l.model, 0);
  ASSERT_NE(first, nullptr);
  EXPECT_STREQ(first, "devil");  // in the order of the names' bytes
  EXPECT_STREQ(bitsplit_model_variant_name(l.model, 1), "zero");
  EXPECT_EQ(bitsplit_model_variant_name(l.model, 2), nullptr);
  EXPECT_EQ(bitsplit_model_variant_name(l.model, -1), nullptr);
  EXPECT_EQ(bitsplit_model_variant_name(nullptr, 0), nullptr);
  ASSERT_EQ(bitsplit_model_remove_variant(l.model, "devil"), BITSPLIT_OK);
  EXPECT_EQ(bitsplit_model_variant_count(l.model), 1);
  EXPECT_STREQ(bitsplit_model_variant_name(l.model, 0), "zero");
  EXPECT_STREQ(first, "devil") << "a name handed out lives as long as the model";
}

TEST(CApiOptions, EveryMetadataEntryAsJson) {
  BITSPLIT_REQUIRE_FILE(fixture("bible-base.gguf"));
  Loaded l;
  ASSERT_EQ(bitsplit_model_load(converted_base().c_str(), nullptr, &l.model), BITSPLIT_OK);
  auto file = gguf::File::open(converted_base());
  ASSERT_TRUE(file.is_ok());
  const auto& entries = file->metadata().entries();
  ASSERT_EQ(bitsplit_model_meta_count(l.model), int32_t(entries.size()));
  EXPECT_EQ(bitsplit_model_meta_key(l.model, int32_t(entries.size())), nullptr);
  EXPECT_EQ(bitsplit_model_meta_key(l.model, -1), nullptr);
  for (size_t i = 0; i < entries.size(); ++i) {
    const char* key = bitsplit_model_meta_key(l.model, int32_t(i));
    ASSERT_NE(key, nullptr);
    EXPECT_EQ(entries[i].first, key) << "file order";
    const char* text = bitsplit_model_meta_json(l.model, key);
    ASSERT_NE(text, nullptr) << key;
    const auto j = nlohmann::json::parse(text, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << key << ": " << text;
    const gguf::Value& v = entries[i].second;
    switch (v.type) {
      case gguf::ValueType::kString: EXPECT_EQ(j, std::get<std::string>(v.data)) << key; break;
      case gguf::ValueType::kArray: EXPECT_EQ(j.size(), std::get<gguf::Array>(v.data).items.size()) << key; break;
      case gguf::ValueType::kBool: EXPECT_EQ(j, std::get<bool>(v.data)) << key; break;
      case gguf::ValueType::kFloat32:  // the float's shortest spelling: the same float back
        EXPECT_EQ(float(j.get<double>()), float(std::get<double>(v.data))) << key << ": " << text;
        EXPECT_LE(std::strlen(text), 15u) << text;
        break;
      default: EXPECT_TRUE(j.is_number()) << key; break;
    }
  }
  EXPECT_STREQ(bitsplit_model_meta_json(l.model, "general.architecture"), "\"llama\"");
  const auto ctx = nlohmann::json::parse(bitsplit_model_meta_json(l.model, "llama.context_length"));
  EXPECT_EQ(ctx.get<int64_t>(), bitsplit_model_n_ctx_train(l.model));
  const auto tokens = nlohmann::json::parse(bitsplit_model_meta_json(l.model, "tokenizer.ggml.tokens"));
  EXPECT_EQ(int32_t(tokens.size()), bitsplit_model_n_vocab(l.model));
  EXPECT_EQ(bitsplit_model_meta_json(l.model, "no.such.key"), nullptr);
  EXPECT_EQ(bitsplit_model_meta_json(l.model, nullptr), nullptr);
  EXPECT_EQ(bitsplit_model_meta_count(nullptr), 0);
}

// AddressSanitizer intercepts mlock(2) and does nothing (its shadow memory would be locked too),
// so under it the kernel's count of locked memory cannot show the planes.
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kKernelSeesMlock = false;
#else
constexpr bool kKernelSeesMlock = true;
#endif

// The kernel's count of this process's locked memory (VmLck, kB), or -1.
long locked_kib() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmLck:", 0) == 0) return std::stol(line.substr(6));
  }
  return -1;
}

// Within the limits the planes are locked (VmLck counts them); where this process may not lock them
// (a small `ulimit -l` and no CAP_IPC_LOCK), the load fails naming the limit. The under-the-limit
// case is the Python package's test (a child process with the limit lowered).
TEST(CApiOptions, MlockLocksThePlanesOrNamesTheLimit) {
  BITSPLIT_REQUIRE_FILE(fixture("bible-base.gguf"));
  bitsplit_model_params mp;
  bitsplit_model_params_init(&mp);
  EXPECT_EQ(mp.mlock, 0);
  mp.mlock = 1;
  const long before = locked_kib();
  Loaded l;
  const bitsplit_status st = bitsplit_model_load(converted_base().c_str(), &mp, &l.model);
  if (st == BITSPLIT_OK) {
    const uint64_t locked = bitsplit_model_locked_bytes(l.model);
    EXPECT_GT(locked, 0u);
    if (before >= 0 && kKernelSeesMlock) {
      EXPECT_GE(locked_kib() - before, long(locked / 1024) - 4) << "VmLck grows by the planes";
    }
  } else {
    EXPECT_EQ(st, BITSPLIT_ERR_LOAD);
    const std::string message = bitsplit_last_error();
    EXPECT_NE(message.find("mlock: cannot lock the model's planes in RAM"), std::string::npos) << message;
    EXPECT_NE(message.find("the locked-memory limit is"), std::string::npos) << message;
    EXPECT_EQ(message.find("--mlock"), std::string::npos) << "worded for the API, not the CLI: " << message;
  }
  // Not asked: nothing locked.
  Loaded unlocked;
  ASSERT_EQ(bitsplit_model_load(converted_base().c_str(), nullptr, &unlocked.model), BITSPLIT_OK);
  EXPECT_EQ(bitsplit_model_locked_bytes(unlocked.model), 0u);
  // A model without planes has nothing to lock: refused, as the CLI's --mlock refuses it.
  bitsplit_model* plain = nullptr;
  EXPECT_EQ(bitsplit_model_load(fixture("bible-base.gguf").c_str(), &mp, &plain), BITSPLIT_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(bitsplit_last_error()).find("bitsplit convert"), std::string::npos);
  EXPECT_EQ(plain, nullptr);
}

TEST(CApiOptions, AVariantCanDraftWithTheBaseDraft) {
  BITSPLIT_REQUIRE_FILE(fixture("bible-devil-lora.gguf"));
  Loaded l;
  ASSERT_EQ(bitsplit_model_load(converted_base().c_str(), nullptr, &l.model), BITSPLIT_OK);
  ASSERT_EQ(bitsplit_model_add_lora(l.model, "devil", fixture("bible-devil-lora.gguf").c_str(), 1.0f), BITSPLIT_OK);
  bitsplit_session_params p;
  bitsplit_session_params_init(&p);
  EXPECT_EQ(p.base_draft, 0);
  p.temperature = 0;
  p.base_draft = 1;
  bitsplit_session* s = nullptr;
  EXPECT_EQ(bitsplit_session_create(l.model, &p, &s), BITSPLIT_ERR_INVALID_ARGUMENT) << "the base drafts itself";
  EXPECT_NE(std::string(bitsplit_last_error()).find("variant"), std::string::npos);
  p.variant = "devil";
  p.budget = 4;
  for (int base_draft : {0, 1}) {
    p.base_draft = base_draft;
    ASSERT_EQ(bitsplit_session_create(l.model, &p, &s), BITSPLIT_OK) << bitsplit_last_error();
    const Generated g = run(s, l.model, 32);
    bitsplit_session_free(s);
    EXPECT_EQ(g.stats.speculative, 1);
    EXPECT_GT(g.stats.checks, 0);
    p.speculative = 0;  // the variant's own plain decoding: the text both must give
    ASSERT_EQ(bitsplit_session_create(l.model, &p, &s), BITSPLIT_OK);
    const Generated plain = run(s, l.model, 32);
    bitsplit_session_free(s);
    p.speculative = 1;
    EXPECT_EQ(g.c.tokens, plain.c.tokens) << "base_draft " << base_draft;
  }
}

// A caller built against API 0.5's header: its structs end where 0.5's did, and the fields after
// them (mlock, base_draft, stop, stopped_at_stop) are neither read nor written.
TEST(CApiOptions, CallersOfTheLastVersionKeepWorking) {
  BITSPLIT_REQUIRE_FILE(fixture("bible-base.gguf"));
  const size_t model_v05 = offsetof(bitsplit_model_params, reserved0) + sizeof(int32_t);
  const size_t session_v05 = offsetof(bitsplit_session_params, reserved1) + sizeof(int32_t);
  const size_t stats_v05 = offsetof(bitsplit_generation_stats, stopped_at_stop);
  if (sizeof(void*) == 8) {
    EXPECT_EQ(model_v05, 56u) << "API 0.5's sizeof(bitsplit_model_params) on LP64";
    EXPECT_EQ(session_v05, 80u) << "API 0.5's sizeof(bitsplit_session_params) on LP64";
  }
  // The model: mlock past a 0.5 caller's struct is not read (a plain model would refuse it).
  bitsplit_model_params mp;
  bitsplit_model_params_init(&mp);
  mp.mlock = 1;
  mp.size = model_v05;
  Loaded l;
  ASSERT_EQ(bitsplit_model_load(fixture("bible-base.gguf").c_str(), &mp, &l.model), BITSPLIT_OK) << bitsplit_last_error();
  EXPECT_EQ(bitsplit_model_locked_bytes(l.model), 0u);
  Loaded converted;
  ASSERT_EQ(bitsplit_model_load(converted_base().c_str(), nullptr, &converted.model), BITSPLIT_OK);
  // The session: base_draft (refused without a variant) and a stop string are not read.
  bitsplit_session_params p = greedy_params();
  p.base_draft = 1;
  const char* stops[] = {" "};
  p.stop = stops;
  p.n_stop = 1;
  p.size = session_v05;
  bitsplit_session* s = nullptr;
  ASSERT_EQ(bitsplit_session_create(converted.model, &p, &s), BITSPLIT_OK) << bitsplit_last_error();
  // The statistics: a 0.5 caller's struct is written up to its end only.
  bitsplit_generation_stats st;
  std::memset(static_cast<void*>(&st), 0x5a, sizeof st);
  st.size = stats_v05;
  const auto ids = tokenize(converted.model, kPrompt);
  Collected c;
  ASSERT_EQ(bitsplit_session_generate(s, ids.data(), ids.size(), 16, collect, &c, &st), BITSPLIT_OK);
  EXPECT_EQ(st.size, stats_v05);
  EXPECT_EQ(st.generated_tokens, 16) << "no stop string ended it";
  EXPECT_EQ(st.stopped_at_stop, 0x5a5a5a5a) << "written past the caller's size";
  bitsplit_session_free(s);
  // Sizes ending inside the new fields are refused.
  p.size = session_v05 + 2;
  EXPECT_EQ(bitsplit_session_create(converted.model, &p, &s), BITSPLIT_ERR_INVALID_ARGUMENT);
  mp.size = model_v05 + 2;
  bitsplit_model* m = nullptr;
  EXPECT_EQ(bitsplit_model_load(converted_base().c_str(), &mp, &m), BITSPLIT_ERR_INVALID_ARGUMENT);
}

}  // namespace
}  // namespace bitsplit
