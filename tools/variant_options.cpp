// --delta / --lora / the K-Merge pool (variant_options.h).
#include "variant_options.h"

#include <map>

#include "bitsplit/adapter_pool.h"
#include "bitsplit/file_kind.h"
#include "bitsplit/vram_plan.h"
#include "commands.h"
#include "option_checks.h"

namespace bitsplit::cli {
namespace {

std::string name_of(const std::string& spec) { return spec.substr(0, spec.find('=')); }

// The file of a spec as the registry reads it; only to say what it is when it is the wrong kind.
Status require_kind(const std::string& spec, FileKind want, const char* option, const char* other) {
  auto v = parse_variant_spec(spec);
  if (!v) return Status::ok();  // the registry reports it
  auto file = gguf::File::open(v->path);
  if (!file) return Status::ok();
  auto kind = file_kind(file->metadata());
  if (!kind || *kind == want) return Status::ok();
  if (*kind == FileKind::kDelta || *kind == FileKind::kAdapter) {
    return Status::error(v->path + " is " + file_kind_description(*kind) + "; register it with " + other + ", not " + option);
  }
  return Status::ok();
}

// The LoRA specs through a K-Merge pool; every served name registered with its member's variant.
Status register_pooled(VariantRegistry& registry, const VariantSpecs& specs, const LoadedModel& base,
                       const std::function<void(const std::string&)>& log) {
  auto budget = parse_byte_size(specs.storage_budget);
  if (!budget) return budget.status().with_context("--variant-storage-budget");
  std::map<std::string, std::string> texts;
  for (const std::string& c : specs.calibrations) {
    const size_t eq = c.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == c.size()) {
      return Status::error("--lora-calibration takes NAME=TEXT, not '" + c + "'");
    }
    texts[c.substr(0, eq)] = c.substr(eq + 1);
  }
  AdapterPoolOptions o;
  o.budget_bytes = *budget;
  o.kl_threshold = specs.kl_threshold;
  o.bos = base.tokenizer->vocab().bos;
  AdapterPool pool(base.model, o);
  for (const std::string& spec : specs.loras) {
    BITSPLIT_RETURN_IF_ERROR(require_kind(spec, FileKind::kAdapter, "--lora", "--delta").with_context("--lora " + spec));
    auto parsed = parse_variant_spec(spec);
    if (!parsed) return parsed.status().with_context("--lora");
    const VariantSpec v = *parsed;
    auto text = texts.find(v.name);
    if (text == texts.end()) {
      return Status::error("--variant-storage-budget: adapter '" + v.name +
                           "' needs its calibration text (--lora-calibration " + v.name + "=TEXT)");
    }
    BITSPLIT_ASSIGN_OR_RETURN(std::string body, read_text_file(text->second));
    auto reread = [v]() -> Result<PoolAdapter> {
      BITSPLIT_ASSIGN_OR_RETURN(LoraFile l, open_lora(v.path));
      return read_pool_adapter(l, v.scale, v.name);
    };
    auto l = open_lora(v.path);
    if (!l) return l.status().with_context("--lora");
    BITSPLIT_RETURN_IF_ERROR(check_lora_base(*l, base.model).with_context("--lora " + v.name));
    BITSPLIT_ASSIGN_OR_RETURN(PoolAdapter adapter, read_pool_adapter(*l, v.scale, v.name));
    auto decision = pool.request(std::move(adapter), base.tokenizer->encode(body, {.add_special = false}), reread);
    if (!decision) return decision.status().with_context("--variant-storage-budget");
    if (log) log(decision->describe());
  }
  for (const std::string& c : specs.calibrations) {
    const std::string n = name_of(c);
    bool known = false;
    for (const std::string& l : specs.loras) known = known || name_of(l) == n;
    if (!known) return Status::error("--lora-calibration " + c + ": no --lora named '" + n + "'");
  }
  std::map<const PoolAdapter*, std::shared_ptr<const Variant>> built;  // one variant per member
  for (const auto& [name, member] : pool.served()) {
    const PoolAdapter* a = pool.adapter_of(name);
    if (!built.contains(a)) {
      BITSPLIT_ASSIGN_OR_RETURN(built[a], a->variant(base.model));
    }
    BITSPLIT_RETURN_IF_ERROR(registry.add_resident(name, built[a]));
  }
  return Status::ok();
}

}  // namespace

std::vector<std::string> VariantSpecs::names() const {
  std::vector<std::string> n;
  for (const auto& d : deltas) n.push_back(name_of(d));
  for (const auto& l : loras) n.push_back(name_of(l));
  return n;
}

void add_variant_options(CLI::App* cmd, VariantSpecs* specs, const std::string& what) {
  cmd->add_option("--delta", specs->deltas,
                  "Register a BitDelta variant NAME=FILE (a .delta.gguf from `bitsplit delta` made against this "
                  "model's source; repeatable); " + what)
      ->type_name("NAME=FILE");
  cmd->add_option("--lora", specs->loras,
                  "Register a LoRA adapter as the variant NAME: NAME=FILE or NAME=FILE:SCALE (llama.cpp's GGUF "
                  "adapter format; SCALE multiplies alpha/rank, default 1; repeatable); " + what)
      ->type_name("NAME=FILE[:SCALE]");
  cmd->add_option("--variant-storage-budget", specs->storage_budget,
                  "Keep the --lora adapters in a K-Merge pool of at most SIZE bytes of factors (e.g. 64M): in the "
                  "order given, one that does not fit is merged (OPCM) into its most similar member if every task "
                  "then stays within --merge-kl-threshold on its calibration text, else refused; decisions are logged")
      ->type_name("SIZE");
  cmd->add_option("--lora-calibration", specs->calibrations,
                  "With --variant-storage-budget: the held-out text of adapter NAME, on which its KL to a merge is "
                  "measured (one per --lora)")
      ->type_name("NAME=TEXT");
  cmd->add_option("--merge-kl-threshold", specs->kl_threshold,
                  "With --variant-storage-budget: the mean KL (nats per token) a task may lose to a merge")
      ->capture_default_str()->check(real_in(0.0, 1e6));
}

Status register_variants(VariantRegistry& registry, const VariantSpecs& specs, const LoadedModel& base,
                         const std::function<void(const std::string&)>& log) {
  for (const std::string& d : specs.deltas) {
    BITSPLIT_RETURN_IF_ERROR(require_kind(d, FileKind::kDelta, "--delta", "--lora").with_context("--delta " + d));
    BITSPLIT_RETURN_IF_ERROR(registry.add_spec(d).with_context("--delta"));
  }
  if (!specs.storage_budget.empty()) return register_pooled(registry, specs, base, log);
  if (!specs.calibrations.empty()) return Status::error("--lora-calibration needs --variant-storage-budget");
  for (const std::string& l : specs.loras) {
    BITSPLIT_RETURN_IF_ERROR(require_kind(l, FileKind::kAdapter, "--lora", "--delta").with_context("--lora " + l));
    BITSPLIT_RETURN_IF_ERROR(registry.add_spec(l).with_context("--lora"));
  }
  return Status::ok();
}

}  // namespace bitsplit::cli
