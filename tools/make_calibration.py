#!/usr/bin/env python3
"""Assemble engine/convert/calibration/calibration.jsonl, the default calibration text of
`bitsplit convert` (issue 42, item 1).

Deterministic and offline: every excerpt is read verbatim from a file that a Debian package
installs (or from the output of the `bible` program of bible-kjv), chosen by fixed markers
and byte limits, never at random. The chat turns are original text written for this file
and are embedded below. Each source is checked against the sha256 recorded here, so a rerun
either reproduces calibration.jsonl byte for byte or stops and says which source changed.

usage: make_calibration.py [-o OUT] [--check] [--ignore-source-hashes]
  -o OUT                  where to write (default: engine/convert/calibration/calibration.jsonl
                          under the repository root that holds this script)
  --check                 build in memory and compare with OUT instead of writing it
  --ignore-source-hashes  build even if a source differs from the recorded version (the
                          output then differs from the shipped file; update README.md too)

Python 3 standard library only. The provenance of every source is in
engine/convert/calibration/README.md.
"""
import argparse
import gzip
import hashlib
import json
import os
import re
import struct
import subprocess
import sys
import zlib

REPO = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
DEFAULT_OUT = os.path.join(REPO, "engine", "convert", "calibration", "calibration.jsonl")
MAX_SEGMENT = 4000  # bytes of text in one segment, at most

PY = "/usr/lib/python3.11"
SWORD = "/usr/share/sword/modules/texts/ztext/spaRV1909eb/"

# path -> (Debian package that installs it, sha256 of the version used)
FILES = {
    PY + "/bisect.py": (
        "libpython3.11-minimal",
        "e5b2ff166f48a06e70ae831d8c9b47283fcd0c254306eee12d3dae9c55e11526"),
    PY + "/textwrap.py": (
        "libpython3.11-stdlib",
        "62867e40cdea6669b361f72af4d7daf0359f207c92cbeddfc7c7506397c1f31c"),
    PY + "/venv/scripts/common/activate": (
        "libpython3.11-stdlib",
        "024b98b11f3f5cd1ba44fc201376c8c0fc5cbe08654567cbfc9cfc75576b06ce"),
    PY + "/pydoc_data/topics.py": (
        "libpython3.11-stdlib",
        "2d8108030912648feda37d4894ab700d247582568fe7a53260dd6a3c2d8e518d"),
    "/usr/share/doc/zlib1g-dev/examples/zpipe.c": (
        "zlib1g-dev",
        "68140a82582ede938159630bca0fb13a93b4bf1cb2e85b08943c26242cf8f3a6"),
    "/usr/src/googletest/googletest/src/gtest-filepath.cc": (
        "googletest",
        "d554c1c2ea6dc52ca598033ee00a7d5bc7c560a76d944903517e4284cccba331"),
    "/usr/share/cargo/registry/itoa-1.0.1/src/lib.rs": (
        "librust-itoa-dev",
        "7db5ab3ddb46aa850803adb12ab87341e3022bd06009f0c41bd0f61b74f57708"),
    "/usr/share/gocode/src/github.com/google/uuid/uuid.go": (
        "golang-github-google-uuid-dev",
        "f6e767f1b9e3e5946f600afccc01c0e40f1d494171f2f9d8659a2e15daf3d79e"),
    "/usr/share/javascript/sphinxdoc/1.0/searchtools.js": (
        "libjs-sphinxdoc",
        "efd754bc6adc3610e00e2ff144c604f0e8527ab184171970fe4abc48478a321b"),
    "/usr/share/dictd/jargon.dict.dz": (
        "dict-jargon",
        "856ced964d3a3cfd79a3dc251df04365eefd848966e3ae94e58f2671d6e79ca5"),
    "/usr/share/dictd/devil.dict.dz": (
        "dict-devil",
        "995ca92760d677965cb2780e78b808e982f9d49e8c12d795c1854476bbf13819"),
    "/usr/share/games/fortunes/eo/proverbaro": (
        "fortunes-eo",
        "cb981aab2c95b05e6a7ba6bb1e103ea909943f60842c0ab98006b00be34ab85a"),
    "/usr/share/games/fortunes/ga/proverbs": (
        "fortunes-ga",
        "9addfbd472ac6cfcabe98d85621bb1af7985c8341c73e1214e9b157726fd5bbc"),
    SWORD + "ot.bzs": (
        "sword-text-sparv",
        "0e39106ae15a29cef56feac683f8482be380536a1c456e006867f9fa94c0338e"),
    SWORD + "ot.bzv": (
        "sword-text-sparv",
        "0f23b1ebff5ecdd352a64feda5bb047cba27ce3624fa7b00717f763835d96e20"),
    SWORD + "ot.bzz": (
        "sword-text-sparv",
        "daae868e179e6cc884ad2c9429a9dfaf9745d61caa6dbb9da2a8b24ec3c01337"),
}
# sha256 of the output of `bible "Ruth1:1-Ruth1:22"` (bible-kjv + bible-kjv-text)
KJV_RUTH1_SHA = "35e937df79735f728afe643bb3cfad3e1540b95ccb422caa2a492076f36de0e0"

IGNORE_HASHES = False


class SourceError(Exception):
    pass


def check_hash(what, data, expected, package):
    if expected is None or IGNORE_HASHES:
        return
    got = hashlib.sha256(data).hexdigest()
    if got != expected:
        raise SourceError(
            f"{what} differs from the version this corpus was built from "
            f"(sha256 {got}, expected {expected}); the installed '{package}' is another "
            f"version (see engine/convert/calibration/README.md for the one used), or pass "
            f"--ignore-source-hashes to build from it anyway")


_cache = {}


def read_bytes(path):
    if path not in _cache:
        package, sha = FILES[path]
        if not os.path.isfile(path):
            raise SourceError(f"missing source file {path}: install it with "
                              f"'apt-get install -y {package}'")
        with open(path, "rb") as f:
            data = f.read()
        check_hash(path, data, sha, package)
        _cache[path] = data
    return _cache[path]


def read_text(path):
    data = read_bytes(path)
    if path.endswith(".dz"):
        data = gzip.decompress(data)
    return data.decode("utf-8")


# ---------------------------------------------------------------- excerpt helpers

def clip_lines(text, limit=MAX_SEGMENT):
    """Whole lines of text, as many as fit in limit bytes."""
    out, size = [], 0
    for line in text.split("\n"):
        n = len(line.encode("utf-8")) + 1
        if size + n > limit:
            break
        out.append(line)
        size += n
    return "\n".join(out).rstrip()


def lines_between(text, start, end=None, limit=MAX_SEGMENT):
    """From the line holding the first `start` up to (not including) the line holding the
    first `end` after it (or the end of the text), clipped to whole lines within limit."""
    i = text.find(start)
    if i < 0:
        raise SourceError(f"marker {start!r} not found")
    i = text.rfind("\n", 0, i) + 1
    j = len(text)
    if end is not None:
        j = text.find(end, i + len(start))
        if j < 0:
            raise SourceError(f"marker {end!r} not found")
        j = text.rfind("\n", 0, j) + 1
    return clip_lines(text[i:j].rstrip(), limit)


def unwrap(lines):
    """Join wrapped prose lines into paragraphs; blank lines separate paragraphs."""
    paras, buf = [], []
    for line in lines + [""]:
        if line.strip():
            buf.append(line.strip())
        elif buf:
            paras.append(" ".join(buf))
            buf = []
    return "\n\n".join(paras)


def seg(kind, source, language, text):
    text = text.strip()
    if not text:
        raise SourceError(f"empty excerpt from {source}")
    return {"kind": kind, "source": source, "language": language, "text": text}


# ---------------------------------------------------------------- prose

def jargon_entry(headword):
    """One entry of the Jargon File 4.4.7 (dictd text): headword, pronunciation/part of
    speech line, then the indented body, unwrapped into paragraphs."""
    lines = read_text("/usr/share/dictd/jargon.dict.dz").split("\n")
    for i, line in enumerate(lines):
        if line == headword and i > 0 and lines[i - 1] == "":
            break
    else:
        raise SourceError(f"Jargon File entry {headword!r} not found")
    body, j = [], i + 1
    while j < len(lines) and (lines[j] == "" or lines[j].startswith(" ")):
        body.append(lines[j])
        j += 1
    head = body[0].strip()
    return f"{headword}\n{head}\n\n{unwrap(body[1:])}"


DEVIL_HEAD = re.compile(r"^[A-Z][A-Z'\-]*(, | [A-Z]| or )")


def devil_entries(headwords):
    """Entries of The Devil's Dictionary (dictd text) by headword: prose lines unwrapped,
    indented verse kept line by line, attribution lines kept."""
    lines = read_text("/usr/share/dictd/devil.dict.dz").split("\n")
    out = []
    for word in headwords:
        starts = [i for i, l in enumerate(lines)
                  if l.startswith(word + ", ") and (i == 0 or lines[i - 1].strip() == "")]
        if len(starts) != 1:
            raise SourceError(f"Devil's Dictionary entry {word!r} not found once")
        i = starts[0]
        block = [lines[i]]
        j = i + 1
        while j < len(lines) and not (DEVIL_HEAD.match(lines[j]) and lines[j - 1].strip() == ""):
            block.append(lines[j])
            j += 1
        paras, buf = [], []

        def flush():
            if buf:
                paras.append(" ".join(buf))
                buf.clear()
        for l in block:
            if not l.strip():
                flush()
            elif l.startswith(" "):
                flush()
                paras.append(re.sub(r"\s+", " ", l).strip())
            else:
                buf.append(re.sub(r"\s+", " ", l).strip())
        flush()
        out.append("\n".join(paras))
    return "\n\n".join(out)


def pydoc_topics(names):
    src = read_text(PY + "/pydoc_data/topics.py")
    ns = {}
    exec(compile(src, "topics.py", "exec"), ns)  # a dict literal only
    return "\n\n".join(ns["topics"][n].strip() for n in names)


def kjv_ruth1():
    try:
        raw = subprocess.run(["bible", "Ruth1:1-Ruth1:22"], check=True,
                             capture_output=True).stdout
    except FileNotFoundError:
        raise SourceError("the 'bible' program is missing: install it with "
                          "'apt-get install -y bible-kjv bible-kjv-text'")
    check_hash("output of bible Ruth1:1-Ruth1:22", raw, KJV_RUTH1_SHA, "bible-kjv-text")
    verses = []
    for line in raw.decode("utf-8").split("\n"):
        m = re.match(r"^  [0-9]+ (.*)$", line)
        if m:
            verses.append(m.group(1).strip())
        elif line.strip() and verses and not re.match(r"^Ruth [0-9]+$", line.strip()):
            verses[-1] += " " + line.strip()
    if len(verses) != 22:
        raise SourceError(f"expected 22 verses of Ruth 1, got {len(verses)}")
    return " ".join(verses)


def prose():
    return [
        seg("prose", "jargon-4.4.7", "en",
            "\n\n".join(jargon_entry(w) for w in
                        ("fencepost error", "heisenbug", "cargo cult programming"))),
        seg("prose", "jargon-4.4.7", "en",
            "\n\n".join(jargon_entry(w) for w in ("magic smoke", "bit rot", "considered harmful"))),
        seg("prose", "devils-dictionary", "en",
            devil_entries(["ABSURDITY", "ACQUAINTANCE", "ADVICE", "BORE", "CALAMITY",
                           "CYNIC", "DIPLOMACY", "EDUCATION", "EGOTIST", "FUTURE",
                           "HISTORIAN", "IMPARTIAL"])),
        seg("prose", "devils-dictionary", "en",
            devil_entries(["LOGIC", "PATIENCE", "PLAGIARISM", "POLITENESS", "PREJUDICE",
                           "PROOF", "QUOTATION", "RESPONSIBILITY"])),
        seg("prose", "python-3.11-docs", "en", pydoc_topics(["for", "while", "break", "continue"])),
        seg("prose", "kjv-ruth-1", "en", kjv_ruth1()),
    ]


# ---------------------------------------------------------------- code

def code():
    return [
        seg("code", "cpython-3.11:bisect.py", "python",
            lines_between(read_text(PY + "/bisect.py"), '"""Bisection algorithms."""',
                          "def bisect_left(")),
        seg("code", "cpython-3.11:textwrap.py", "python",
            lines_between(read_text(PY + "/textwrap.py"), "# -- Loosely related functionality",
                          'if __name__ == "__main__":')),
        seg("code", "cpython-3.11:venv/activate", "shell",
            read_text(PY + "/venv/scripts/common/activate")),
        seg("code", "zlib-1.2.13:zpipe.c", "c",
            lines_between(read_text("/usr/share/doc/zlib1g-dev/examples/zpipe.c"),
                          "/* zpipe.c:", "/* Decompress from file source")),
        seg("code", "googletest-1.12.1:gtest-filepath.cc", "cpp",
            lines_between(read_text("/usr/src/googletest/googletest/src/gtest-filepath.cc"),
                          "// Returns whether the given character is a valid path separator.",
                          "// Returns a pointer to the last occurrence")),
        seg("code", "googletest-1.12.1:gtest-filepath.cc", "cpp",
            lines_between(read_text("/usr/src/googletest/googletest/src/gtest-filepath.cc"),
                          "// Returns a pointer to the last occurrence",
                          "// Returns a copy of the FilePath with the directory part removed.")
            + "\n\n" +
            lines_between(read_text("/usr/src/googletest/googletest/src/gtest-filepath.cc"),
                          "// Returns a copy of the FilePath with the directory part removed.",
                          None, limit=2600)),
        seg("code", "itoa-1.0.1:lib.rs", "rust",
            lines_between(read_text("/usr/share/cargo/registry/itoa-1.0.1/src/lib.rs"),
                          "pub struct Buffer {", "const DEC_DIGITS_LUT")),
        seg("code", "itoa-1.0.1:lib.rs", "rust",
            lines_between(read_text("/usr/share/cargo/registry/itoa-1.0.1/src/lib.rs"),
                          "const DEC_DIGITS_LUT", None, limit=2000)),
        seg("code", "google-uuid-1.3.0:uuid.go", "go",
            lines_between(read_text("/usr/share/gocode/src/github.com/google/uuid/uuid.go"),
                          "// Parse decodes s into a UUID", "// ParseBytes is like Parse")),
        seg("code", "sphinx-5.3.0:searchtools.js", "javascript",
            lines_between(read_text("/usr/share/javascript/sphinxdoc/1.0/searchtools.js"),
                          "/*\n * searchtools.js", "const _displayItem")
            + "\n\n" +
            lines_between(read_text("/usr/share/javascript/sphinxdoc/1.0/searchtools.js"),
                          "  makeSearchSummary: (htmlText, keywords) => {", None, limit=1500)),
    ]


# ---------------------------------------------------------------- non-English

def sword_chapters(osis_ids):
    """Plain text of chapters of the Reina-Valera 1909 SWORD module (zText, OSIS markup):
    read the verse index (.bzv), the block index (.bzs) and the zlib blocks (.bzz) of the
    Old Testament, find each chapter by its <chapter sID="..."/> entry, strip the markup."""
    bzs, bzv, bzz = (read_bytes(SWORD + "ot." + e) for e in ("bzs", "bzv", "bzz"))
    blocks = [struct.unpack_from("<III", bzs, i) for i in range(0, len(bzs), 12)]
    cache = {}

    def entry(b, o, s):
        if b not in cache:
            off, size, _ = blocks[b]
            cache[b] = zlib.decompress(bzz[off:off + size])
        return cache[b][o:o + s].decode("utf-8")
    chapters, cur = {}, None
    for i in range(0, len(bzv), 10):
        b, o, s = struct.unpack_from("<IIH", bzv, i)
        if not s:
            continue
        t = entry(b, o, s)
        m = re.search(r'<chapter [^>]*sID="([^"]+)"', t)
        if m:
            cur = m.group(1)
            continue
        if cur in osis_ids:
            t = re.sub(r"<title[^>]*>.*?</title>", "", t)
            t = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", t)).strip()
            if t:
                chapters.setdefault(cur, []).append(t)
    missing = [c for c in osis_ids if c not in chapters]
    if missing:
        raise SourceError(f"chapters {missing} not found in the spaRV1909eb module")
    return "\n\n".join(" ".join(chapters[c]) for c in osis_ids)


def fortunes(path, every, limit):
    """Every `every`-th cookie of a fortune file, one per paragraph, up to limit bytes."""
    cookies = [c.strip() for c in read_text(path).split("\n%\n")]
    cookies = [c.strip("%").strip() for c in cookies]
    cookies = [c for c in cookies if c]
    picked = cookies[::every]
    return clip_lines("\n\n".join(picked), limit)


def non_english():
    return [
        seg("non_english", "reina-valera-1909:jonas-1", "es", sword_chapters(["Jonah.1"])),
        seg("non_english", "reina-valera-1909:jonas-2-3", "es",
            sword_chapters(["Jonah.2", "Jonah.3"])),
        seg("non_english", "fortunes-ga:proverbs", "ga",
            fortunes("/usr/share/games/fortunes/ga/proverbs", 2, 1900)),
        seg("non_english", "zamenhof-proverbaro", "eo",
            fortunes("/usr/share/games/fortunes/eo/proverbaro", 40, 2000)),
    ]


# ---------------------------------------------------------------- chat (original text)

S, U, A = "system", "user", "assistant"

CHATS = [
    [(S, "You are a helpful programming assistant. Answer concisely and show code when it helps."),
     (U, "My C++ program crashes sometimes. I keep a reference to the first element of a "
         "std::vector<int>, then push_back more values, then read through the reference. Why "
         "would that crash?"),
     (A, "When push_back needs more room than the vector's current capacity, the vector "
         "allocates a new, larger buffer, moves the elements there and frees the old one. Any "
         "reference, pointer or iterator into the old buffer now dangles, and reading through it "
         "is undefined behaviour: sometimes you see the old value, sometimes garbage, sometimes "
         "a crash.\n\nTwo common fixes:\n\n```cpp\nstd::vector<int> v{1, 2, 3};\n"
         "v.reserve(100);        // no reallocation until size() exceeds 100\nint& first = v[0];\n"
         "v.push_back(4);        // first is still valid here\n```\n\nor keep an index instead "
         "of a reference:\n\n```cpp\nstd::size_t first = 0;\nv.push_back(4);\n"
         "std::cout << v[first] << '\\n';\n```\n\nAn index stays meaningful across "
         "reallocations; a reference does not."),
     (U, "Does the same thing happen with std::deque?"),
     (A, "Partly. Inserting at either end of a std::deque invalidates all iterators, but "
         "references and pointers to existing elements stay valid, because a deque never moves "
         "its elements when it grows at the ends. Inserting in the middle invalidates both. So a "
         "deque is a reasonable choice when you need stable references and only add at the "
         "front or back.")],
    [(U, "Can you explain how a hash table deals with two keys that land in the same bucket?"),
     (A, "That situation is called a collision, and there are two classic ways to handle it.\n\n"
         "1. Separate chaining: each bucket holds a small list. Colliding keys are appended to "
         "the list, and a lookup hashes the key, goes to the bucket and compares keys along the "
         "list until it finds a match.\n2. Open addressing: all entries live in the array itself. "
         "If the bucket is taken, the table probes other slots in a fixed order (the next slot, "
         "or a quadratic or second-hash step) until it finds the key or an empty slot.\n\nBoth "
         "stay fast only while the table is not too full. That is why implementations track the "
         "load factor, the number of entries divided by the number of buckets, and grow and "
         "rehash the table when it passes a threshold such as 0.75."),
     (U, "Why does deleting get tricky with open addressing?"),
     (A, "Because an empty slot ends a probe sequence. If you simply clear a deleted entry, a "
         "later lookup for a key that had been pushed past it stops early and reports the key as "
         "missing. Tables therefore leave a marker, often called a tombstone, that lookups skip "
         "over but inserts may reuse; the tombstones are cleared the next time the table is "
         "rebuilt.")],
    [(U, "A shop sells a jacket for $80. It is discounted by 25%, and then a 10% sales tax is "
         "added to the discounted price. What do I pay?"),
     (A, "Step by step:\n\n- Discount: 25% of $80 is $20, so the price becomes $80 - $20 = $60.\n"
         "- Tax: 10% of $60 is $6.\n- Total: $60 + $6 = $66.\n\nYou pay $66. A quick check: "
         "the two changes multiply, 80 x 0.75 x 1.10 = 66."),
     (U, "Would it be different if the tax were added first and the discount applied after?"),
     (A, "No. Tax first gives 80 x 1.10 = 88, and the discount then gives 88 x 0.75 = 66. "
         "Percentage changes are multiplications, and multiplication does not care about order, "
         "so you still pay $66.")],
    [(S, "You are a friendly assistant for everyday questions."),
     (U, "I bought a big bunch of fresh basil and coriander for a recipe but only need a little. "
         "How do I keep the rest from wilting?"),
     (A, "Treat soft herbs like cut flowers. Trim the stems, stand them in a glass with a few "
         "centimetres of water and loosely cover the leaves with a plastic bag. Keep coriander in "
         "the fridge this way. Basil dislikes the cold, so leave its glass on the kitchen counter "
         "out of direct sun. Change the water every couple of days and they will usually last "
         "about a week."),
     (U, "And if I still can't use it all in time?"),
     (A, "Chop the leaves, pack them into an ice-cube tray, cover with olive oil or water and "
         "freeze. The cubes drop straight into soups, sauces and stir-fries. You can also blend "
         "basil into a quick pesto, which keeps in the fridge for a few days under a thin layer "
         "of oil.")],
    [(U, "I have a table orders(id, customer_id, total, created_at). How do I get the three "
         "customers who spent the most in 2023?"),
     (A, "Filter the year, group by customer, sum and sort:\n\n```sql\nSELECT customer_id,\n"
         "       SUM(total) AS spent\nFROM orders\nWHERE created_at >= '2023-01-01'\n"
         "  AND created_at <  '2024-01-01'\nGROUP BY customer_id\nORDER BY spent DESC\n"
         "LIMIT 3;\n```\n\nUsing a half-open date range instead of a function such as "
         "YEAR(created_at) lets the database use an index on created_at."),
     (U, "Now I want the top customer for each month."),
     (A, "Rank customers within each month with a window function and keep rank 1:\n\n```sql\n"
         "WITH monthly AS (\n  SELECT date_trunc('month', created_at) AS month,\n"
         "         customer_id,\n         SUM(total) AS spent\n  FROM orders\n"
         "  GROUP BY 1, 2\n), ranked AS (\n  SELECT *, RANK() OVER (PARTITION BY month "
         "ORDER BY spent DESC) AS r\n  FROM monthly\n)\nSELECT month, customer_id, spent\n"
         "FROM ranked\nWHERE r = 1\nORDER BY month;\n```\n\ndate_trunc is PostgreSQL syntax; in "
         "MySQL use DATE_FORMAT(created_at, '%Y-%m-01'). RANK keeps ties, so a month can list "
         "two customers; use ROW_NUMBER if you want exactly one.")],
    [(U, "How can I delete log files older than 30 days from /var/log/myapp without "
         "accidentally removing something else?"),
     (A, "Use find, and look before you delete:\n\n```sh\n# 1. list what would go\n"
         "find /var/log/myapp -type f -name '*.log' -mtime +30 -print\n\n"
         "# 2. when the list looks right, delete\n"
         "find /var/log/myapp -type f -name '*.log' -mtime +30 -delete\n```\n\n-type f skips "
         "directories, -name limits it to log files, and -mtime +30 matches files last modified "
         "more than 30 whole days ago. Keep -delete last: find evaluates its expression left to "
         "right, so putting it first would delete everything it visits."),
     (U, "Can I run that every night automatically?"),
     (A, "Yes, with a cron entry. Run crontab -e as a user allowed to delete those files and add:"
         "\n\n```\n15 3 * * * find /var/log/myapp -type f -name '*.log' -mtime +30 -delete\n"
         "```\n\nThat runs at 03:15 every day. If the system already uses logrotate, a rule "
         "with maxage 30 in /etc/logrotate.d/myapp is the more conventional way to do it.")],
    [(U, "Why do leaves turn red and yellow in autumn?"),
     (A, "The yellow and orange were there all summer. Leaves contain carotenoids, the same "
         "pigments that colour carrots, but the much larger amount of green chlorophyll hides "
         "them. As days shorten and nights cool, the tree stops making chlorophyll and breaks "
         "down what is left to recover its nitrogen, so the yellow shows through.\n\nRed is "
         "different: many trees actively make new pigments called anthocyanins in autumn, "
         "especially after sunny days and cool nights. They are thought to shield the leaf while "
         "the tree pulls nutrients back out of it. That is why a bright, dry autumn gives the "
         "most vivid reds."),
     (U, "So a rainy autumn means duller colours?"),
     (A, "Usually, yes. Overcast weather means less sugar is made in the leaves, and less sugar "
         "means less anthocyanin, so reds are weaker. Heavy rain and wind also strip leaves "
         "before they reach their full colour. An early hard frost can end the show quickly "
         "too.")],
    [(S, "You are a patient maths tutor. Show your reasoning."),
     (U, "If I roll two fair dice, what is the probability that the total is 7?"),
     (A, "There are 6 x 6 = 36 equally likely outcomes. The pairs that add up to 7 are (1,6), "
         "(2,5), (3,4), (4,3), (5,2) and (6,1): six of them. So the probability is 6/36 = 1/6, "
         "about 16.7%. Seven is the most likely total, because every value of the first die "
         "has exactly one partner that makes 7."),
     (U, "And the probability of at least one six?"),
     (A, "It is easiest to count the opposite. The chance that neither die shows a six is "
         "5/6 x 5/6 = 25/36. So the chance of at least one six is 1 - 25/36 = 11/36, about "
         "30.6%. Adding 1/6 + 1/6 would give 12/36, which counts the double six twice.")],
    [(U, "Rust says \"cannot borrow `v` as mutable because it is also borrowed as immutable\" "
         "for this:\n\n```rust\nlet mut v = vec![1, 2, 3];\nlet first = &v[0];\nv.push(4);\n"
         "println!(\"{}\", first);\n```\nWhat is wrong?"),
     (A, "`first` is a shared borrow of `v`, and it is still alive at the println!. While a "
         "shared borrow is alive, Rust will not let you take the mutable borrow that push "
         "needs, because push may reallocate the vector and leave `first` pointing at freed "
         "memory. The compiler is preventing exactly the bug that C++ would let you write.\n\n"
         "Fix it by ending the borrow before the push, or by copying the value:\n\n```rust\n"
         "let mut v = vec![1, 2, 3];\nlet first = v[0]; // i32 is Copy, so this is a copy\n"
         "v.push(4);\nprintln!(\"{}\", first);\n```"),
     (U, "What if the element is a String, which is not Copy?"),
     (A, "Then clone it, `let first = v[0].clone();`, or keep the index and look it up after "
         "the push: `println!(\"{}\", v[0]);`. Cloning costs an allocation; the index costs "
         "nothing but only works if you do not need the value to survive later changes to the "
         "vector.")],
    [(U, "Please make this email to my landlord sound polite but firm: \"The heating has been "
         "broken for two weeks. Fix it now.\""),
     (A, "Here is a version you could send:\n\nDear Ms Alvarez,\n\nI am writing about the "
         "heating in flat 4, which has not worked since the 3rd of this month. I reported it by "
         "phone on the 4th, but it has not yet been repaired, and the flat is now very cold in "
         "the evenings.\n\nCould you please arrange for an engineer to visit this week? I am at "
         "home after 5 pm on weekdays and can also give access on Saturday morning.\n\nThank you "
         "for your help.\n\nKind regards,\nSam"),
     (U, "Good. Can you make it a bit shorter?"),
     (A, "Dear Ms Alvarez,\n\nThe heating in flat 4 has not worked since the 3rd, and it is "
         "still broken after my call on the 4th. Could you please have it repaired this week? I "
         "am in after 5 pm on weekdays and on Saturday morning.\n\nThank you,\nSam")],
    [(U, "What is the derivative of x^2 * sin(x)?"),
     (A, "Use the product rule, (fg)' = f'g + fg', with f = x^2 and g = sin(x):\n\n"
         "- f' = 2x\n- g' = cos(x)\n\nSo the derivative is 2x sin(x) + x^2 cos(x)."),
     (U, "Where is that zero on the interval from 0 to 1?"),
     (A, "Set 2x sin(x) + x^2 cos(x) = 0. Factor out x: x (2 sin(x) + x cos(x)) = 0. So x = 0 "
         "is one solution. For 0 < x <= 1, both sin(x) and cos(x) are positive, so 2 sin(x) + "
         "x cos(x) > 0 and there is no other zero. On [0, 1] the derivative vanishes only at "
         "x = 0, and the function is increasing on the rest of the interval.")],
]


def chat():
    out = []
    for i, turns in enumerate(CHATS):
        out.append({"kind": "chat", "source": f"original-chat-{i + 1:02d}", "language": "en",
                    "turns": [{"role": r, "content": c} for r, c in turns]})
    return out


# ---------------------------------------------------------------- assembly

def segment_bytes(s):
    if s["kind"] == "chat":
        return sum(len(t["content"].encode("utf-8")) for t in s["turns"])
    return len(s["text"].encode("utf-8"))


def build():
    # Interleave the kinds so that any prefix of the file is already a mix.
    groups = [prose(), code(), chat(), non_english()]
    segments = []
    for i in range(max(len(g) for g in groups)):
        for g in groups:
            if i < len(g):
                segments.append(g[i])
    for s in segments:
        n = segment_bytes(s)
        if n > MAX_SEGMENT:
            raise SourceError(f"segment {s['source']} is {n} bytes, over {MAX_SEGMENT}")
    body = "".join(json.dumps(s, ensure_ascii=False) + "\n" for s in segments)
    return segments, body.encode("utf-8")


def summary(segments, data):
    kinds, sources = {}, {}
    for s in segments:
        n = segment_bytes(s)
        kinds[s["kind"]] = kinds.get(s["kind"], 0) + n
        key = (s["kind"], s["source"].split(":")[0], s["language"])
        sources[key] = sources.get(key, 0) + n
    total = sum(kinds.values())
    lines = [f"segments: {len(segments)}, text bytes: {total}, file bytes: {len(data)}"]
    for k, n in kinds.items():
        lines.append(f"  {k:12s} {n:6d} bytes  {100.0 * n / total:5.1f} %")
    for (k, src, lang), n in sources.items():
        lines.append(f"    {k:12s} {src:28s} {lang:11s} {n:6d}")
    lines.append(f"sha256: {hashlib.sha256(data).hexdigest()}  calibration.jsonl")
    return "\n".join(lines)


def main():
    global IGNORE_HASHES
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-o", "--out", default=DEFAULT_OUT)
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--ignore-source-hashes", action="store_true")
    args = ap.parse_args()
    IGNORE_HASHES = args.ignore_source_hashes
    try:
        segments, data = build()
    except SourceError as e:
        sys.exit(f"make_calibration: {e}")
    print(summary(segments, data))
    if args.check:
        try:
            with open(args.out, "rb") as f:
                old = f.read()
        except OSError as e:
            sys.exit(f"make_calibration: cannot read {args.out}: {e}")
        if old != data:
            sys.exit(f"make_calibration: {args.out} differs from the rebuilt corpus")
        print(f"make_calibration: {args.out} is up to date")
        return
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "wb") as f:
        f.write(data)
    print(f"make_calibration: wrote {args.out}")


if __name__ == "__main__":
    main()
