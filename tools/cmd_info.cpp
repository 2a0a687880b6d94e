// `bitsplit info`: what a model file holds: container, architecture, shapes, tensors, tokenizer.
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>

#include "bitsplit/cpu.h"
#include "bitsplit/convert.h"
#include "bitsplit/delta_format.h"
#include "bitsplit/file_kind.h"
#include "bitsplit/gpu.h"
#include "bitsplit/lora_format.h"
#include "bitsplit/memory_plan.h"
#include "bitsplit/model.h"
#include "bitsplit/tokenizer.h"
#include "bitsplit/vram_plan.h"
#include "commands.h"

namespace bitsplit::cli {
namespace {

struct InfoOptions {
  std::string model;
  bool tensors = false;
  bool topology = false;
  std::string vram_budget;
};

// A BitDelta variant file: what it was made from and what it changes.
int info_delta(const std::string& path) {
  auto d = open_delta(path);
  if (!d) return report_error(d.status().message());
  int64_t planes = 0, sign_weights = 0, full = 0;
  uint64_t bytes = 0;
  for (const auto& [name, e] : d->tensors) {
    if (e.kind == DeltaTensor::Kind::kSigns) {
      ++planes;
      sign_weights += e.out * e.row_bytes * 8;
      bytes += e.signs->nbytes + e.alpha->nbytes;
    } else {
      ++full;
      bytes += e.full->nbytes;
    }
  }
  std::printf("file:          %s\n", path.c_str());
  std::printf("type:          BitDelta variant (bitsplit.delta)\n");
  if (!d->name.empty()) std::printf("name:          %s\n", d->name.c_str());
  std::printf("base sha256:   %s\n", d->base_sha256.c_str());
  std::printf("fine-tuned:    sha256 %s\n", d->finetuned_sha256.c_str());
  std::printf("sign planes:   %lld (about %lld weights, 1 bit each; alpha per %s)\n", (long long)planes,
              (long long)sign_weights, d->alpha == quant::DeltaAlpha::kRow ? "row" : "matrix");
  if (auto fit = d->file->metadata().get_string("bitsplit.delta.alpha_fit")) std::printf("alpha fit:     %s\n", fit->c_str());
  std::printf("full tensors:  %lld\n", (long long)full);
  std::printf("size:          %s\n", format_bytes(bytes).c_str());
  std::printf("run it:        bitsplit run -m BASE.bitsplit.gguf --delta NAME=%s --variant NAME\n", path.c_str());
  return 0;
}

// A LoRA adapter: what it adapts, at which ranks, and how big it is.
int info_lora(const std::string& path) {
  auto l = open_lora(path);
  if (!l) return report_error(l.status().message());
  std::map<int64_t, int64_t> ranks;  // rank -> tensors
  uint64_t bytes = 0;
  for (const auto& [name, t] : l->tensors) {
    ++ranks[t.rank];
    bytes += t.a->nbytes + t.b->nbytes;
  }
  std::string rank_list;
  for (const auto& [r, n] : ranks) rank_list += (rank_list.empty() ? "" : ", ") + std::to_string(n) + " of rank " + std::to_string(r);
  std::printf("file:          %s\n", path.c_str());
  std::printf("type:          LoRA adapter (llama.cpp adapter format)\n");
  if (!l->name.empty()) std::printf("name:          %s\n", l->name.c_str());
  std::printf("architecture:  %s\n", l->architecture.c_str());
  std::printf("alpha:         %g (scale alpha/rank%s)\n", double(l->alpha), l->alpha == 0.0f ? "; 0 means 1" : "");
  std::printf("adapted:       %zu matrices (%s), %lld parameters\n", l->tensors.size(), rank_list.c_str(),
              (long long)l->parameters());
  std::printf("size:          %s\n", format_bytes(bytes).c_str());
  std::printf("run it:        bitsplit run -m BASE.gguf --lora NAME=%s --variant NAME\n", path.c_str());
  return 0;
}

// The architecture and shapes as the forward pass reads them, with the family's specifics.
void print_config(const ModelConfig& c) {
  std::printf("architecture:  %s\n", c.arch_name.c_str());
  std::printf("layers:        %lld\n", (long long)c.n_layers);
  std::printf("embedding:     %lld\n", (long long)c.n_embd);
  std::printf("heads:         %lld query, %lld key/value (head size %lld)\n", (long long)c.n_heads,
              (long long)c.n_kv_heads, (long long)c.head_dim);
  if (c.is_moe()) {
    std::printf("ffn:           mixture of %lld experts of width %lld, %lld per token (SwiGLU), weights %s\n",
                (long long)c.n_expert, (long long)c.n_ff_exp, (long long)c.n_expert_used,
                c.expert_weights_norm ? "renormalised over the chosen" : "the router's probabilities");
    if (c.n_ff_shexp > 0) std::printf("shared expert: width %lld, sigmoid-gated\n", (long long)c.n_ff_shexp);
  } else {
    std::printf("ffn:           %lld (%s)\n", (long long)c.n_ff,
                c.ffn_act == FfnActivation::kGeluTanh ? "GeGLU, tanh GELU" : "SwiGLU");
  }
  std::printf("vocabulary:    %lld\n", (long long)c.n_vocab);
  std::printf("context:       %lld\n", (long long)c.n_ctx_train);
  std::printf("rope:          %s order, %lld dims, base %g, scale %g\n",
              c.rope_order == cpu::RopeOrder::kNormal ? "normal" : "neox", (long long)c.n_rot, c.rope_base,
              c.rope_freq_scale);
  if (c.rope_original_context > 0) {
    std::printf("rope scaling:  LongRoPE: short factors for sequences up to %lld positions, long factors beyond "
                "(prompt + tokens to generate), cos/sin x %g\n",
                (long long)c.rope_original_context, c.rope_attn_factor);
  }
  std::printf("rms epsilon:   %g\n", c.rms_eps);
  if (c.has_qkv_bias) std::printf("attention:     q/k/v biases\n");
  if (c.has_qk_norm) std::printf("attention:     RMSNorm of each query and key head\n");
  if (c.attn_scale != 0.0f && std::fabs(c.attn_scale * std::sqrt(float(c.head_dim)) - 1.0f) > 1e-6f) {
    std::printf("attention:     scores scaled by %g (not 1/sqrt(head size))\n", c.attn_scale);
  }
  if (c.sliding_window > 0) {
    std::string pattern;
    for (uint8_t s : c.swa_layers) pattern += s ? 'S' : 'G';
    std::printf("sliding window: %lld positions in the S layers (RoPE base %g), global in the G: %s\n",
                (long long)c.sliding_window, c.rope_base_swa, pattern.c_str());
  }
  if (c.embd_scale != 1.0f) std::printf("embedding scale: %g (sqrt of the embedding width)\n", c.embd_scale);
  if (c.has_post_norms) std::printf("norms:         also after attention and after the FFN (before each residual add)\n");
  if (c.attn_softcap > 0.0f) std::printf("soft cap:      attention scores %g\n", c.attn_softcap);
  if (c.final_softcap > 0.0f) std::printf("soft cap:      logits %g\n", c.final_softcap);
  std::printf("output head:   %s\n", c.tied_output ? "tied to token_embd" : "separate (output.weight)");
}

// RAM as `run` loads it, at the full training context (a run sizes its KV cache to itself).
void print_ram_plan(const WeightSource& w, const ModelConfig& c) {
  auto plan = plan_memory(w, c, {});
  if (!plan) return;
  std::printf("ram plan:      %s\n", plan->summary().c_str());
  if (auto machine = system_memory(); machine) {
    std::printf("this machine:  %s%s\n", machine->summary().c_str(),
                check_memory(*plan, *machine) ? "" : " (not enough at the full context)");
  }
}

// The planes of a bit-split model: their bits and sizes per tier, and the file's format.
void print_split_planes(const WeightSource& w, const SplitFormat& f) {
  uint64_t vram = 0, ram = 0;
  for (const auto& t : w.tensors()) {
    if (t.name.ends_with(".draft_codes") || t.name.ends_with(".draft_scales") || t.name.ends_with(".draft_offsets"))
      vram += t.nbytes;
    if (is_residual_plane_tensor(t.name)) ram += t.nbytes;
  }
  if (f.draft_bits_by_tensor.empty()) {
    std::printf("bit-split:     group %d, %d-bit draft plane %s (VRAM tier), %d-bit residual plane %s (RAM tier)\n",
                f.group, f.draft_bits, format_bytes(vram).c_str(), f.residual_bits, format_bytes(ram).c_str());
  } else {
    // Bits per weight over the projections' padded widths (draft code bytes -> weights).
    std::map<std::string, int> bits;
    double weights = 0;
    for (const auto& t : w.tensors()) {
      if (!t.name.ends_with(".draft_codes") || t.dims.size() != 2) continue;
      const std::string base = t.name.substr(0, t.name.size() - std::string(".draft_codes").size());
      bits[base] = f.draft_bits_for(base);
      weights += double(t.dims[0]) * 8.0 / bits[base] * double(t.dims[1]);
    }
    std::printf("bit-split:     group %d, mixed draft plane %s (VRAM tier), %d-bit residual plane %s (RAM tier)\n",
                f.group, format_bytes(vram).c_str(), f.residual_bits, format_bytes(ram).c_str());
    std::printf("draft bits:    %s\n", describe_draft_bits(bits, weights > 0 ? 8.0 * double(vram) / weights : 0.0).c_str());
  }
  const gguf::Metadata& m = w.metadata();
  auto text_of = [&m](const char* key) {
    auto v = m.get_string(key);
    return v ? *v : std::string();
  };
  auto int_of = [&m](const char* key) {
    auto v = m.get_int(key);
    return v ? (long long)*v : 0LL;
  };
  if (const std::string text = text_of("bitsplit.calibration.text"); !text.empty()) {
    std::printf("calibration:   draft fitted with error feedback layer by layer on the %s text (sha256 %s), %lld tokens, "
                "moments in blocks of %lld columns\n",
                text.c_str(), text_of("bitsplit.calibration.sha256").c_str(), int_of("bitsplit.calibration.tokens"),
                int_of("bitsplit.calibration.covariance_block"));
  } else {
    std::printf("calibration:   none (each weight fitted alone%s)\n",
                text_of("bitsplit.quantizer").find("draft_fit=gptq") != std::string::npos
                    ? "; the draft fitted with feedback from an importance file's covariances"
                    : "");
  }
  if (f.packed_residual()) {
    std::printf("format:        version %u; the residual is stored in the kernels' layout and used from the file's memory map\n",
                f.version);
  } else {
    std::printf("format:        version %u; the residual is repacked into a copy in RAM at load (`bitsplit convert` this "
                "file to rewrite it as version %u, used from the file)\n", f.version, kSplitFormatVersion);
  }
}

// Where the draft planes would go: under the budget asked for, else the device's default; and
// whether the whole draft would run on the device.
void print_vram_plan(const WeightSource& w, const ModelConfig& c, std::optional<uint64_t> asked_budget) {
  std::optional<uint64_t> budget;
  std::string why;
  if (asked_budget) {
    budget = asked_budget;
  } else if (gpu::device_count() > 0) {
    auto b = default_vram_budget(0);
    if (b) budget = *b;
    why = b ? " (free memory of device 0 minus the margin)" : " (" + b.status().message() + ")";
  }
  auto sizes = draft_plane_sizes(w, c.n_layers, projection_kinds(c));
  if (!sizes) {
    std::printf("vram plan:     (%s)\n", sizes.status().message().c_str());
  } else if (budget) {
    const VramPlan plan = plan_vram(*sizes, *budget);
    std::printf("vram plan:     %s%s\n", plan.summary().c_str(), why.c_str());
    // The whole draft on the device at the full context (speculative decoding sizes its
    // cache to the run: prompt + tokens + budget).
    const DeviceDraftBytes extra =
        device_draft_bytes(c.n_layers, c.n_embd, c.n_heads, c.n_kv_heads, c.head_dim, c.n_ff, c.n_vocab,
                           c.n_ctx_train, 64, {c.n_expert, c.n_expert_used, c.n_ff_exp, c.n_ff_shexp});
    const bool fits = plan.host_planes == 0 && plan.device_bytes + extra.total() <= *budget;
    std::printf("device draft:  %s more at the full context of %lld tokens: %s\n", extra.summary().c_str(),
                (long long)c.n_ctx_train,
                fits ? "fits, the whole draft runs on the GPU"
                     : "does not fit, the GPU runs the draft's projections and the CPU the rest");
  } else {
    std::printf("vram plan:     no CUDA device; `--vram-budget SIZE` shows what a GPU of that size would hold\n");
  }
}

// A model the forward pass can run: its shape, its RAM and, bit-split, its planes and VRAM.
void print_runnable_model(const WeightSource& w, const ModelConfig& c, std::optional<uint64_t> asked_budget) {
  print_config(c);
  print_ram_plan(w, c);
  auto split = read_split_format(w.metadata());
  if (!split || !split->has_value()) return;
  print_split_planes(w, **split);
  if (auto sha = w.metadata().get_string("bitsplit.source_sha256")) std::printf("source sha256: %s\n", sha->c_str());
  print_vram_plan(w, c, asked_budget);
}

// Elements and bytes per tensor type; with --tensors, every tensor.
void print_tensors(const WeightSource& w, bool every_tensor) {
  std::map<std::string, std::pair<int64_t, uint64_t>> by_type;  // type -> (elements, bytes)
  uint64_t total_bytes = 0;
  int64_t total_elements = 0;
  for (const auto& t : w.tensors()) {
    auto& e = by_type[gguf::tensor_type_name(t.type)];
    e.first += t.n_elements();
    e.second += t.nbytes;
    total_elements += t.n_elements();
    total_bytes += t.nbytes;
  }
  const bool packed = w.metadata().contains("bitsplit.format_version");
  std::printf("%s%lld (%s)\n", packed ? "stored:        elements " : "parameters:    ", (long long)total_elements,
              format_bytes(total_bytes).c_str());
  for (const auto& [type, e] : by_type) {
    std::printf("  %-8s     %lld weights, %s\n", type.c_str(), (long long)e.first, format_bytes(e.second).c_str());
  }
  if (!every_tensor) return;
  std::printf("tensors:\n");
  for (const auto& t : w.tensors()) {
    std::printf("  %-32s %-6s %-20s %s\n", t.name.c_str(), gguf::tensor_type_name(t.type).c_str(),
                t.shape_string().c_str(), format_bytes(t.nbytes).c_str());
  }
}

// The tokenizer, and what CUDA this build and machine have.
void print_tokenizer_and_cuda(const WeightSource& w) {
  auto tokenizer = Tokenizer::from_metadata(w.metadata());
  std::printf("tokenizer:     %s\n",
              tokenizer ? (*tokenizer)->describe().c_str() : ("(" + tokenizer.status().message() + ")").c_str());
  const int gpus = gpu::device_count();
  std::string cuda = "not compiled in";
  if (gpu::compiled_with_cuda()) {
    auto device = gpus > 0 ? gpu::describe_device(0) : Result<std::string>(Status::error("no device"));
    cuda = device ? "compiled in, device 0: " + *device : "compiled in, no device found";
  }
  std::printf("cuda:          %s\n", cuda.c_str());
}

int info(const InfoOptions& o) {
  if (o.topology) {
    // What the CPU tier detected and chose: cores, NUMA nodes, ISA tier, arena size.
    cpu::CpuContext ctx;
    std::printf("%s", ctx.describe().c_str());
    if (o.model.empty()) return 0;
  }
  if (o.model.empty()) return report_error("a model file is required (or pass --topology)");
  // Options are checked before anything is printed.
  auto asked_budget = vram_budget_option(o.vram_budget);
  if (!asked_budget) return report_error(asked_budget.status().message());
  auto source = open_weights(o.model);
  if (!source) return report_error(source.status().message());
  const WeightSource& w = **source;
  auto kind = file_kind(w.metadata());
  if (!kind) return report_error(kind.status().with_context(o.model).message());
  if (*kind == FileKind::kDelta) {
    if (*asked_budget) return report_error("--vram-budget plans a bit-split model's draft planes; " + o.model + " is a delta file");
    return info_delta(o.model);
  }
  if (*kind == FileKind::kAdapter) {
    if (*asked_budget) return report_error("--vram-budget plans a bit-split model's draft planes; " + o.model + " is an adapter");
    return info_lora(o.model);
  }
  if (*kind != FileKind::kModel && *kind != FileKind::kBitSplitModel) {
    return report_error(require_model(w, ModelUse::kAny).message());
  }
  if (*asked_budget && *kind != FileKind::kBitSplitModel) {
    return report_error("--vram-budget plans a bit-split model's draft planes; " + o.model +
                        " is not one (`bitsplit convert` it first)");
  }
  std::printf("file:          %s\n", w.path().c_str());
  std::printf("container:     %s\n", w.describe().c_str());
  if (auto name = w.metadata().get_string("general.name")) std::printf("name:          %s\n", name->c_str());
  if (auto config = read_model_config(w); config) {
    print_runnable_model(w, *config, *asked_budget);
  } else {
    std::printf("architecture:  (cannot run: %s)\n", config.status().message().c_str());
  }
  print_tensors(w, o.tensors);
  print_tokenizer_and_cuda(w);
  return 0;
}

}  // namespace

void add_info_command(CLI::App& app, int* exit_code) {
  auto o = std::make_shared<InfoOptions>();
  CLI::App* cmd = app.add_subcommand("info", "Describe a model file: architecture, shapes, tensor types, tokenizer");
  cmd->add_option("model", o->model, "Model file (.gguf); optional with --topology")->check(CLI::ExistingPath);
  cmd->add_flag("--tensors", o->tensors, "List every tensor with its type, shape and size");
  cmd->add_flag("--topology", o->topology,
                "Print the CPU topology (cores, NUMA nodes), the ISA tier chosen and the thread arena size");
  cmd->add_option("--vram-budget", o->vram_budget, "For a converted model: show which draft planes a GPU with this "
                                                   "much VRAM for them would hold (e.g. 8G)")
      ->type_name("SIZE");
  cmd->callback([o, exit_code] { *exit_code = info(*o); });
}

}  // namespace bitsplit::cli
