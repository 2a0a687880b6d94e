#!/usr/bin/env bash
# Installs dependencies, builds bitsplit, converts the bundled default model into its bit-split
# form (2-bit draft plane + 8-bit residual plane) and runs it with speculative decoding:
# prints the generated text (stdout), then the speed and acceptance statistics (stderr).
# Then, with the bundled fine-tune (bible-devil), stores it as a 1-bit BitDelta of the base and
# runs that variant on the same converted base.
# Extra arguments are passed to `bitsplit run` (e.g. -n 200 --temp 0.7).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
cmake -S . -B build -G Ninja >/dev/null
cmake --build build -j "$(nproc)" --target bitsplit

model=""
for candidate in tests/models/bible-base.gguf ../shared/models/stories260K.gguf; do
  if [ -f "$candidate" ]; then model=$candidate; break; fi
done
if [ -z "$model" ]; then
  echo "demo: no bundled model found (tests/models/bible-base.gguf or ../shared/models/stories260K.gguf)" >&2
  exit 1
fi
case "$model" in
  *stories260K*) prompt="Once upon a time" ;;
  *) prompt="And it came to pass, when the king of Israel" ;;
esac
mkdir -p build/demo
converted=build/demo/$(basename "$model" .gguf).bitsplit.gguf
echo "demo: ./build/bitsplit convert $model $converted" >&2
./build/bitsplit convert "$model" "$converted"
echo "demo: ./build/bitsplit run -m $converted -p \"$prompt\" -n 128 --temp 0 $*" >&2
./build/bitsplit run -m "$converted" -p "$prompt" -n 128 --temp 0 "$@"

finetune=tests/models/bible-devil.gguf
if [ "$model" = tests/models/bible-base.gguf ] && [ -f "$finetune" ]; then
  delta=build/demo/bible-devil.delta.gguf
  echo >&2
  echo "demo: ./build/bitsplit delta --base $model --finetuned $finetune -o $delta" >&2
  ./build/bitsplit delta --base "$model" --finetuned "$finetune" -o "$delta"
  echo "demo: ./build/bitsplit run -m $converted --delta devil=$delta --variant devil -p \"The devil\" -n 96 --temp 0 $*" >&2
  ./build/bitsplit run -m "$converted" --delta devil="$delta" --variant devil -p "The devil" -n 96 --temp 0 "$@"
fi
