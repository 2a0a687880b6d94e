// --delta / --lora (variant_options.h).
#include "variant_options.h"

#include "bitsplit/file_kind.h"

namespace bitsplit::cli {
namespace {

std::string name_of(const std::string& spec) { return spec.substr(0, spec.find('=')); }

// The file of a spec as the registry reads it; only to say what it is when it is the wrong kind.
Status require_kind(const std::string& spec, FileKind want, const char* option, const char* other) {
  std::string path = spec.substr(spec.find('=') + 1);
  auto file = gguf::File::open(path);
  if (!file && path.rfind(':') != std::string::npos) {
    path.resize(path.rfind(':'));
    file = gguf::File::open(path);
  }
  if (!file) return Status::ok();  // the registry reports it
  auto kind = file_kind(file->metadata());
  if (!kind || *kind == want) return Status::ok();
  if (*kind == FileKind::kDelta || *kind == FileKind::kAdapter) {
    return Status::error(path + " is " + file_kind_description(*kind) + "; register it with " + other + ", not " + option);
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
}

Status register_variants(VariantRegistry& registry, const VariantSpecs& specs) {
  for (const std::string& d : specs.deltas) {
    BITSPLIT_RETURN_IF_ERROR(require_kind(d, FileKind::kDelta, "--delta", "--lora").with_context("--delta " + d));
    BITSPLIT_RETURN_IF_ERROR(registry.add_spec(d).with_context("--delta"));
  }
  for (const std::string& l : specs.loras) {
    BITSPLIT_RETURN_IF_ERROR(require_kind(l, FileKind::kAdapter, "--lora", "--delta").with_context("--lora " + l));
    BITSPLIT_RETURN_IF_ERROR(registry.add_spec(l).with_context("--lora"));
  }
  return Status::ok();
}

}  // namespace bitsplit::cli
