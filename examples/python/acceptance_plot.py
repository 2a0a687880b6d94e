#!/usr/bin/env python3
"""Measures speculative decoding's acceptance per draft setting and prompt category with
bitsplit.bench_accept (what `bitsplit bench accept` measures) and plots tokens per check and
tokens/s (speedup over plain in the labels) per category to a PNG. Needs matplotlib.

    python3 examples/python/acceptance_plot.py MODEL.bitsplit.gguf \\
        --prompts bench/prompts/spec-bench.jsonl --settings plain,chain-4,tree-16,auto -o accept.png
"""
import argparse
import sys

import bitsplit


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", help="a model converted by `bitsplit convert`")
    ap.add_argument("--prompts", default="bench/prompts/spec-bench.jsonl",
                    help="a prompt file: one prompt per line, or .jsonl with category and turns")
    ap.add_argument("--settings", default="plain,chain-2,chain-4,tree-8,tree-16,auto",
                    help="comma-separated: plain, auto, chain-K, tree-B (optionally +lookup)")
    ap.add_argument("-n", "--max-tokens", type=int, default=64)
    ap.add_argument("--limit", type=int, help="only the first N prompts")
    ap.add_argument("--temp", type=float, default=0.0)
    ap.add_argument("-o", "--output", default="acceptance.png")
    args = ap.parse_args()

    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("error: this example plots with matplotlib, which is not installed (pip install matplotlib); "
              "bitsplit.bench_accept itself does not need it", file=sys.stderr)
        return 2

    prompts = bitsplit.load_prompts(args.prompts)[:args.limit]
    settings = [s for s in args.settings.split(",") if s]
    with bitsplit.Model(args.model) as model:
        name = model.name
        rows = bitsplit.bench_accept(model, prompts, settings, args.max_tokens, temperature=args.temp,
                                     progress=lambda d, t: print(f"\r{d}/{t}", end="", file=sys.stderr))
    print(file=sys.stderr)

    print(f"{'setting':<16} {'category':<16} {'tokens/check':>12} {'tokens/s':>10} {'speedup':>8}")
    for r in rows:
        speedup = f"{r.speedup:.2f}" if r.speedup is not None else "-"
        print(f"{r.setting:<16} {r.category:<16} {r.tokens_per_check:>12.2f} {r.tokens_per_second:>10.1f} {speedup:>8}")
    if rows.greedy_mismatches:
        print(f"warning: {rows.greedy_mismatches} greedy generations differ from the first setting's", file=sys.stderr)

    categories = rows.categories + ([bitsplit.OVERALL] if len(rows.categories) > 1 else [])
    fig, axes = plt.subplots(1, 2, figsize=(max(8, 1.6 * len(categories) * 2), 4.5))
    width = 0.8 / len(rows.settings)
    for i, setting in enumerate(rows.settings):
        xs = [c + (i - (len(rows.settings) - 1) / 2) * width for c in range(len(categories))]
        cells = [rows.row(setting, c) for c in categories]
        axes[0].bar(xs, [r.tokens_per_check for r in cells], width, label=setting)
        bars = axes[1].bar(xs, [r.tokens_per_second for r in cells], width, label=setting)
        for bar, r in zip(bars, cells):
            if r.speedup is not None and r.setting != "plain":
                axes[1].annotate(f"{r.speedup:.2f}x", (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                                 ha="center", va="bottom", fontsize=7)
    for ax, title in zip(axes, ("tokens per check (bonus included)", "tokens/s (speedup over plain)")):
        ax.set_xticks(range(len(categories)))
        ax.set_xticklabels(categories, rotation=30, ha="right")
        ax.set_title(title)
    axes[0].legend(fontsize=8)
    fig.suptitle(f"{name}: {len(prompts)} prompts, up to {args.max_tokens} tokens each")
    fig.tight_layout()
    fig.savefig(args.output, dpi=120)
    print(f"wrote {args.output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
