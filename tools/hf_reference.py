#!/usr/bin/env python3
"""Independent reference for the gemma2 / gemma3 / phi3 forward passes: Hugging Face `transformers`.

Two jobs, both on the CPU in float32:

  golden   MODEL.gguf OUT.json --prompt TEXT ... [--generate N] [--top K] [--spm TOKENIZER.model]
           Dequantises every tensor of a GGUF (gguf-py), loads it into transformers' own
           Gemma2ForCausalLM / Gemma3ForCausalLM / Phi3ForCausalLM (eager attention, so the
           sliding window, the soft caps and the fused projections are transformers' code, not ours), tokenises each prompt with the
           tokenizer transformers builds from the GGUF, and writes per prompt: the prompt's
           token ids, the greedy continuation of N tokens, and for every position the K largest
           logits (ids and values). tests/engine/model/hf_golden_test.cpp compares the engine against it.

  fixture  OUT.gguf --arch gemma2|gemma3|phi3 --vocab-from TOKENIZER.gguf [--seed S] [--longrope]
           A small randomly initialised model of that family (transformers' own init, weights
           scaled so the logits are peaked), written as an f32 GGUF with the tokenizer metadata
           of another GGUF (the fixtures' SentencePiece vocabulary), for CI without the real
           model.

Needs: python3 -m venv --system-site-packages V && V/bin/pip install torch transformers
(gguf and numpy from Debian or PyPI). Not needed by the build or the tests.
"""
import argparse
import json
import math
import os
import sys

import numpy as np
import gguf
import torch


# GGUF tensor name (after "blk.N.") -> transformers' name (after "model.layers.N.").
LAYER_NAMES = {
    "attn_norm": "input_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "attn_q_norm": "self_attn.q_norm",
    "attn_k_norm": "self_attn.k_norm",
    "post_attention_norm": "post_attention_layernorm",
    "ffn_norm": "pre_feedforward_layernorm",
    "post_ffw_norm": "post_feedforward_layernorm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}


def field(reader, key, default=None):
    f = reader.fields.get(key)
    if f is None:
        return default
    return f.contents()


def layer_types(arch, n_layers, pattern=None):
    period = pattern or (6 if arch == "gemma3" else 2)
    return ["sliding_attention" if i % period < period - 1 else "full_attention" for i in range(n_layers)]


# Mixture of experts (Mixtral, Qwen2-MoE, Qwen3-MoE): llama names plus the router, the stacked
# experts (gate and up fused below) and qwen2moe's shared expert.
MOE_NAMES = dict(LAYER_NAMES)
MOE_NAMES.update({
    "ffn_norm": "post_attention_layernorm",
    "ffn_gate_inp": "mlp.gate",
    "ffn_down_exps": "mlp.experts.down_proj",
    "ffn_gate_shexp": "mlp.shared_expert.gate_proj",
    "ffn_up_shexp": "mlp.shared_expert.up_proj",
    "ffn_down_shexp": "mlp.shared_expert.down_proj",
    "ffn_gate_inp_shexp": "mlp.shared_expert_gate",
})

# Phi-3: fused q/k/v and gate/up, llama-style norms (stored as they are).
PHI3_NAMES = {
    "attn_norm": "input_layernorm",
    "attn_qkv": "self_attn.qkv_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_norm": "post_attention_layernorm",
    "ffn_up": "mlp.gate_up_proj",
    "ffn_down": "mlp.down_proj",
}


def phi3_config(reader):
    from transformers import Phi3Config
    p = "phi3."
    n_embd = int(field(reader, p + "embedding_length"))
    window = int(field(reader, p + "attention.sliding_window", 0))
    n_ctx = int(field(reader, p + "context_length", 4096))
    rope = {"rope_type": "default", "rope_theta": float(field(reader, p + "rope.freq_base", 10000.0))}
    original = n_ctx
    factors = {t.name: [float(v) for v in t.data] for t in reader.tensors if t.name.startswith("rope_factors_")}
    if factors:  # LongRoPE (the 128k models): transformers picks the set by the sequence's length
        original = int(field(reader, p + "rope.scaling.original_context_length"))
        rope.update(rope_type="longrope", short_factor=factors["rope_factors_short.weight"],
                    long_factor=factors["rope_factors_long.weight"], original_max_position_embeddings=original)
        attn = field(reader, p + "rope.scaling.attn_factor")
        if attn is not None:
            rope["attention_factor"] = float(attn)
    cfg = Phi3Config(
        vocab_size=int(next(t for t in reader.tensors if t.name == "token_embd.weight").shape[1]),
        hidden_size=n_embd,
        intermediate_size=int(field(reader, p + "feed_forward_length")),
        num_hidden_layers=int(field(reader, p + "block_count")),
        num_attention_heads=int(field(reader, p + "attention.head_count")),
        num_key_value_heads=int(field(reader, p + "attention.head_count_kv")),
        rms_norm_eps=float(field(reader, p + "attention.layer_norm_rms_epsilon")),
        max_position_embeddings=n_ctx,
        original_max_position_embeddings=original,
        rope_parameters=rope,
        sliding_window=window or None,
        tie_word_embeddings=not any(t.name == "output.weight" for t in reader.tensors),
        pad_token_id=0, bos_token_id=1, eos_token_id=2,
    )
    cfg._attn_implementation = "eager"
    return "phi3", cfg


def moe_config(reader, arch):
    p = arch + "."
    n_embd = int(field(reader, p + "embedding_length"))
    n_heads = int(field(reader, p + "attention.head_count"))
    common = dict(
        vocab_size=int(next(t for t in reader.tensors if t.name == "token_embd.weight").shape[1]),
        hidden_size=n_embd,
        num_hidden_layers=int(field(reader, p + "block_count")),
        num_attention_heads=n_heads,
        num_key_value_heads=int(field(reader, p + "attention.head_count_kv", n_heads)),
        rms_norm_eps=float(field(reader, p + "attention.layer_norm_rms_epsilon")),
        max_position_embeddings=int(field(reader, p + "context_length", 4096)),
        rope_parameters={"rope_type": "default", "rope_theta": float(field(reader, p + "rope.freq_base", 10000.0))},
        num_experts_per_tok=int(field(reader, p + "expert_used_count")),
        tie_word_embeddings=not any(t.name == "output.weight" for t in reader.tensors),
        pad_token_id=0, bos_token_id=1, eos_token_id=2,
    )
    n_expert = int(field(reader, p + "expert_count"))
    if arch == "llama":  # Mixtral
        from transformers import MixtralConfig
        cfg = MixtralConfig(**common, num_local_experts=n_expert, intermediate_size=int(field(reader, p + "feed_forward_length")))
        kind = "mixtral"
    elif arch == "qwen2moe":
        from transformers import Qwen2MoeConfig
        cfg = Qwen2MoeConfig(**common, num_experts=n_expert,
                             intermediate_size=int(field(reader, p + "feed_forward_length")),
                             moe_intermediate_size=int(field(reader, p + "expert_feed_forward_length")),
                             shared_expert_intermediate_size=int(field(reader, p + "expert_shared_feed_forward_length")),
                             norm_topk_prob=bool(field(reader, p + "expert_weights_norm", False)))
        kind = arch
    else:
        from transformers import Qwen3MoeConfig
        cfg = Qwen3MoeConfig(**common, num_experts=n_expert, head_dim=int(field(reader, p + "attention.key_length", n_embd // n_heads)),
                             intermediate_size=int(field(reader, p + "feed_forward_length")),
                             moe_intermediate_size=int(field(reader, p + "expert_feed_forward_length")),
                             norm_topk_prob=bool(field(reader, p + "expert_weights_norm", True)))
        kind = arch
    cfg._attn_implementation = "eager"
    return kind, cfg


def hf_config(reader):
    arch = field(reader, "general.architecture")
    if arch == "phi3":
        return phi3_config(reader)
    if arch in ("qwen2moe", "qwen3moe") or (arch == "llama" and field(reader, "llama.expert_count", 0)):
        return moe_config(reader, arch)
    if arch not in ("gemma2", "gemma3"):
        sys.exit(f"error: architecture {arch!r}: this script covers gemma2, gemma3 and phi3")
    p = arch + "."
    n_embd = int(field(reader, p + "embedding_length"))
    n_heads = int(field(reader, p + "attention.head_count"))
    n_layers = int(field(reader, p + "block_count"))
    head_dim = int(field(reader, p + "attention.key_length", n_embd // n_heads))
    vocab = next(t for t in reader.tensors if t.name == "token_embd.weight").shape[1]
    big = n_layers == (62 if arch == "gemma3" else 46)  # the 27B models scale queries by n_embd/n_heads
    common = dict(
        vocab_size=int(vocab),
        hidden_size=n_embd,
        intermediate_size=int(field(reader, p + "feed_forward_length")),
        num_hidden_layers=n_layers,
        num_attention_heads=n_heads,
        num_key_value_heads=int(field(reader, p + "attention.head_count_kv", n_heads)),
        head_dim=head_dim,
        rms_norm_eps=float(field(reader, p + "attention.layer_norm_rms_epsilon")),
        max_position_embeddings=int(field(reader, p + "context_length", 8192)),
        sliding_window=int(field(reader, p + "attention.sliding_window")),
        query_pre_attn_scalar=(n_embd // n_heads) if big else head_dim,
        layer_types=layer_types(arch, n_layers),
        hidden_activation="gelu_pytorch_tanh",
        tie_word_embeddings=not any(t.name == "output.weight" for t in reader.tensors),
        pad_token_id=0, bos_token_id=2, eos_token_id=1,
    )
    if arch == "gemma3":
        from transformers import Gemma3TextConfig
        theta = float(field(reader, p + "rope.freq_base", 1e6))
        theta_swa = float(field(reader, p + "rope.freq_base_swa", 10000.0))
        cfg = Gemma3TextConfig(**common, rope_parameters={
            "full_attention": {"rope_type": "default", "rope_theta": theta},
            "sliding_attention": {"rope_type": "default", "rope_theta": theta_swa}})
        cfg.final_logit_softcapping = None
        cfg.attn_logit_softcapping = None
    else:
        from transformers import Gemma2Config
        cfg = Gemma2Config(**common, rope_parameters={"rope_type": "default",
                                                      "rope_theta": float(field(reader, p + "rope.freq_base", 10000.0))},
                           attn_logit_softcapping=float(field(reader, p + "attn_logit_softcapping", 0.0)) or None,
                           final_logit_softcapping=float(field(reader, p + "final_logit_softcapping", 0.0)) or None)
    cfg._attn_implementation = "eager"
    return arch, cfg


def load_hf_model(path):
    reader = gguf.GGUFReader(path)
    arch, cfg = hf_config(reader)
    if arch == "mixtral":
        from transformers import MixtralForCausalLM as Cls
    elif arch == "qwen2moe":
        from transformers import Qwen2MoeForCausalLM as Cls
    elif arch == "qwen3moe":
        from transformers import Qwen3MoeForCausalLM as Cls
    elif arch == "gemma3":
        from transformers import Gemma3ForCausalLM as Cls
    elif arch == "phi3":
        from transformers import Phi3ForCausalLM as Cls
    else:
        from transformers import Gemma2ForCausalLM as Cls
    names = PHI3_NAMES if arch == "phi3" else MOE_NAMES if arch in ("mixtral", "qwen2moe", "qwen3moe") else LAYER_NAMES
    stacked = {}  # (layer, "gate"/"up") -> expert weights, fused into gate_up_proj below
    torch.manual_seed(0)
    model = Cls(cfg).eval()
    state = {}
    for t in reader.tensors:
        w = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32)
        w = w.reshape([int(d) for d in reversed(t.shape)])
        name = t.name[: -len(".weight")] if t.name.endswith(".weight") else t.name
        # The GGUF stores gemma's RMSNorm weights as 1 + w (transformers multiplies by 1 + w).
        if name.endswith("norm") and arch.startswith("gemma"):
            w = w - 1.0
        # llama GGUFs (Mixtral) hold q and k with each head's rotation pairs interleaved (the
        # converter permutes them for the adjacent-pair RoPE); transformers rotates halves.
        if arch == "mixtral" and (name.endswith("attn_q") or name.endswith("attn_k")):
            heads = cfg.num_attention_heads if name.endswith("attn_q") else cfg.num_key_value_heads
            w = w.reshape(heads, w.shape[0] // heads // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)
        if name == "token_embd":
            hf = "model.embed_tokens.weight"
        elif name == "output_norm":
            hf = "model.norm.weight"
        elif name == "output":
            hf = "lm_head.weight"
        elif name.startswith("rope_factors_"):
            continue  # LongRoPE's factors: in the config (phi3_config)
        elif name.startswith("blk."):
            _, layer, rest = name.split(".", 2)
            if rest in ("ffn_gate_exps", "ffn_up_exps"):
                stacked[(layer, rest)] = w  # [n_expert, n_ff, n_embd]
                continue
            if rest == "ffn_gate_inp_shexp":
                w = w.reshape(1, -1)
            suffix = "" if rest == "ffn_down_exps" else ".weight"
            if rest.startswith("attn_") and rest.endswith(".bias"):
                hf = f"model.layers.{layer}.self_attn.{rest[5]}_proj.bias"
            else:
                hf = f"model.layers.{layer}.{names[rest]}{suffix}"
        else:
            sys.exit(f"error: tensor {t.name!r} has no transformers counterpart here")
        state[hf] = torch.from_numpy(np.ascontiguousarray(w))
    for (layer, rest), gate in list(stacked.items()):
        if rest == "ffn_gate_exps":  # transformers keeps each expert's gate rows, then its up rows
            up = stacked[(layer, "ffn_up_exps")]
            state[f"model.layers.{layer}.mlp.experts.gate_up_proj"] = torch.from_numpy(np.concatenate([gate, up], axis=1))
    if cfg.tie_word_embeddings:
        state["lm_head.weight"] = state["model.embed_tokens.weight"]
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = [m for m in missing if m != "lm_head.weight"]
    if missing or unexpected:
        sys.exit(f"error: missing {missing}, unexpected {unexpected}")
    return reader, model


def golden(args):
    from transformers import AutoTokenizer
    reader, model = load_hf_model(args.model)
    if args.spm:
        # The vocabulary's own SentencePiece model (transformers' GGUF tokenizer treats every
        # "llama" vocabulary as BPE, which a unigram vocabulary such as the fixtures' is not).
        import sentencepiece
        sp = sentencepiece.SentencePieceProcessor(model_file=args.spm)
        bos = int(field(reader, "tokenizer.ggml.bos_token_id"))
        add_bos = bool(field(reader, "tokenizer.ggml.add_bos_token", True))
        encode = lambda text: ([bos] if add_bos else []) + sp.encode(text)
    else:
        tok = AutoTokenizer.from_pretrained(os.path.dirname(os.path.abspath(args.model)),
                                            gguf_file=os.path.basename(args.model))
        encode = lambda text: tok(text).input_ids
    out = {"model": os.path.basename(args.model), "architecture": field(reader, "general.architecture"),
           "reference": "transformers " + __import__("transformers").__version__ + ", torch " + torch.__version__ +
                        ", float32, eager attention", "top": args.top, "cases": []}
    prompts = list(args.prompt)
    for path in args.prompt_file or []:
        with open(path, encoding="utf-8") as f:
            prompts.append(f.read())
    for text in prompts:
        ids = encode(text)
        if args.max_prompt_tokens and len(ids) > args.max_prompt_tokens:
            ids = ids[: args.max_prompt_tokens]
        seq = list(ids)
        with torch.no_grad():
            for _ in range(args.generate):
                logits = model(torch.tensor([seq])).logits[0]
                seq.append(int(torch.argmax(logits[-1])))
            logits = model(torch.tensor([seq[:-1] if args.generate else seq])).logits[0]
        vals, idx = torch.topk(logits, args.top, dim=-1)
        start = max(0, logits.shape[0] - args.positions) if args.positions else 0
        out["cases"].append({
            "prompt": text if not args.max_prompt_tokens else None,
            "prompt_tokens": ids,
            "generated": seq[len(ids):],
            "first_position": start,
            "top_ids": idx[start:].tolist(),
            "top_logits": [[round(float(v), 5) for v in row] for row in vals[start:]],
        })
        print(f"{len(ids)} prompt tokens, generated {seq[len(ids):]}", file=sys.stderr)
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(out, f, separators=(",", ":"))
        f.write("\n")


def gated_ffn_tensors(w, b, suffix, n_ff, n_embd, rnd):
    """ffn_gate/up/down<suffix> of width n_ff (in this order: the fixtures' random stream)."""
    w.add_tensor(b + f"ffn_gate{suffix}.weight", rnd(n_ff, n_embd, scale=n_embd ** -0.5))
    w.add_tensor(b + f"ffn_up{suffix}.weight", rnd(n_ff, n_embd, scale=n_embd ** -0.5))
    w.add_tensor(b + f"ffn_down{suffix}.weight", rnd(n_embd, n_ff, scale=n_ff ** -0.5))


def finish(w):
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def attention_tensors(w, b, arch, n_embd, n_heads, n_kv, head_dim, rnd, norm):
    """A block's input norm and attention: q/k/v/output, qwen2moe's biases, QK-norm."""
    w.add_tensor(b + "attn_norm.weight", norm(n_embd))
    w.add_tensor(b + "attn_q.weight", rnd(n_heads * head_dim, n_embd, scale=n_embd ** -0.5))
    w.add_tensor(b + "attn_k.weight", rnd(n_kv * head_dim, n_embd, scale=n_embd ** -0.5))
    w.add_tensor(b + "attn_v.weight", rnd(n_kv * head_dim, n_embd, scale=n_embd ** -0.5))
    w.add_tensor(b + "attn_output.weight", rnd(n_embd, n_heads * head_dim, scale=(n_heads * head_dim) ** -0.5))
    if arch == "qwen2moe":
        w.add_tensor(b + "attn_q.bias", rnd(n_heads * head_dim, scale=0.1))
        w.add_tensor(b + "attn_k.bias", rnd(n_kv * head_dim, scale=0.1))
        w.add_tensor(b + "attn_v.bias", rnd(n_kv * head_dim, scale=0.1))
    if arch in ("qwen3moe", "gemma3"):
        w.add_tensor(b + "attn_q_norm.weight", norm(head_dim))
        w.add_tensor(b + "attn_k_norm.weight", norm(head_dim))


def moe_fixture(w, arch, vocab, rnd, norm):
    """Two layers of 8 experts (2 used per token) of width 32; qwen2moe adds a shared expert of
    width 48 and q/k/v biases, qwen3moe QK-norm. Writes the tensors and closes the writer."""
    n_embd, n_heads, n_kv, head_dim, n_expert, n_ff, n_shexp = 64, 4, 2, 16, 8, 32, 48
    p = ("llama" if arch == "mixtral" else arch) + "."
    w.add_uint32(p + "expert_count", n_expert)
    w.add_uint32(p + "expert_used_count", 2)
    if arch != "mixtral":
        w.add_uint32(p + "expert_feed_forward_length", n_ff)
    if arch == "qwen2moe":
        w.add_uint32(p + "expert_shared_feed_forward_length", n_shexp)
    w.add_tensor("token_embd.weight", rnd(vocab, n_embd, scale=1.0))
    w.add_tensor("output.weight", rnd(vocab, n_embd, scale=n_embd ** -0.5 * 3))
    w.add_tensor("output_norm.weight", norm(n_embd))
    for l in range(2):
        b = f"blk.{l}."
        attention_tensors(w, b, arch, n_embd, n_heads, n_kv, head_dim, rnd, norm)
        w.add_tensor(b + "ffn_norm.weight", norm(n_embd))
        w.add_tensor(b + "ffn_gate_inp.weight", rnd(n_expert, n_embd, scale=1.0))
        w.add_tensor(b + "ffn_gate_exps.weight", rnd(n_expert, n_ff, n_embd, scale=n_embd ** -0.5))
        w.add_tensor(b + "ffn_up_exps.weight", rnd(n_expert, n_ff, n_embd, scale=n_embd ** -0.5))
        w.add_tensor(b + "ffn_down_exps.weight", rnd(n_expert, n_embd, n_ff, scale=n_ff ** -0.5))
        if arch == "qwen2moe":
            w.add_tensor(b + "ffn_gate_inp_shexp.weight", rnd(n_embd, scale=n_embd ** -0.5))
            gated_ffn_tensors(w, b, "_shexp", n_shexp, n_embd, rnd)
    finish(w)


def copy_tokenizer(src, w):
    """The tokenizer.* keys of the GGUF reader `src`, as it has them, into the writer `w`."""
    for key, f in src.fields.items():
        if key.startswith("tokenizer."):
            v = f.contents()
            vt = f.types[0]
            if vt == gguf.GGUFValueType.ARRAY:
                w.add_array(key, v)
            elif vt == gguf.GGUFValueType.STRING:
                w.add_string(key, v)
            elif vt == gguf.GGUFValueType.BOOL:
                w.add_bool(key, v)
            else:
                w.add_uint32(key, int(v))


def fixture(args):
    src = gguf.GGUFReader(args.vocab_from)
    tokens = field(src, "tokenizer.ggml.tokens")
    vocab = len(tokens)
    arch = args.arch
    torch.manual_seed(args.seed)
    n_layers = {"gemma3": 6, "gemma2": 4, "phi3": 3}.get(arch, 2)
    n_embd, n_heads, n_kv, head_dim, n_ff, window = 64, 4, 2, 32, 160, 8
    if arch == "phi3":  # head size n_embd / n_heads, as Phi-3 has it
        head_dim, n_ff, window = 16, 96, 6
    w = gguf.GGUFWriter(args.out, "llama" if arch == "mixtral" else arch)
    moe = arch in ("mixtral", "qwen2moe", "qwen3moe")
    if moe:  # Mixtral's feed_forward_length is the expert width
        n_ff = 32
    w.add_name(f"tiny random {arch} (tools/hf_reference.py fixture, seed {args.seed})")
    w.add_context_length(256)
    w.add_embedding_length(n_embd)
    w.add_block_count(n_layers)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(n_heads)
    w.add_head_count_kv(n_kv)
    if moe:
        head_dim = 16
    w.add_key_length(head_dim)
    w.add_value_length(head_dim)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_rope_freq_base(1e6 if arch == "gemma3" else 10000.0)
    if not arch.startswith("gemma"):  # (the committed gemma fixtures were made without it)
        w.add_rope_dimension_count(head_dim)
    if not moe:
        w.add_sliding_window(window)
    if args.longrope:  # Phi-3 128k style: trained for 32 positions, stretched to 256
        if arch != "phi3":
            sys.exit("error: --longrope is for --arch phi3")
        w.add_uint32(f"{arch}.rope.scaling.original_context_length", 32)
        w.add_float32(f"{arch}.rope.scaling.attn_factor", math.sqrt(1 + math.log(256 / 32) / math.log(32)))
    if arch == "gemma2":
        w.add_float32(f"{arch}.attn_logit_softcapping", 50.0)
        w.add_float32(f"{arch}.final_logit_softcapping", 30.0)
    copy_tokenizer(src, w)

    def rnd(*shape, scale=1.0):
        return (torch.randn(*shape) * scale).numpy().astype(np.float32)

    def norm(n):  # gemma stores 1 + w; phi3 w, which is around 1 too
        return (1.0 + torch.randn(n) * 0.3).numpy().astype(np.float32)

    if arch in ("mixtral", "qwen2moe", "qwen3moe"):
        moe_fixture(w, arch, vocab, rnd, norm)
        return
    if arch == "phi3":
        w.add_tensor("token_embd.weight", rnd(vocab, n_embd, scale=1.0))
        w.add_tensor("output.weight", rnd(vocab, n_embd, scale=n_embd ** -0.5 * 3))
        w.add_tensor("output_norm.weight", norm(n_embd))
        if args.longrope:  # short factors near 1, long ones growing to ~16 for the slow frequencies
            half = head_dim // 2
            w.add_tensor("rope_factors_short.weight", (1.0 + 0.2 * torch.rand(half)).numpy().astype(np.float32))
            ramp = torch.logspace(0, math.log10(16.0), half) * (1.0 + 0.1 * torch.rand(half))
            w.add_tensor("rope_factors_long.weight", ramp.numpy().astype(np.float32))
        for l in range(n_layers):
            b = f"blk.{l}."
            w.add_tensor(b + "attn_norm.weight", norm(n_embd))
            w.add_tensor(b + "attn_qkv.weight", rnd((n_heads + 2 * n_kv) * head_dim, n_embd, scale=n_embd ** -0.5))
            w.add_tensor(b + "attn_output.weight", rnd(n_embd, n_heads * head_dim, scale=(n_heads * head_dim) ** -0.5))
            w.add_tensor(b + "ffn_norm.weight", norm(n_embd))
            w.add_tensor(b + "ffn_up.weight", rnd(2 * n_ff, n_embd, scale=n_embd ** -0.5))  # gate rows, then up rows
            w.add_tensor(b + "ffn_down.weight", rnd(n_embd, n_ff, scale=n_ff ** -0.5))
        finish(w)
        return

    # An untied head: a tied one on random weights mostly repeats the input token.
    w.add_tensor("token_embd.weight", rnd(vocab, n_embd, scale=0.15))
    w.add_tensor("output.weight", rnd(vocab, n_embd, scale=1.0))
    w.add_tensor("output_norm.weight", norm(n_embd))
    for l in range(n_layers):
        b = f"blk.{l}."
        attention_tensors(w, b, arch, n_embd, n_heads, n_kv, head_dim, rnd, norm)
        w.add_tensor(b + "post_attention_norm.weight", norm(n_embd))
        w.add_tensor(b + "ffn_norm.weight", norm(n_embd))
        w.add_tensor(b + "post_ffw_norm.weight", norm(n_embd))
        gated_ffn_tensors(w, b, "", n_ff, n_embd, rnd)
    finish(w)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("golden")
    g.add_argument("model")
    g.add_argument("out")
    g.add_argument("--prompt", action="append", default=[])
    g.add_argument("--prompt-file", action="append")
    g.add_argument("--max-prompt-tokens", type=int, default=0)
    g.add_argument("--spm", help="tokenise with this SentencePiece model instead of transformers' GGUF tokenizer")
    g.add_argument("--generate", type=int, default=8)
    g.add_argument("--top", type=int, default=8)
    g.add_argument("--positions", type=int, default=0, help="keep only the last N positions' logits (0: all)")
    f = sub.add_parser("fixture")
    f.add_argument("out")
    f.add_argument("--arch", choices=["gemma2", "gemma3", "phi3", "mixtral", "qwen2moe", "qwen3moe"], required=True)
    f.add_argument("--vocab-from", required=True)
    f.add_argument("--seed", type=int, default=1)
    f.add_argument("--longrope", action="store_true", help="phi3 only: LongRoPE factors (original context 32, context 256)")
    args = ap.parse_args()
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    golden(args) if args.cmd == "golden" else fixture(args)


if __name__ == "__main__":
    main()
