#!/usr/bin/env bash
# Checks the rule of bitsplit/isa_target.h on built objects: no weak (vague-linkage) function in a
# kernel tier's object file — an inline function or template instantiation from a shared header,
# of which the linker keeps one copy for the whole program — may hold an instruction beyond the
# build's x86-64 baseline (VEX/EVEX vector ops, mask registers, AMX tiles). Such a copy, if the
# linker keeps it, makes generic code stop with SIGILL on a machine without that tier.
# Usage: isa_weak_symbols.sh OBJECT...   (ctest passes the tier objects of bitsplit_cpu and
# bitsplit_quant; exits 77, skipped, without objdump and nm.)
set -euo pipefail
# Exit 77 (ctest: skipped) without binutils rather than pass without looking.
command -v objdump >/dev/null && command -v nm >/dev/null || { echo "objdump/nm not found: nothing checked"; exit 77; }
bad=0 checked=0
for obj in "$@"; do
  # Defined weak symbols (W: weak function or object, V: weak object, u: unique global).
  weak=$(nm --defined-only "$obj" | awk '$2 == "W" || $2 == "V" || $2 == "u" {print $3}' | sort -u)
  [ -n "$weak" ] || { checked=$((checked + 1)); continue; }
  # Each function's disassembly, one "symbol<TAB>mnemonic" line per instruction.
  found=$(objdump -d --no-show-raw-insn "$obj" | awk -v weak="$weak" '
    BEGIN { n = split(weak, w, "\n"); for (i = 1; i <= n; ++i) is_weak[w[i]] = 1 }
    /^[0-9a-f]+ <.*>:$/ { fn = substr($2, 2, length($2) - 3); next }
    /^ +[0-9a-f]+:\t/ {
      split($0, part, "\t"); split(part[2], op, " "); m = op[1]
      if (fn in is_weak && (m ~ /^(v|k)/ || m ~ /tile|^tdp/)) { print fn "\t" m; }
    }' | sort -u)
  checked=$((checked + 1))
  if [ -n "$found" ]; then
    bad=1
    echo "FAIL $obj: weak functions compiled beyond the baseline (move the header include above" \
         "BITSPLIT_TARGET_BEGIN, or the helper into the tier's unnamed namespace):"
    echo "$found" | cut -f1 | sort -u | sed 's/^/  /' | { command -v c++filt >/dev/null && c++filt || cat; }
  fi
done
echo "checked $checked tier objects"
exit $bad
