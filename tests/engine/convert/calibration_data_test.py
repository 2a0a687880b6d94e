#!/usr/bin/env python3
"""Checks the shipped calibration text engine/convert/calibration/calibration.jsonl.

usage: calibration_data_test.py [REPO_ROOT]   (default: this script's ../../..)

Checks: every line is a JSON object of the documented shape; all four kinds are present;
the total text is 20-80 KB and each kind's share is within sane bounds; chat segments are
non-empty user/assistant alternations (optionally opened by one system turn); no segment
shares a 200-character substring with the evaluation texts (tests/models/text/*.valid.txt,
bench/prompts/*.jsonl prompt contents, bench/prompts/*.txt and bench/prompts/run/*.txt); and
the file's sha256 is the one written in engine/convert/calibration/README.md.
Python 3 standard library only; exit 0 when all checks pass, 1 with the reasons otherwise.
"""
import glob
import hashlib
import json
import os
import re
import sys

KINDS = ("prose", "code", "chat", "non_english")
# share of the text bytes, per kind: (min, max)
SHARE_BOUNDS = {"prose": (0.15, 0.45), "code": (0.20, 0.50),
                "chat": (0.10, 0.35), "non_english": (0.08, 0.30)}
TOTAL_BOUNDS = (20 * 1024, 80 * 1024)
SEGMENT_MAX = 6 * 1024
WINDOW = 200


def strings_in(value):
    """All strings inside a parsed JSON value."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, list):
        for v in value:
            yield from strings_in(v)
    elif isinstance(value, dict):
        for v in value.values():
            yield from strings_in(v)


def evaluation_texts(root):
    texts = []
    for path in sorted(glob.glob(os.path.join(root, "tests", "models", "text", "*.valid.txt"))):
        with open(path, encoding="utf-8") as f:
            texts.append((path, f.read()))
    for path in sorted(glob.glob(os.path.join(root, "bench", "prompts", "*.jsonl"))):
        with open(path, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                if line.strip():
                    for s in strings_in(json.loads(line)):
                        texts.append((f"{path}:{n}", s))
    for pattern in ("*.txt", os.path.join("run", "*.txt")):
        for path in sorted(glob.glob(os.path.join(root, "bench", "prompts", pattern))):
            with open(path, encoding="utf-8") as f:
                texts.append((path, f.read()))
    return texts


def shared_window(segment_text, windows):
    """The first WINDOW-character substring of segment_text that is in windows, or None."""
    for i in range(0, len(segment_text) - WINDOW + 1):
        w = segment_text[i:i + WINDOW]
        if w in windows:
            return w
    return None


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "..", "..")
    root = os.path.normpath(root)
    cal_dir = os.path.join(root, "engine", "convert", "calibration")
    path = os.path.join(cal_dir, "calibration.jsonl")
    errors = []

    def fail(msg):
        errors.append(msg)

    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        print(f"FAIL: cannot read {path}: {e}")
        return 1

    segments = []
    try:
        lines = data.decode("utf-8").split("\n")
    except UnicodeDecodeError as e:
        print(f"FAIL: {path} is not UTF-8: {e}")
        return 1
    if lines and lines[-1] == "":
        lines.pop()
    else:
        fail("the file does not end with a newline")
    for n, line in enumerate(lines, 1):
        try:
            seg = json.loads(line)
        except json.JSONDecodeError as e:
            fail(f"line {n}: not valid JSON: {e}")
            continue
        if not isinstance(seg, dict):
            fail(f"line {n}: not a JSON object")
            continue
        kind = seg.get("kind")
        if kind not in KINDS:
            fail(f"line {n}: kind {kind!r} is not one of {KINDS}")
            continue
        for key in ("source", "language"):
            if not isinstance(seg.get(key), str) or not seg[key]:
                fail(f"line {n}: missing or empty {key!r}")
        if kind == "chat":
            turns = seg.get("turns")
            if "text" in seg:
                fail(f"line {n}: a chat segment has 'text'; it must have 'turns' only")
            if not isinstance(turns, list) or not turns:
                fail(f"line {n}: chat segment without turns")
                continue
            ok = True
            for t in turns:
                if (not isinstance(t, dict) or set(t) != {"role", "content"}
                        or not isinstance(t["content"], str) or not t["content"].strip()):
                    fail(f"line {n}: each turn must be {{role, content}} with non-empty content")
                    ok = False
                    break
            if not ok:
                continue
            roles = [t["role"] for t in turns]
            if roles[0] == "system":
                roles = roles[1:]
            expected = ["user" if i % 2 == 0 else "assistant" for i in range(len(roles))]
            if not roles or roles != expected:
                fail(f"line {n}: roles {[t['role'] for t in turns]} are not an optional system "
                     f"turn followed by alternating user/assistant turns starting with user")
                continue
            text = "\n".join(t["content"] for t in turns)
            size = sum(len(t["content"].encode("utf-8")) for t in turns)
        else:
            text = seg.get("text")
            if "turns" in seg:
                fail(f"line {n}: a {kind} segment has 'turns'")
            if not isinstance(text, str) or not text.strip():
                fail(f"line {n}: missing or empty 'text'")
                continue
            size = len(text.encode("utf-8"))
        if size > SEGMENT_MAX:
            fail(f"line {n}: segment of {size} bytes, over {SEGMENT_MAX}")
        segments.append((n, kind, seg["source"], text, size))

    per_kind = {k: 0 for k in KINDS}
    for _, kind, _, _, size in segments:
        per_kind[kind] += size
    total = sum(per_kind.values())
    for k in KINDS:
        if per_kind[k] == 0:
            fail(f"no segment of kind {k!r}")
    if not TOTAL_BOUNDS[0] <= total <= TOTAL_BOUNDS[1]:
        fail(f"total text is {total} bytes, outside {TOTAL_BOUNDS}")
    if total:
        for k, (lo, hi) in SHARE_BOUNDS.items():
            share = per_kind[k] / total
            if not lo <= share <= hi:
                fail(f"kind {k!r} is {share:.1%} of the text, outside {lo:.0%}-{hi:.0%}")

    # No overlap with the evaluation texts: index every 200-character window of them.
    windows = set()
    eval_texts = evaluation_texts(root)
    if not any(p.endswith("kjv.valid.txt") for p, _ in eval_texts):
        fail(f"tests/models/text/kjv.valid.txt not found under {root}")
    for _, t in eval_texts:
        for i in range(0, len(t) - WINDOW + 1):
            windows.add(t[i:i + WINDOW])
    for n, kind, source, text, _ in segments:
        w = shared_window(text, windows)
        if w is not None:
            fail(f"line {n} ({kind}, {source}) shares this {WINDOW}-character text with an "
                 f"evaluation set: {w[:80]!r}...")

    # sha256 written in README.md
    digest = hashlib.sha256(data).hexdigest()
    readme = os.path.join(cal_dir, "README.md")
    try:
        with open(readme, encoding="utf-8") as f:
            written = re.findall(r"\b([0-9a-f]{64})\s+calibration\.jsonl", f.read())
    except OSError as e:
        written = []
        fail(f"cannot read {readme}: {e}")
    if not written:
        fail(f"{readme} has no '<sha256>  calibration.jsonl' line")
    elif any(w != digest for w in written):
        fail(f"sha256 of calibration.jsonl is {digest}, README.md says {written[0]}; "
             f"regenerate with tools/make_calibration.py and update README.md")

    if errors:
        for e in errors:
            print(f"FAIL: {e}")
        print(f"calibration_data_test: {len(errors)} problem(s) in {path}")
        return 1
    shares = ", ".join(f"{k} {per_kind[k]} B ({per_kind[k] / total:.1%})" for k in KINDS)
    print(f"calibration_data_test: OK: {len(segments)} segments, {total} text bytes: {shares}; "
          f"no {WINDOW}-character overlap with {len(eval_texts)} evaluation texts; "
          f"sha256 {digest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
