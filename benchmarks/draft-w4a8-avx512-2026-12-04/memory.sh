#!/usr/bin/env bash
# Peak resident memory (GNU time's "Maximum resident set size") and wall time of
# `dynaspec generate` with the settings whose draft is now all 4-bit, warm model cache,
# 32 new tokens, one prompt (as benchmarks/memory-avx512-2026-12-04/run.sh).
# Usage: memory.sh
set -euo pipefail
prompt="Write a Python function that reverses a string."
settings=(
  "--quantize w4a8 --draft-quantize w4a8"
  "--quantize w8a8 --draft-quantize w4a8"
  "--quantize int8 --draft-quantize int4"
  "--static --draft-quantize w4a8"
)
for flags in "${settings[@]}"; do
  log=$(mktemp)
  /usr/bin/time -v dynaspec generate $flags --max-new-tokens 32 "$prompt" >"$log" 2>&1
  peak=$(awk -F': ' '/Maximum resident/ {printf "%.2f", $2 / 1e6}' "$log")
  wall=$(awk -F': ' '/Elapsed \(wall/ {print $2}' "$log")
  printf '%s\t%s GB\t%s\n' "$flags" "$peak" "$wall"
  rm -f "$log"
done
