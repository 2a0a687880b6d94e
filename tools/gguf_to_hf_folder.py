#!/usr/bin/env python3
"""Writes a GGUF model (llama or qwen2/qwen3 family, byte-level BPE tokenizer) as a Hugging Face
folder: config.json, safetensors shards with model.safetensors.index.json, tokenizer.json and
tokenizer_config.json (with the chat template). Quantised tensors are dequantised.

For checking `bitsplit convert FOLDER` against `bitsplit convert FILE.gguf` on a real model
(docs/SAFETENSORS.md): with --dtype F32 the folder holds exactly the GGUF's dequantised values, so
both conversions see the same weights. Tensors are dequantised and written one at a time.

  tools/gguf_to_hf_folder.py MODEL.gguf OUT_DIR [--dtype F32|BF16|F16] [--shard-mb N]

Needs numpy and the gguf package (tools/setup.sh installs both).
"""
import argparse
import json
import os
import sys

import numpy as np

try:
    import gguf
except ImportError:
    sys.exit("gguf_to_hf_folder.py: the gguf package is missing (pip install gguf, or tools/setup.sh)")

ARCHITECTURES = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM"}

LAYER_ROLES = {
    "attn_norm.weight": "input_layernorm.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight",
    "attn_k.weight": "self_attn.k_proj.weight",
    "attn_v.weight": "self_attn.v_proj.weight",
    "attn_q.bias": "self_attn.q_proj.bias",
    "attn_k.bias": "self_attn.k_proj.bias",
    "attn_v.bias": "self_attn.v_proj.bias",
    "attn_output.weight": "self_attn.o_proj.weight",
    "attn_q_norm.weight": "self_attn.q_norm.weight",
    "attn_k_norm.weight": "self_attn.k_norm.weight",
    "ffn_gate.weight": "mlp.gate_proj.weight",
    "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
}

# The pre-tokenizers of published tokenizer.json files, by llama.cpp's name for them.
QWEN2_REGEX = r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
LLAMA3_REGEX = r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""


def byte_level(use_regex):
    return {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": use_regex}


def pre_tokenizer(pre):
    if pre in ("gpt-2", "default"):
        return byte_level(True)
    if pre == "smollm":
        return {"type": "Sequence", "pretokenizers": [{"type": "Digits", "individual_digits": True}, byte_level(True)]}
    regex = {"qwen2": QWEN2_REGEX, "llama-bpe": LLAMA3_REGEX}.get(pre)
    if regex is None:
        sys.exit(f"gguf_to_hf_folder.py: tokenizer.ggml.pre '{pre}' has no tokenizer.json form here")
    return {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": regex}, "behavior": "Isolated", "invert": False}, byte_level(False)]}


class Meta:
    def __init__(self, reader):
        self.fields = reader.fields

    def get(self, key, default=None):
        f = self.fields.get(key)
        return default if f is None else f.contents()

    def need(self, key):
        v = self.get(key)
        if v is None:
            sys.exit(f"gguf_to_hf_folder.py: the GGUF has no {key}")
        return v


def hf_name(name):
    if name == "token_embd.weight":
        return "model.embed_tokens.weight"
    if name == "output_norm.weight":
        return "model.norm.weight"
    if name == "output.weight":
        return "lm_head.weight"
    parts = name.split(".", 2)
    if parts[0] == "blk" and len(parts) == 3 and parts[2] in LAYER_ROLES:
        return f"model.layers.{parts[1]}.{LAYER_ROLES[parts[2]]}"
    sys.exit(f"gguf_to_hf_folder.py: tensor '{name}' has no Hugging Face name here")


def unpermute(w, heads):
    """llama.cpp's q/k row order (adjacent pairs rotate) back to transformers' (halves rotate)."""
    rows, cols = w.shape
    d = rows // heads
    return w.reshape(heads, d // 2, 2, cols).swapaxes(1, 2).reshape(rows, cols)


def encode(values, dtype):
    v = np.ascontiguousarray(values, dtype=np.float32)
    if dtype == "F32":
        return v.tobytes()
    if dtype == "F16":
        return v.astype(np.float16).tobytes()
    u = v.view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16).tobytes()  # BF16, round to nearest even


def write_tokenizer(meta, out):
    if meta.get("tokenizer.ggml.model") != "gpt2":
        print("gguf_to_hf_folder.py: warning: only byte-level BPE (tokenizer.ggml.model gpt2) tokenizers are written; "
              "the folder has no tokenizer.json", file=sys.stderr)
        return
    tokens = meta.need("tokenizer.ggml.tokens")
    types = meta.get("tokenizer.ggml.token_type") or [1] * len(tokens)
    vocab, added = {}, []
    for i, (t, ty) in enumerate(zip(tokens, types)):
        if ty in (3, 4):
            added.append({"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
                          "normalized": ty == 4, "special": ty == 3})
        if ty != 5:
            vocab[t] = i
    tj = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added, "normalizer": None,
        "pre_tokenizer": pre_tokenizer(meta.get("tokenizer.ggml.pre", "gpt-2")),
        "post_processor": byte_level(False) | {"trim_offsets": False},
        "decoder": byte_level(True),
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                  "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": list(meta.need("tokenizer.ggml.merges"))},
    }
    with open(os.path.join(out, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tj, f, ensure_ascii=False)
    config = {"add_bos_token": bool(meta.get("tokenizer.ggml.add_bos_token", False)),
              "add_eos_token": bool(meta.get("tokenizer.ggml.add_eos_token", False))}
    for field, key in (("bos_token", "bos_token_id"), ("eos_token", "eos_token_id"), ("pad_token", "padding_token_id"),
                       ("unk_token", "unknown_token_id")):
        i = meta.get("tokenizer.ggml." + key)
        if i is not None and 0 <= i < len(tokens):
            config[field] = tokens[i]
    template = meta.get("tokenizer.chat_template")
    if template:
        config["chat_template"] = template
    with open(os.path.join(out, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f, ensure_ascii=False, indent=1)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("gguf")
    ap.add_argument("out")
    ap.add_argument("--dtype", choices=["F32", "BF16", "F16"], default="F32")
    ap.add_argument("--shard-mb", type=int, default=1024, help="largest shard in MiB (default 1024)")
    args = ap.parse_args()

    reader = gguf.GGUFReader(args.gguf)
    meta = Meta(reader)
    arch = meta.need("general.architecture")
    if arch not in ARCHITECTURES:
        sys.exit(f"gguf_to_hf_folder.py: architecture '{arch}' is not written here (only {', '.join(ARCHITECTURES)})")
    p = arch + "."
    heads = meta.need(p + "attention.head_count")
    kv_heads = meta.get(p + "attention.head_count_kv", heads)
    names = [t.name for t in reader.tensors]
    config = {
        "architectures": [ARCHITECTURES[arch]], "model_type": arch,
        "hidden_size": meta.need(p + "embedding_length"), "num_hidden_layers": meta.need(p + "block_count"),
        "intermediate_size": meta.need(p + "feed_forward_length"), "num_attention_heads": heads,
        "num_key_value_heads": kv_heads, "max_position_embeddings": meta.get(p + "context_length", 2048),
        "rms_norm_eps": float(meta.need(p + "attention.layer_norm_rms_epsilon")),
        "rope_theta": float(meta.get(p + "rope.freq_base", 10000.0)), "hidden_act": "silu",
        "tie_word_embeddings": "output.weight" not in names, "vocab_size": len(meta.get("tokenizer.ggml.tokens") or []),
        "torch_dtype": {"F32": "float32", "BF16": "bfloat16", "F16": "float16"}[args.dtype],
    }
    if meta.get(p + "attention.key_length") is not None:
        config["head_dim"] = meta.get(p + "attention.key_length")
    if not config["vocab_size"]:
        del config["vocab_size"]
    os.makedirs(args.out, exist_ok=True)

    # Shards planned from the shapes alone, so that each is written tensor by tensor.
    size = {"F32": 4, "BF16": 2, "F16": 2}[args.dtype]
    shards, current, current_bytes = [], [], 0
    for t in reader.tensors:
        n = int(t.n_elements) * size
        if current and current_bytes + n > args.shard_mb << 20:
            shards.append(current)
            current, current_bytes = [], 0
        current.append(t)
        current_bytes += n
    shards.append(current)
    weight_map = {}
    for s, tensors in enumerate(shards):
        file = f"model-{s + 1:05d}-of-{len(shards):05d}.safetensors"
        header, offset = {"__metadata__": {"format": "pt"}}, 0
        for t in tensors:
            n = int(t.n_elements) * size
            shape = [int(d) for d in reversed(t.shape.tolist())]
            header[hf_name(t.name)] = {"dtype": args.dtype, "shape": shape, "data_offsets": [offset, offset + n]}
            weight_map[hf_name(t.name)] = file
            offset += n
        h = json.dumps(header).encode()
        h += b" " * (-len(h) % 8)
        with open(os.path.join(args.out, file), "wb") as f:
            f.write(len(h).to_bytes(8, "little"))
            f.write(h)
            for t in tensors:
                shape = [int(d) for d in reversed(t.shape.tolist())]
                w = gguf.quants.dequantize(t.data, t.tensor_type).reshape(shape)
                if arch == "llama" and t.name.endswith(("attn_q.weight", "attn_k.weight")):
                    w = unpermute(w, heads if "attn_q" in t.name else kv_heads)
                f.write(encode(w, args.dtype))
        print(f"{file}: {len(tensors)} tensors, {offset / 2**20:.1f} MiB", file=sys.stderr)
    with open(os.path.join(args.out, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": sum(int(t.n_elements) * size for t in reader.tensors)},
                   "weight_map": weight_map}, f, indent=1)
    with open(os.path.join(args.out, "config.json"), "w") as f:
        json.dump(config, f, indent=1)
    if meta.get("tokenizer.ggml.tokens") is not None:
        write_tokenizer(meta, args.out)


if __name__ == "__main__":
    main()
