#!/usr/bin/env bash
# Peak resident memory (GNU time's "Maximum resident set size", mapped model pages included)
# and wall time of `dynaspec generate` with each setting, warm model cache, 32 new tokens, one
# prompt; one JSON line per setting on stdout (the records `dynaspec results` reads).
# Usage: benchmarks/memory/run.sh > benchmarks/memory/<cpu>-<date>/memory.jsonl
set -euo pipefail
prompt="Write a Python function that reverses a string."
settings=(
  ""
  "--quantize int8 --draft-quantize int8"
  "--quantize int8 --draft-quantize int4"
  "--quantize int4 --draft-quantize int8"
  "--quantize w4a8 --draft-quantize w4a8"
  "--quantize w8a8 --draft-quantize w4a8"
  "--static --draft-quantize int8"
  "--static --draft-quantize w4a8"
)
machine=$(python -c "import json; from dynaspec.eval.provenance import machine_info; print(json.dumps(machine_info()))")
sha=$(git rev-parse HEAD)
dirty=$([ -z "$(git status --porcelain)" ] && echo false || echo true)
for flags in "${settings[@]}"; do
  log=$(mktemp)
  started=$(date -u +%Y-%m-%dT%H:%M:%S+00:00)
  /usr/bin/time -v dynaspec generate $flags --max-new-tokens 32 "$prompt" >"$log" 2>&1
  peak=$(awk -F': ' '/Maximum resident/ {printf "%.2f", $2 / 1e6}' "$log")
  wall=$(awk -F': ' '/Elapsed \(wall/ {print $2}' "$log")
  FLAGS="$flags" PROMPT="$prompt" PEAK="$peak" WALL="$wall" STARTED="$started" MACHINE="$machine" \
    SHA="$sha" DIRTY="$dirty" python - <<'PY'
import json, os, shlex
flags = os.environ["FLAGS"]
command = " ".join(x for x in ["dynaspec generate", flags, "--max-new-tokens 32",
                               shlex.quote(os.environ["PROMPT"])] if x)
print(json.dumps({
    "kind": "memory", "flags": flags, "command": command,
    "peak_rss_gb": float(os.environ["PEAK"]), "wall": os.environ["WALL"],
    "started_at": os.environ["STARTED"],
    "git": {"sha": os.environ["SHA"], "dirty": os.environ["DIRTY"] == "true"},
    "machine": json.loads(os.environ["MACHINE"]),
}))
PY
  rm -f "$log"
done
