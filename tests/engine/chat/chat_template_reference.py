#!/usr/bin/env python3
"""Checks bitsplit's chat-template interpreter against Python's jinja2, byte for byte.

Every chat template found (tokenizer.chat_template* in the GGUF files of the real models and of
../shared/models, plus the hand-made tests/data/chat_templates/*.jinja) is rendered on every
conversation of tests/data/chat_conversations.json twice: by jinja2, configured the way Hugging
Face transformers renders chat templates, and by the chat_template_render test program. The
outputs must be equal byte for byte; where jinja2 raises (raise_exception, a type error, ...),
ours must fail too (and a raise_exception message must be the same).

Exit codes: 0 all equal, 1 a difference, 77 skipped (no jinja2, or no template at all).
"""

import argparse
import difflib
import glob
import json
import os
import struct
import subprocess
import sys
import tempfile

SKIP = 77


# --- GGUF metadata: just enough of the format to read the string key/values -------------------

_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}


def gguf_chat_templates(path):
    """Returns {key: template} for the tokenizer.chat_template* keys of a GGUF file."""
    with open(path, "rb") as f:
        data = f.read(64 << 20)  # metadata sits at the front; 64 MiB holds any vocabulary
    if data[:4] != b"GGUF":
        return {}
    pos = 4

    def take(fmt):
        nonlocal pos
        value = struct.unpack_from(fmt, data, pos)[0]
        pos += struct.calcsize(fmt)
        return value

    def string():
        nonlocal pos
        n = take("<Q")
        value = data[pos:pos + n]
        pos += n
        return value.decode("utf-8", "replace")

    def value(kind):
        if kind == 8:
            return string()
        if kind == 9:
            item_kind, count = take("<I"), take("<Q")
            return [value(item_kind) for _ in range(count)]
        return take(_SCALARS[kind])

    take("<I")  # version
    take("<Q")  # tensor count
    templates = {}
    try:
        for _ in range(take("<Q")):
            key = string()
            item = value(take("<I"))
            if key.startswith("tokenizer.chat_template") and isinstance(item, str):
                templates[key] = item
    except (struct.error, KeyError):
        pass  # truncated read or unknown type: keep what was found
    return templates


# --- The reference: jinja2 as Hugging Face transformers sets it up -----------------------------

def make_environment():
    import jinja2
    import jinja2.ext
    import jinja2.sandbox

    class ReferenceRaise(Exception):
        pass

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        # json.dumps with non-ASCII text kept (jinja2's own tojson escapes HTML characters).
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env = jinja2.sandbox.ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    return env, jinja2


def reference_render(env, jinja2, source, context):
    """("output", text) or ("error", message, is_raise_exception)."""
    try:
        template = env.from_string(source)
    except Exception as e:  # noqa: BLE001 - any failure is an expected error for ours too
        return ("error", f"{type(e).__name__}: {e}", False)
    try:
        return ("output", template.render(**context))
    except jinja2.exceptions.TemplateError as e:
        raised = type(e) is jinja2.exceptions.TemplateError
        return ("error", str(e) if raised else f"{type(e).__name__}: {e}", raised)
    except Exception as e:  # noqa: BLE001
        return ("error", f"{type(e).__name__}: {e}", False)


def show_diff(expected, actual):
    lines = difflib.unified_diff(
        [repr(l) for l in expected.splitlines(keepends=True)],
        [repr(l) for l in actual.splitlines(keepends=True)],
        "jinja2", "bitsplit", lineterm="")
    return "\n".join(lines)


def main():
    tests = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")  # this file: tests/engine/chat/
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--renderer", required=True, help="the chat_template_render program")
    parser.add_argument("--shared-dir", default=os.path.join(tests, "..", "..", "shared"))
    parser.add_argument("--models-dir", default=os.environ.get(
        "BITSPLIT_MODELS_DIR", os.path.expanduser("~/.cache/bitsplit-models")))
    parser.add_argument("--data-dir", default=os.path.join(tests, "data"))
    parser.add_argument("-v", "--verbose", action="store_true")
    args = parser.parse_args()

    try:
        env, jinja2 = make_environment()
    except ImportError:
        print("SKIP: Python's jinja2 is not installed (Debian: python3-jinja2)")
        return SKIP

    # Templates: from GGUF files (deduplicated by text) and the hand-made ones.
    gguf_files = sorted(set(
        glob.glob(os.path.join(args.models_dir, "*.gguf")) +
        glob.glob(os.path.join(args.shared_dir, "models", "*.gguf")) +
        glob.glob(os.path.join(args.shared_dir, "models", "vocab", "*.gguf"))))
    templates = {}  # text -> list of names
    for path in gguf_files:
        for key, text in gguf_chat_templates(path).items():
            suffix = key[len("tokenizer.chat_template"):]
            templates.setdefault(text, []).append(os.path.basename(path) + suffix)
    gguf_count = len(templates)
    if not gguf_count:
        print(f"note: no GGUF file with a chat template found ({len(gguf_files)} GGUF files looked at); "
              "fetch them with ../shared/models/fetch-real-models.sh or set --models-dir / --shared-dir. "
              "Testing the hand-made templates.")
    for path in sorted(glob.glob(os.path.join(args.data_dir, "chat_templates", "*.jinja"))):
        with open(path, encoding="utf-8") as f:
            templates.setdefault(f.read(), []).append("chat_templates/" + os.path.basename(path))
    if not templates:
        print("SKIP: no chat template found")
        return SKIP

    with open(os.path.join(args.data_dir, "chat_conversations.json"), encoding="utf-8") as f:
        conversations = json.load(f)["conversations"]

    jobs, cases = [], []
    for text, names in templates.items():
        for conv in conversations:
            context = {"tools": None, "documents": None, "bos_token": "<s>", "eos_token": "</s>"}
            context.update({k: v for k, v in conv.items() if k != "name"})
            jobs.append({"template": text, "context": context})
            cases.append((names, conv["name"], text, context))

    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False, encoding="utf-8") as f:
        json.dump(jobs, f, ensure_ascii=False)
        jobs_path = f.name
    try:
        run = subprocess.run([args.renderer, "--batch", jobs_path], capture_output=True, timeout=600)
    finally:
        os.unlink(jobs_path)
    if run.returncode != 0:
        print(f"FAIL: {args.renderer} exited with {run.returncode}\n{run.stderr.decode(errors='replace')}")
        return 1
    results = json.loads(run.stdout.decode("utf-8"))

    passed = failed = both_errors = 0
    per_template = {}
    for (names, conv_name, text, context), ours in zip(cases, results):
        expected = reference_render(env, jinja2, text, context)
        label = f"{names[0]} x {conv_name}"
        ok = False
        if expected[0] == "output":
            if "output" in ours and ours["output"].encode("utf-8") == expected[1].encode("utf-8"):
                ok = True
            elif "output" in ours:
                print(f"FAIL {label}: output differs\n{show_diff(expected[1], ours['output'])}")
            else:
                print(f"FAIL {label}: jinja2 rendered {len(expected[1])} characters, ours failed: {ours['error']}")
        else:
            if "error" not in ours:
                print(f"FAIL {label}: jinja2 failed ({expected[1]}) but ours rendered:\n{ours['output']!r}")
            elif expected[2] and not ours["error"].endswith("raise_exception: " + expected[1]):
                print(f"FAIL {label}: raise_exception message differs:\n  jinja2: {expected[1]}\n  ours:   {ours['error']}")
            else:
                ok = True
                both_errors += 1
                if args.verbose:
                    print(f"ok   {label}: both fail\n  jinja2: {expected[1]}\n  ours:   {ours['error']}")
        stats = per_template.setdefault(", ".join(names), [0, 0])
        stats[0 if ok else 1] += 1
        if ok:
            passed += 1
        else:
            failed += 1

    for name, (good, bad) in per_template.items():
        print(f"{'ok  ' if not bad else 'FAIL'} {name}: {good}/{good + bad} renders equal to jinja2")
    print(f"{len(templates)} templates ({gguf_count} from GGUF files) x {len(conversations)} conversations: "
          f"{passed} equal to jinja2 byte for byte ({both_errors} of them errors on both sides), {failed} different")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
