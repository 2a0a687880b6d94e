#!/usr/bin/env python3
"""Writes bench/prompts/heldout.jsonl, the held-out prompt set for speculative-decoding benchmarks.

The prompts are not written by hand (as bench/prompts/spec-bench.jsonl was): this script samples
material from local public-domain or permissively licensed corpora and wraps it in task templates.
Sources (Debian packages; see bench/prompts/README.md for versions and licences):

  * the King James Bible: `bible -f` from bible-kjv + bible-kjv-text (public domain text), only
    from books of which tests/models/text/kjv.valid.txt holds no chapter;
  * The Devil's Dictionary (Ambrose Bierce, 1911): /usr/share/dictd/devil.dict.dz from dict-devil
    (public domain);
  * CPython 3.11's pure-Python standard library: /usr/lib/python3.11 from libpython3.11-minimal and
    libpython3.11-stdlib (PSF licence).

Sampling is seeded and uses its own SHA-256 counter generator (not `random`), so the same sources
give the same file byte for byte on any Python 3.8+. Each category has its own stream, so changing
one category leaves the others as they were.

Usage:
  python3 tools/make_heldout_prompts.py            # writes bench/prompts/heldout.jsonl
  python3 tools/make_heldout_prompts.py --check    # regenerates in memory, compares with the file
  python3 tools/make_heldout_prompts.py -o FILE    # writes elsewhere

The set is for reporting only: never tune defaults or thresholds on it.
"""

import argparse
import ast
import gzip
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap

SEED = "bitsplit-heldout-v1"
PER_CATEGORY = 8
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_OUT = os.path.join(REPO, "bench", "prompts", "heldout.jsonl")
KJV_VALID = os.path.join(REPO, "tests", "models", "text", "kjv.valid.txt")
SPEC_BENCH = os.path.join(REPO, "bench", "prompts", "spec-bench.jsonl")
DEVIL_DICT = "/usr/share/dictd/devil.dict.dz"
DEVIL_INDEX = "/usr/share/dictd/devil.index"
PY_STDLIB = "/usr/lib/python3.11"

# KJV books (as `bible -f` abbreviates them) of which kjv.valid.txt has no chapter at all.
KJV_BOOKS = {
    "Ruth": "Ruth", "Neh": "Nehemiah", "SSol": "Song of Solomon", "Lam": "Lamentations",
    "Joel": "Joel", "Amos": "Amos", "Obad": "Obadiah", "Mic": "Micah", "Nahum": "Nahum",
    "Hab": "Habakkuk", "Zep": "Zephaniah", "Zec": "Zechariah", "Mal": "Malachi",
    "Gal": "Galatians", "Eph": "Ephesians", "Phi": "Philippians", "1Th": "1 Thessalonians",
    "2Th": "2 Thessalonians", "1Tim": "1 Timothy", "2Tim": "2 Timothy", "Phmn": "Philemon",
    "Heb": "Hebrews", "1Pet": "1 Peter", "2Pet": "2 Peter", "1Jn": "1 John", "2Jn": "2 John",
    "3Jn": "3 John", "Jude": "Jude",
}

# Pure-Python standard-library modules that functions are sampled from.
PY_MODULES = [
    "base64.py", "bisect.py", "calendar.py", "colorsys.py", "configparser.py", "copy.py", "csv.py",
    "difflib.py", "email/_parseaddr.py", "email/utils.py", "filecmp.py", "fnmatch.py", "fractions.py",
    "functools.py", "genericpath.py", "getopt.py", "gettext.py", "glob.py", "graphlib.py", "heapq.py",
    "html/__init__.py", "http/cookies.py", "ipaddress.py", "json/encoder.py", "linecache.py",
    "locale.py", "mimetypes.py", "netrc.py", "ntpath.py", "plistlib.py", "posixpath.py", "pprint.py",
    "quopri.py", "reprlib.py", "sched.py", "shlex.py", "shutil.py", "statistics.py", "string.py",
    "tempfile.py", "textwrap.py", "tokenize.py", "urllib/parse.py", "uuid.py", "xml/sax/saxutils.py",
]


def fail(msg):
    sys.exit("make_heldout_prompts: " + msg)


class Rng:
    """Deterministic choices from SHA-256 of (seed, stream, counter): independent of Python's random."""

    def __init__(self, stream):
        self.prefix = SEED + "/" + stream + "/"
        self.n = 0

    def below(self, n):
        if n <= 0:
            raise ValueError("empty range")
        h = hashlib.sha256((self.prefix + str(self.n)).encode()).digest()
        self.n += 1
        return int.from_bytes(h[:8], "big") % n

    def choice(self, seq):
        return seq[self.below(len(seq))]

    def shuffled(self, seq):
        out = list(seq)
        for i in range(len(out) - 1, 0, -1):
            j = self.below(i + 1)
            out[i], out[j] = out[j], out[i]
        return out


def deal(rng, k, n):
    """n form numbers from range(k), each used equally often (within one), in a shuffled order."""
    order = []
    while len(order) < n:
        order += rng.shuffled(range(k))
    return order[:n]


def words(text):
    return len(text.split())


# ---------------------------------------------------------------------------------------------
# Sources


def load_kjv():
    """{book: [(chapter, verse, text), ...]} for the allowed books, in canonical order."""
    if shutil.which("bible") is None:
        fail("the `bible` program is missing: apt-get install -y bible-kjv bible-kjv-text")
    try:
        out = subprocess.run(["bible", "-f", "Genesis1:1-Revelation22:21"], capture_output=True,
                             text=True, check=True, timeout=120).stdout
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as e:
        fail("`bible` failed (%s): apt-get install -y bible-kjv bible-kjv-text" % e)
    books = {}
    n = 0
    for line in out.splitlines():
        m = re.match(r"^(\S+?)(\d+):(\d+) (.*)$", line)
        if not m:
            continue
        n += 1
        book, ch, v, text = m.group(1), int(m.group(2)), int(m.group(3)), m.group(4).strip()
        if book in KJV_BOOKS:
            books.setdefault(book, []).append((ch, v, text))
    if n != 31102 or set(books) != set(KJV_BOOKS):
        fail("`bible` gave %d verses (31102 expected): reinstall bible-kjv-text" % n)
    return books


def load_devil():
    """[(headword, entry text)] from the dictd index and data, headwords in index order."""
    for path in (DEVIL_DICT, DEVIL_INDEX):
        if not os.path.exists(path):
            fail("%s is missing: apt-get install -y dict-devil" % path)
    data = gzip.open(DEVIL_DICT).read().decode("utf-8")
    b64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"

    def num(s):
        v = 0
        for c in s:
            v = v * 64 + b64.index(c)
        return v

    entries = []
    with open(DEVIL_INDEX, encoding="utf-8") as f:
        for line in f:
            head, off, length = line.rstrip("\n").split("\t")
            if head.startswith("00"):
                continue
            # dictd offsets count bytes; the text is ASCII (checked below).
            text = data[num(off):num(off) + num(length)]
            text = "\n".join(l.rstrip() for l in text.strip("\n").splitlines())
            if not text.isascii():
                continue
            entries.append((head, text))
    if len(entries) < 900:
        fail("%s has only %d entries: reinstall dict-devil" % (DEVIL_INDEX, len(entries)))
    return entries


def load_python_functions(root):
    """[(module, qualname, node, source lines dedented)] of public documented functions, 8..70 lines."""
    if not os.path.exists(os.path.join(root, "textwrap.py")):
        fail("%s/textwrap.py is missing: apt-get install -y libpython3.11-minimal libpython3.11-stdlib"
             " (or pass --python-stdlib; another Python version gives another file)" % root)
    funcs = []
    for rel in PY_MODULES:
        path = os.path.join(root, rel)
        if not os.path.exists(path):
            fail("%s is missing: apt-get install -y libpython3.11-stdlib" % path)
        src = open(path, encoding="utf-8").read()
        lines = src.splitlines()
        module = rel[:-3].replace("/__init__", "").replace("/", ".")
        for top in ast.parse(src).body:
            if isinstance(top, ast.FunctionDef):
                found = [(top.name, top)]
            elif isinstance(top, ast.ClassDef):
                found = [(top.name + "." + f.name, f) for f in top.body if isinstance(f, ast.FunctionDef)]
            else:
                found = []
            for qual, f in found:
                if f.name.startswith("_") or not ast.get_docstring(f):
                    continue
                first = min([f.lineno] + [d.lineno for d in f.decorator_list])
                body = lines[first - 1:f.end_lineno]
                if not 8 <= len(body) <= 70 or not all(l.isascii() for l in body):
                    continue
                text = textwrap.dedent("\n".join(body))
                if len(text) > 2600:
                    continue
                funcs.append((module, qual, f, first, text))
    funcs.sort(key=lambda x: (x[0], x[1]))
    return funcs


# ---------------------------------------------------------------------------------------------
# Material


class Kjv:
    def __init__(self, books):
        self.books = books
        self.chapters = [(b, ch) for b in KJV_BOOKS for ch in sorted({c for c, _, _ in books[b]})]
        self.used = set()
        self.valid = open(KJV_VALID, encoding="utf-8").read() if os.path.exists(KJV_VALID) else ""

    def passage(self, rng, target, lo=None, hi=None):
        """Consecutive verses from one book, about `target` words (lo..hi if given), unused so far."""
        lo = lo if lo is not None else int(target * 0.8)
        hi = hi if hi is not None else int(target * 1.3) + 25
        for _ in range(500):
            book, ch = rng.choice(self.chapters)
            verses = self.books[book]
            starts = [i for i, (c, _, _) in enumerate(verses) if c == ch]
            i = rng.choice(starts)
            picked, n = [], 0
            while i < len(verses) and n < target:
                picked.append(verses[i])
                n += words(verses[i][2])
                i += 1
            keys = {(book, c, v) for c, v, _ in picked}
            if not lo <= n <= hi or keys & self.used:
                continue
            if any(len(t) > 40 and t in self.valid for _, _, t in picked):
                continue  # never reached with KJV_BOOKS as it is; guards edits to it
            self.used |= keys
            return Passage(book, picked)
        fail("no KJV passage of %d words found" % target)


class Passage:
    def __init__(self, book, verses):
        self.book, self.verses = book, verses

    @property
    def ref(self):
        (c0, v0, _), (c1, v1, _) = self.verses[0], self.verses[-1]
        name = KJV_BOOKS[self.book]
        if c0 == c1:
            return "%s %d:%d" % (name, c0, v0) + ("-%d" % v1 if v1 != v0 else "")
        return "%s %d:%d-%d:%d" % (name, c0, v0, c1, v1)

    def prose(self):
        return " ".join(t for _, _, t in self.verses)

    def numbered(self):
        return "\n".join("%d:%d %s" % (c, v, t) for c, v, t in self.verses)

    def names(self):
        """Distinct capitalised words not at a sentence start: how many names there are to extract."""
        caps = set(re.findall(r"(?<=[a-z,;:] )([A-Z][a-z]{2,})", self.prose()))
        return len(caps - {"God", "Lord", "Christ", "Jesus", "Spirit", "Father", "Son", "Holy"})

    def numbers(self):
        """Number words and time words: how many quantities and times there are to extract."""
        return len(re.findall(r"\b(one|two|three|four|five|six|seven|eight|nine|ten|twelve|twenty|thirty|"
                              r"forty|fifty|hundred|thousand|first|second|third|fourth|fifth|sixth|"
                              r"seventh|eighth|ninth|tenth|eleventh|twelfth|day|days|month|year|years|"
                              r"night|morning|hour)\b", self.prose(), flags=re.IGNORECASE))


def devil_parts(text):
    """(display headword, part of speech or '', body) of a Devil's Dictionary entry."""
    first = text.splitlines()[0]
    m = re.match(r"^([A-Z][A-Z' -]*[A-Z])(?:, ([a-z. ]+?))?\.?(?:\s{2}|$)", first)
    if not m:
        return None
    return m.group(1), (m.group(2) or "").strip(), text


class Devil:
    def __init__(self, entries):
        self.entries = []
        for head, text in entries:
            parts = devil_parts(text)
            if parts and head.isalpha():
                self.entries.append((head, parts[0], parts[1], text))
        self.used = set()

    def entry(self, rng, lo, hi, prose_only=False):
        pool = [e for e in self.entries if lo <= words(e[3]) <= hi and e[0] not in self.used]
        if prose_only:
            pool = [e for e in pool if not any(l.startswith("    ") for l in e[3].splitlines())]
        if not pool:
            fail("no Devil's Dictionary entry of %d..%d words left" % (lo, hi))
        e = rng.choice(pool)
        self.used.add(e[0])
        return e

    def word(self, rng):
        e = self.entry(rng, 1, 10000)
        return e[1].lower()


class Code:
    def __init__(self, funcs):
        self.funcs = funcs
        self.used = set()

    def function(self, rng, lo, hi, min_body=0):
        pool = [f for f in self.funcs
                if lo <= f[4].count("\n") + 1 <= hi and (f[0], f[1]) not in self.used
                and len(body_lines(f)) >= min_body]
        if not pool:
            fail("no standard-library function of %d..%d lines left" % (lo, hi))
        f = rng.choice(pool)
        self.used.add((f[0], f[1]))
        return f


def docstring_end(f):
    node = f[2].body[0]
    return node.end_lineno - f[3] + 1  # lines of the dedented source up to the docstring's end


def body_lines(f):
    return f[4].splitlines()[docstring_end(f):]


def without_docstring(f):
    lines = f[4].splitlines()
    node = f[2].body[0]
    a, b = node.lineno - f[3], node.end_lineno - f[3] + 1
    while b < len(lines) and not lines[b].strip():
        b += 1  # the blank line that followed the docstring
    return "\n".join(lines[:a] + lines[b:])


def signature(f):
    return "def %s(%s)" % (f[2].name, ast.unparse(f[2].args))


def where(f):
    mod, qual = f[0], f[1]
    if "." in qual:
        return "the method `%s` of class `%s` in Python's `%s` module" % (qual.split(".")[1], qual.split(".")[0], mod)
    return "the function `%s` from Python's `%s` module" % (qual, mod)


def code(text):
    return "```python\n" + text + "\n```"


# ---------------------------------------------------------------------------------------------
# Categories: each returns PER_CATEGORY lists of turns. Slot i has its own target length, so each
# category runs from short to long prompts.


def u(text):
    return {"role": "user", "content": text}


def a(text):
    return {"role": "assistant", "content": text}


def s(text):
    return {"role": "system", "content": text}


def cut_mid_sentence(text, rng):
    """Cuts prose after a comma or semicolon in its last third, so a continuation is mid-thought."""
    marks = [m.end() for m in re.finditer(r"[,;:] ", text) if m.end() > len(text) * 2 // 3]
    if not marks:
        return text
    return text[:rng.choice(marks)].rstrip()


def continue_prose(kjv, devil, code_, rng):
    targets = [30, 55, 80, 120, 170, 230, 300, 380]
    sources = rng.shuffled(["kjv"] * 5 + ["devil"] * 3)
    order = deal(rng, 4, len(targets))
    out = []
    for i, t in enumerate(targets):
        if sources[i] == "devil":
            e = devil.entry(rng, max(20, t // 2), t + 60, prose_only=True)
            text = e[3]
            intro = "an entry from Ambrose Bierce's satirical The Devil's Dictionary (1911)"
        else:
            text = kjv.passage(rng, t).prose()
            intro = "a passage in the style of the King James Bible"
        text = cut_mid_sentence(text, rng)
        form = order[i]
        if form == 0:
            out.append([u("Continue the following text in the same style for another paragraph.\n\n" + text)])
        elif form == 1:
            n = rng.choice([60, 100, 150])
            out.append([u("Here is the beginning of %s. Write what comes next, about %d words, and keep the "
                          "voice and vocabulary of the original.\n\n%s" % (intro, n, text))])
        elif form == 2:
            out.append([s("You continue the user's text. Reply with the continuation only, without comments."),
                        u(text)])
        else:
            out.append([u("The text below stops in the middle. Finish the sentence, then add three more "
                          "sentences that fit.\n\n\"" + text + "\"")])
    return out


def summarize(kjv, devil, code_, rng):
    targets = [150, 180, 210, 250, 290, 320, 360, 390]
    sources = rng.shuffled(["kjv"] * 6 + ["devil"] * 2)
    forms = [
        "Summarise the passage below in two sentences.\n\n{t}",
        "Give the passage below a short title, then summarise it in three bullet points.\n\n{t}",
        "Explain what happens in this passage to a twelve-year-old, in one short paragraph.\n\n{t}",
        "Read the following text and write a summary of at most 50 words.\n\n{t}",
        "{t}\n\nWhat is the main point of the text above? Answer in plain modern English, in no more "
        "than four sentences.",
        "Summarise this text, then list the people or things it is mainly about.\n\n{t}",
    ]
    order = deal(rng, len(forms), len(targets))
    out = []
    for i, t in enumerate(targets):
        if sources[i] == "devil":
            e = devil.entry(rng, 150, 400)
            text, label = e[3], "an entry from The Devil's Dictionary (Ambrose Bierce)"
        else:
            p = kjv.passage(rng, t, lo=150, hi=400)
            text, label = p.prose(), p.ref + " (King James Version)"
        assert 150 <= words(text) <= 400, (label, words(text))
        prompt = forms[order[i]].format(t=text)
        if rng.below(3) == 0:
            out.append([s("You are a careful reader who writes clear, faithful summaries. The text is "
                          + label + "."), u(prompt)])
        else:
            out.append([u(prompt)])
    return out


def define(kjv, devil, code_, rng):
    sizes = [(1, 12), (8, 20), (15, 30), (20, 40), (30, 60), (50, 90), (80, 150), (120, 220)]
    out = []
    for i, (lo, hi) in enumerate(sizes):
        head, word, pos, text = devil.entry(rng, lo, hi)
        form = i % 4 if i != 0 else 4
        if form == 0:
            out.append([u("This is an entry from Ambrose Bierce's The Devil's Dictionary (1911). Explain the "
                          "joke in plain modern English, in two or three sentences.\n\n" + text)])
        elif form == 1:
            out.append([u("Rewrite this satirical dictionary entry as a neutral, factual dictionary definition "
                          "of '%s', with one example sentence.\n\n%s" % (word.lower(), text))])
        elif form == 2:
            other = devil.word(rng)
            out.append([s("You write short satirical dictionary entries in the manner of Ambrose Bierce."),
                        u("Here is one of Bierce's entries:\n\n%s\n\nNow write an entry of your own, in the same "
                          "style and under 60 words, for the word '%s'." % (text, other))])
        elif form == 3:
            hidden = re.sub(r"\b%s\b" % re.escape(word), "_____", text, flags=re.IGNORECASE)
            out.append([u("Below is a satirical dictionary definition with the word being defined replaced by "
                          "_____. Which word is it? Give your guess and explain the clues.\n\n" + hidden)])
        else:
            out.append([u("Define '%s'%s the way Ambrose Bierce might have in The Devil's Dictionary." %
                          (word.lower(), " (%s)" % pos if pos else ""))])
    return out


def code_explain(kjv, devil, code_, rng):
    sizes = [(8, 12), (10, 16), (14, 20), (18, 26), (24, 34), (30, 44), (40, 56), (50, 70)]
    forms = [
        "Explain what {w} does, step by step.\n\n{c}",
        "Walk through the code below, {w}, and show what it returns for two example inputs of your "
        "choice.\n\n{c}",
        "Review {w}: describe its behaviour, the edge cases it handles, and any it does not.\n\n{c}",
        "Summarise in three bullet points what this code does. It is {w}.\n\n{c}",
        "{c}\n\nI found this in the Python standard library ({w}). What is it for, and when would I call it?",
    ]
    order = deal(rng, len(forms), len(sizes))
    keep_doc = deal(rng, 2, len(sizes))
    out = []
    for i, (lo, hi) in enumerate(sizes):
        f = code_.function(rng, lo, hi)
        src = f[4] if keep_doc[i] else without_docstring(f)
        prompt = forms[order[i]].format(w=where(f), c=code(src))
        if rng.below(3) == 0:
            out.append([s("You are a senior Python developer who explains code to junior colleagues."), u(prompt)])
        else:
            out.append([u(prompt)])
    return out


def code_complete(kjv, devil, code_, rng):
    sizes = [(10, 16), (12, 20), (16, 26), (20, 30), (26, 38), (32, 46), (40, 56), (50, 70)]
    fractions = [0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.3]
    order = deal(rng, 3, len(sizes))
    out = []
    for i, ((lo, hi), frac) in enumerate(zip(sizes, fractions)):
        f = code_.function(rng, lo, hi, min_body=6)
        lines = f[4].splitlines()
        keep = docstring_end(f) + max(1, round(len(body_lines(f)) * frac))
        head = lines[:keep]
        while head and not head[-1].strip():
            head.pop()
        partial = "\n".join(head)
        form = order[i]
        if form == 0:
            prompt = ("Complete this Python function, %s. Return the whole function in one code block.\n\n%s"
                      % (where(f), code(partial)))
        elif form == 1:
            prompt = ("The function below is cut off after its first lines. Finish it so that it does what "
                      "its docstring says.\n\n%s" % code(partial))
        else:
            prompt = ("Write the rest of `%s` (%s), continuing exactly where the code stops.\n\n%s"
                      % (f[2].name, f[0], code(partial)))
        out.append([u(prompt)])
    return out


def extract(kjv, devil, code_, rng):
    targets = [60, 90, 120, 160, 200, 250, 300, 350]
    forms = [
        ("List every person named in the passage below, one per line, with a few words on who each is."
         "\n\n{p}", "prose", Passage.names),
        ("Extract all place names and all numbers (in words or digits) from this passage. Answer as JSON "
         "with the keys \"places\" and \"numbers\".\n\n{p}", "prose", lambda p: p.names() + p.numbers()),
        ("Make a table of the names in this text with the columns: name, role or relation, and the verse "
         "where it first appears.\n\n{p}", "numbered", Passage.names),
        ("{p}\n\nFrom the text above, list who does what: one line per named person or group, with the "
         "action.", "prose", Passage.names),
        ("Find every time expression in the passage (days, months, years, ages, durations) and every "
         "quantity. Give each with the verse it is in.\n\n{p}", "numbered", Passage.numbers),
    ]
    order = list(range(len(forms))) + deal(rng, len(forms), len(targets) - len(forms))
    out = []
    for i, t in enumerate(targets):
        # The passage with the most to extract among a few candidates of this length.
        form, shape, score = forms[order[i]]
        cands = []
        for _ in range(20):
            p = kjv.passage(rng, t)
            kjv.used -= {(p.book, c, v) for c, v, _ in p.verses}
            cands.append(p)
        best = max(cands, key=lambda p: (score(p), -cands.index(p)))
        kjv.used |= {(best.book, c, v) for c, v, _ in best.verses}
        text = best.prose() if shape == "prose" else best.numbered()
        out.append([u(form.format(p=text))])
    return out


def multi_turn(kjv, devil, code_, rng):
    kinds = rng.shuffled(["kjv"] * 3 + ["code"] * 3 + ["devil"] * 2)
    out = []
    for i, kind in enumerate(kinds):
        if kind == "kjv":
            p = kjv.passage(rng, rng.choice([50, 90, 140, 200]))
            follow = rng.choice([
                "Retell it in plain modern English in four or five sentences.",
                "List the people or groups it mentions and say in one line what each does.",
                "Write a short poem of eight lines inspired by it.",
                "What would a modern reader find hardest to understand in it? Explain two phrases.",
            ])
            out.append([u("Where is this passage from?\n\n" + p.prose()),
                        a("It is %s, from the King James Version of the Bible." % p.ref),
                        u(follow)])
        elif kind == "code":
            f = code_.function(rng, 8, 40)
            doc = ast.get_docstring(f[2])
            follow = rng.choice([
                "Write four pytest tests for it.",
                "Show how I could implement it myself in a few lines, without the standard library version.",
                "Give three example calls and the result of each.",
                "Is there anything surprising about how it behaves? Give an example.",
            ])
            out.append([u("What is the signature of %s, and what does its docstring say?" % where(f)),
                        a("Its signature is `%s`. The docstring reads:\n\n%s" % (signature(f), doc)),
                        u(follow)])
        else:
            head, word, pos, text = devil.entry(rng, 15, 120)
            other = devil.word(rng)
            follow = rng.choice([
                "Explain why that is meant to be funny.",
                "Write a similar definition for the word '%s'." % other,
                "Is the definition still apt today? Answer in one paragraph.",
            ])
            turns = [u("How does Ambrose Bierce define '%s' in The Devil's Dictionary?" % word.lower()),
                     a("He defines it like this:\n\n" + text),
                     u(follow)]
            if i % 2:
                turns.insert(0, s("You are a witty but accurate literary assistant."))
            out.append(turns)
    return out


CATEGORIES = [
    ("continue_prose", continue_prose),
    ("summarize", summarize),
    ("define", define),
    ("code_explain", code_explain),
    ("code_complete", code_complete),
    ("extract", extract),
    ("multi_turn", multi_turn),
]


def spec_bench_shingles():
    """60-character windows of every turn in spec-bench.jsonl, to check the sets share no text."""
    if not os.path.exists(SPEC_BENCH):
        return set()
    sh = set()
    for line in open(SPEC_BENCH, encoding="utf-8"):
        if line.strip():
            for t in json.loads(line)["turns"]:
                c = t["content"]
                sh.update(c[i:i + 60] for i in range(0, max(1, len(c) - 59)))
    return sh


def generate(stdlib):
    kjv = Kjv(load_kjv())
    devil = Devil(load_devil())
    code_ = Code(load_python_functions(stdlib))
    shingles = spec_bench_shingles()
    lines = []
    for name, make in CATEGORIES:
        prompts = make(kjv, devil, code_, Rng(name))
        assert len(prompts) == PER_CATEGORY, name
        for turns in prompts:
            assert turns[-1]["role"] == "user"
            for t in turns:
                c = t["content"]
                if "<|" in c or "|>" in c:
                    fail("%s: sampled text contains a special-token marker" % name)
                if any(c[i:i + 60] in shingles for i in range(0, max(1, len(c) - 59))):
                    fail("%s: a prompt shares text with spec-bench.jsonl" % name)
            lines.append(json.dumps({"category": name, "turns": turns}, ensure_ascii=False))
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-o", "--output", default=DEFAULT_OUT, help="where to write (default: %(default)s)")
    ap.add_argument("--check", action="store_true", help="regenerate and compare with --output; write nothing")
    ap.add_argument("--python-stdlib", default=PY_STDLIB,
                    help="CPython standard library to sample (default: %(default)s; another version gives "
                         "another file)")
    args = ap.parse_args()
    text = generate(args.python_stdlib)
    digest = hashlib.sha256(text.encode()).hexdigest()
    if args.check:
        old = open(args.output, encoding="utf-8").read() if os.path.exists(args.output) else None
        if old != text:
            fail("%s differs from what the sources give now (sha256 %s)" % (args.output, digest))
        print("%s: up to date, %d prompts, sha256 %s" % (args.output, text.count("\n"), digest))
        return
    with open(args.output, "w", encoding="utf-8", newline="\n") as f:
        f.write(text)
    print("wrote %s: %d prompts, sha256 %s" % (args.output, text.count("\n"), digest))


if __name__ == "__main__":
    main()
