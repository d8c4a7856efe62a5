#!/usr/bin/env bash
# Peak resident memory (GNU time's "Maximum resident set size") and wall time of
# `dynaspec generate` with each fast setting, warm model cache, 32 new tokens, one prompt.
# Usage: run.sh LABEL [SRC]  (SRC: a checkout's src/ put first on PYTHONPATH; default: installed)
set -euo pipefail
label=$1
src=${2:-}
prompt="Write a Python function that reverses a string."
settings=(
  ""
  "--quantize int8 --draft-quantize int8"
  "--quantize int8 --draft-quantize int4"
  "--quantize int4 --draft-quantize int8"
  "--static --draft-quantize int8"
  "--static --draft-quantize int4"
)
for flags in "${settings[@]}"; do
  log=$(mktemp)
  PYTHONPATH=$src /usr/bin/time -v dynaspec generate $flags --max-new-tokens 32 "$prompt" \
    >"$log" 2>&1
  peak=$(awk -F': ' '/Maximum resident/ {printf "%.2f", $2 / 1e6}' "$log")
  wall=$(awk -F': ' '/Elapsed \(wall/ {print $2}' "$log")
  speed=$(grep -o "([0-9.]* tok/s)" "$log" | head -1 || true)
  printf '%s\t%s\t%s GB\t%s\t%s\n' "$label" "${flags:-(eager bf16 pair)}" "$peak" "$wall" "$speed"
  rm -f "$log"
done
