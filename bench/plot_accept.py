#!/usr/bin/env python3
"""Plots `bitsplit bench accept --json` output: tau (tokens per check, bonus included) and
tokens/s against the draft budget, chain-k and tree-b rows, one line per category, plain
decoding as a horizontal line.

Needs matplotlib (Debian: `apt-get install python3-matplotlib`); it is tooling only, not a
build or test dependency, so tools/setup.sh does not install it.

    bitsplit bench accept -m MODEL.bitsplit.gguf --prompts bench/prompts/spec-bench.jsonl --json > accept.json
    python3 bench/plot_accept.py accept.json -o accept.png [--model base]
"""
import argparse
import json
import os
import re
import sys


def load_rows(doc, model):
    """(categories, {setting: summary row}) for one model; categories end with "overall"."""
    summary = doc.get("summary")
    if not summary or "rows" not in summary:
        sys.exit("error: no \"summary\" in the JSON; it must come from `bitsplit bench accept --json`")
    rows = {r["setting"]: r for r in summary["rows"] if r["model"] == model}
    if not rows:
        models = sorted({r["model"] for r in summary["rows"]})
        sys.exit(f"error: no rows for model '{model}'; the file has: {', '.join(models)}")
    categories = list(summary["categories"])
    if len(categories) > 1:
        categories.append("overall")
    return categories, rows


def series(rows, shape):
    """Budget-sorted [(budget, row)] for the chain-k or tree-b rows (with or without +lookup)."""
    out = []
    for name, row in rows.items():
        m = re.fullmatch(shape + r"-(\d+)(\+lookup)?", name)
        if m:
            out.append((int(m.group(1)), row))
    return sorted(out, key=lambda p: p[0])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("json", help="output of `bitsplit bench accept --json`")
    ap.add_argument("-o", "--output", default="accept.png", help="PNG to write (default: accept.png)")
    ap.add_argument("--model", default="base", help="which model's rows (with --delta runs: a variant's name)")
    args = ap.parse_args()

    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        sys.exit("error: matplotlib is not installed; on Debian: sudo apt-get install python3-matplotlib "
                 f"(or pip install matplotlib). The JSON and the tables do not need it. ({e})")
    except Exception as e:  # e.g. Debian's matplotlib against a pip-installed numpy 2 in /usr/local
        sys.exit(f"error: matplotlib failed to import: {e}. If a pip-installed numpy shadows Debian's, run with "
                 "PYTHONPATH=/usr/lib/python3/dist-packages /usr/bin/python3 (or pip install matplotlib).")

    with open(args.json, encoding="utf-8") as f:
        doc = json.load(f)
    categories, rows = load_rows(doc, args.model)
    chains, trees = series(rows, "chain"), series(rows, "tree")
    if not chains and not trees:
        sys.exit("error: no chain-K or tree-B rows to plot against the budget")

    fig, axes = plt.subplots(1, 2, figsize=(13, 5))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    metrics = [("tokens_per_check", "τ: tokens per check (bonus included)"), ("tokens_per_second", "tokens/s")]
    for ax, (key, label) in zip(axes, metrics):
        for i, cat in enumerate(categories):
            color = colors[i % len(colors)]
            width = 2.5 if cat == "overall" else 1.2
            for shape, points, style in (("chain", chains, "-o"), ("tree", trees, "--s")):
                pts = [(b, r[key].get(cat)) for b, r in points if r[key].get(cat) is not None]
                if pts:
                    ax.plot([p[0] for p in pts], [p[1] for p in pts], style, color=color, linewidth=width,
                            markersize=4, label=f"{cat} ({shape})")
            plain = rows.get("plain")
            if plain and plain[key].get(cat) is not None:
                ax.axhline(plain[key][cat], color=color, linestyle=":", linewidth=width)
            auto = next((r for n, r in rows.items() if n.startswith("auto")), None)
            if auto and auto[key].get(cat) is not None:
                ax.plot([0.8], [auto[key][cat]], marker="*", color=color, markersize=10)
        ax.set_xscale("log", base=2)
        budgets = sorted({b for b, _ in chains + trees})
        ax.set_xticks(budgets)
        ax.set_xticklabels([str(b) for b in budgets])
        ax.minorticks_off()
        ax.set_xlabel("draft budget (nodes per check; chain: its length)")
        ax.set_ylabel(label)
        ax.grid(True, which="both", alpha=0.3)
    axes[0].set_title("acceptance")
    axes[1].set_title("speed (dotted: plain decoding; star at the left: auto)")
    axes[1].legend(fontsize=7, ncol=2, loc="best")
    n = doc.get("n_predict")
    fig.suptitle(f"{os.path.basename(doc.get('model', ''))} [{args.model}], {doc.get('n_prompts')} prompts x {n} tokens, "
                 f"temperature {doc.get('temperature')}, {doc.get('rendering')}", fontsize=9)
    fig.tight_layout()
    fig.savefig(args.output, dpi=120)
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
