#!/usr/bin/env python3
"""Generates from a base model and from variants on the same loaded base: LoRA adapters
(--lora NAME=FILE, llama.cpp's GGUF format) and BitDelta files (--delta NAME=FILE, from
`bitsplit delta`). With --delta-from FINETUNED.gguf the delta is made first with `bitsplit delta`
(--cli names the CLI; --delta-base the original base it is made against, by default the model).
Each variant decodes speculatively with the base's draft, and all share the base's weights.

    python3 examples/python/variants.py base.bitsplit.gguf --lora devil=tests/models/bible-devil-lora.gguf
    python3 examples/python/variants.py base.bitsplit.gguf --delta-from tests/models/bible-devil.gguf \\
        --delta-base tests/models/bible-base.gguf
"""
import argparse
import os
import subprocess
import sys
import tempfile

import bitsplit


def name_and_path(text: str) -> tuple[str, str]:
    if "=" not in text:
        raise argparse.ArgumentTypeError(f"expected NAME=FILE, not {text!r}")
    name, path = text.split("=", 1)
    return name, path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", help="the base (a model converted by `bitsplit convert`, or an original GGUF)")
    ap.add_argument("--lora", type=name_and_path, action="append", default=[], metavar="NAME=FILE")
    ap.add_argument("--delta", type=name_and_path, action="append", default=[], metavar="NAME=FILE")
    ap.add_argument("--delta-from", metavar="FINETUNED", help="make a delta of this fine-tuned model first")
    ap.add_argument("--delta-base", help="the base the delta is made against (default: the model)")
    ap.add_argument("--cli", default=os.environ.get("BITSPLIT_CLI", "bitsplit"), help="the bitsplit CLI")
    ap.add_argument("-p", "--prompt", default="The devil")
    ap.add_argument("-n", "--max-tokens", type=int, default=48)
    args = ap.parse_args()

    with tempfile.TemporaryDirectory() as tmp, bitsplit.Model(args.model) as model:
        deltas = list(args.delta)
        if args.delta_from:
            out = os.path.join(tmp, "variant.delta.gguf")
            subprocess.run([args.cli, "delta", "--base", args.delta_base or args.model, "--finetuned",
                            args.delta_from, "-o", out], check=True, capture_output=True)
            stem = os.path.basename(args.delta_from).split(".")[0]
            deltas.append((f"{stem.split('-')[-1]}-delta", out))
        for name, path in args.lora:
            model.add_lora(name, path)
        for name, path in deltas:
            model.add_delta(name, path)
        print(f"{model.name}: variants {', '.join(model.variants) or '(none)'}", file=sys.stderr)

        for variant in (None, *model.variants):
            text, stats = model.generate(args.prompt, args.max_tokens, temperature=0, variant=variant)
            label = variant or "base"
            print(f"[{label}] {args.prompt}{text}")
            print(f"    {stats.generated_tokens} tokens, {stats.tokens_per_check:.2f} per check, "
                  f"{stats.tokens_per_second:.1f} tokens/s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
