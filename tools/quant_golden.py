#!/usr/bin/env python3
"""Golden data for bitsplit's ggml block dequantisers, made with gguf-py (an independent implementation).

For each type it writes OUT_DIR/<TYPE>.bin (raw quantised blocks, back to back) and
OUT_DIR/<TYPE>.f32 (gguf.quants.dequantize of those bytes, little-endian float32).
- Q4_0, Q4_1, Q5_0, Q5_1, Q8_0: blocks made by gguf.quants.quantize from a fixed input
  (normal values, an outlier, a zero block, a constant block), then RANDOM_LEGACY_BLOCKS random
  blocks appended so that scale signs, subnormal scales and every code pattern are covered.
- Q2_K, Q3_K, Q4_K, Q5_K, Q6_K: gguf-py cannot quantise these, so the blocks are random bytes
  with the fp16 scale fields (d, and dmin where present) overwritten by finite random fp16 values.

With --model PATH (a GGUF) it also writes OUT_DIR/smollm2_q4_1.json: for every tensor a
position-weighted checksum of its dequantised f32 bits, and a few exact sample values from the
first tensor of each type, so the C++ loader can be checked on a real file.

usage: /usr/bin/python3 tools/quant_golden.py [--out tests/data/ggml_quant] [--model models/X.gguf]
"""
import argparse
import json
import os

import gguf
import numpy as np
from gguf import GGMLQuantizationType as T

SEED = 20240505
RANDOM_LEGACY_BLOCKS = 2
K_BLOCKS = 4

LEGACY = [T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0]
# Byte offsets of the fp16 scale fields that random blocks must hold as finite values.
FP16_FIELDS = {
    T.Q4_0: [0], T.Q4_1: [0, 2], T.Q5_0: [0], T.Q5_1: [0, 2], T.Q8_0: [0],
    T.Q2_K: [80, 82], T.Q3_K: [108], T.Q4_K: [0, 2], T.Q5_K: [0, 2], T.Q6_K: [208],
}
K_QUANTS = [T.Q2_K, T.Q3_K, T.Q4_K, T.Q5_K, T.Q6_K]


def random_fp16(rng, n):
    """Finite fp16 values of random sign, magnitudes 2^-20..2^6 (so subnormals occur), and one zero."""
    mag = np.exp2(rng.uniform(-20.0, 6.0, n))
    sign = np.where(rng.random(n) < 0.5, -1.0, 1.0)
    v = (sign * mag).astype(np.float16)
    if n > 2:
        v[n // 2] = 0.0  # a zero scale must decode to exact zeros (or -0.0) like gguf-py's
    assert np.all(np.isfinite(v))
    return v


def random_blocks(rng, qtype, n_blocks):
    _, type_size = gguf.GGML_QUANT_SIZES[qtype]
    blocks = rng.integers(0, 256, size=(n_blocks, type_size), dtype=np.uint8)
    for off in FP16_FIELDS[qtype]:
        blocks[:, off:off + 2] = random_fp16(rng, n_blocks).view(np.uint8).reshape(n_blocks, 2)
    return blocks


def legacy_input(rng):
    """Four rows of 64 weights: normal, scaled with an outlier, a zero block + constant block, a ramp."""
    x = rng.standard_normal((4, 64)).astype(np.float32)
    x[1] *= 10.0
    x[1, 5] = -97.25
    x[2, :32] = 0.0
    x[2, 32:] = 0.375
    x[3] = np.linspace(-3.0, 5.0, 64, dtype=np.float32)
    return x


def write_type(out_dir, qtype, blocks):
    raw = np.ascontiguousarray(blocks, dtype=np.uint8).reshape(1, -1)
    values = gguf.quants.dequantize(raw, qtype).astype("<f4", copy=False)
    assert np.all(np.isfinite(values)), qtype.name
    raw.tofile(os.path.join(out_dir, qtype.name + ".bin"))
    values.tofile(os.path.join(out_dir, qtype.name + ".f32"))
    print(f"{qtype.name}: {blocks.shape[0]} blocks, {raw.size} bytes -> {values.size} floats")


def weighted_checksum(values):
    """sum over i of bits(values[i]) * (i + 1), modulo 2^64: exact, order-sensitive, vectorised."""
    bits = np.ascontiguousarray(values, dtype=np.float32).reshape(-1).view(np.uint32).astype(np.uint64)
    weights = np.arange(1, bits.size + 1, dtype=np.uint64)
    with np.errstate(over="ignore"):
        return int(np.sum(bits * weights, dtype=np.uint64))


def model_golden(path, out_dir, rng):
    reader = gguf.GGUFReader(path)
    tensors, samples, seen = [], [], set()
    for t in reader.tensors:
        values = gguf.quants.dequantize(t.data, t.tensor_type).reshape(-1)
        tensors.append({"name": t.name, "type": t.tensor_type.name,
                        "checksum": f"{weighted_checksum(values):016x}"})
        if t.tensor_type.name not in seen:
            seen.add(t.tensor_type.name)
            n = values.size
            idx = sorted({0, 1, 31, 32, n // 2, n - 1, *rng.integers(0, n, 10).tolist()})
            samples.append({"name": t.name, "type": t.tensor_type.name, "index": idx,
                            "bits": [f"{int(values[i:i + 1].view(np.uint32)[0]):08x}" for i in idx]})
    doc = {"file": os.path.basename(path), "file_size": os.path.getsize(path),
           "gguf_version": gguf_version(),
           "checksum": "sum over i of f32_bits[i] * (i + 1) mod 2^64, hex",
           "samples": samples, "tensors": tensors}
    # One tensor or sample per line keeps the file small and its diffs readable.
    head = {k: v for k, v in doc.items() if k not in ("samples", "tensors")}
    lines = [json.dumps(head)[:-1] + ","]
    for key in ("samples", "tensors"):
        rows = ",\n".join(json.dumps(r, separators=(",", ":")) for r in doc[key])
        lines.append(f'"{key}": [\n{rows}\n]' + ("," if key == "samples" else "}"))
    with open(os.path.join(out_dir, "smollm2_q4_1.json"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"{path}: {len(tensors)} tensors, types {sorted(seen)}")


def gguf_version():
    from importlib.metadata import version
    return version("gguf")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="tests/data/ggml_quant")
    ap.add_argument("--model", default=None, help="GGUF file to make smollm2_q4_1.json from")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    rng = np.random.default_rng(SEED)
    print(f"gguf {gguf_version()}, numpy {np.__version__}")
    x = legacy_input(rng)
    for qtype in LEGACY:
        _, type_size = gguf.GGML_QUANT_SIZES[qtype]
        made = gguf.quants.quantize(x, qtype).reshape(-1, type_size)
        write_type(args.out, qtype, np.concatenate([made, random_blocks(rng, qtype, RANDOM_LEGACY_BLOCKS)]))
    for qtype in K_QUANTS:
        write_type(args.out, qtype, random_blocks(rng, qtype, K_BLOCKS))
    if args.model:
        model_golden(args.model, args.out, rng)


if __name__ == "__main__":
    main()
