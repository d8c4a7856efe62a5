#!/usr/bin/env bash
# The GPU check (issue 63) in one command: the tests marked cuda, the graph path's T(n) per
# bucket, the draft's step, per-round overheads and batch costs (1-32 rows) for the four pairs
# of real shapes (random weights), the eager models if time is left, and both projections
# over the real pair's acceptance traces. Under 8 minutes on one H100/H200.
#
#   scripts/gpu-check.sh [FOLDER]          on a GPU machine (default benchmarks/gpu/<gpu>-<date>)
#   scripts/gpu-check.sh --dry-run FOLDER  the same code on the CPU with tiny shapes (CI)
#
# Needs no install and no package registry: it runs the source tree (PYTHONPATH=src) with the
# Python it finds, which must have torch (with CUDA, except --dry-run), transformers 5.x,
# numpy, safetensors and tqdm; pytest for the tests marked cuda (without it the tests are
# recorded as not run and everything else still runs). Where $OUT is set (the device tool's
# folder that comes back), the results are copied there too. Commit the folder afterwards:
#   git add benchmarks/gpu/<folder> && git commit -m "benchmarks/gpu: <gpu> graph path"
set -euo pipefail
cd "$(dirname "$0")/.."

python="${PYTHON:-python3}"
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
dry=()
if [[ "${1:-}" == "--dry-run" ]]; then
  dry=(--dry-run --skip-tests)
  shift
fi

"$python" - <<'EOF'
import importlib.util, sys
missing = [m for m in ("torch", "transformers", "numpy", "safetensors", "tqdm")
           if importlib.util.find_spec(m) is None]
if missing:
    sys.exit(f"gpu-check: missing Python packages {missing}: install them first")
if importlib.util.find_spec("pytest") is None:
    print("gpu-check: no pytest here: the tests marked cuda will be recorded as not run")
import torch
print(f"gpu-check: torch {torch.__version__}, CUDA {torch.version.cuda}, "
      f"GPU {torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'none'}")
EOF

if [[ ${#dry[@]} -eq 0 ]]; then
  # "NVIDIA H100 80GB HBM3" -> h100 (the first word of a letter and digits), else the name
  gpu="$("$python" -c 'import re, torch; name = torch.cuda.get_device_name(0)
found = re.search(r"\b[A-Za-z]+\d+[A-Za-z]*\b", name.replace("NVIDIA", ""))
print((found.group(0) if found else re.sub(r"\W+", "-", name)).lower())')"
  out="${1:-benchmarks/gpu/${gpu}-$(date -u +%Y-%m-%d)}"
  budget=330  # seconds of measuring; the projections and the start add about a minute
else
  out="${1:?--dry-run needs a folder}"
  budget=120
fi
mkdir -p "$out"
# Whatever happens next, what was written comes back with the device tool's $OUT.
trap '[[ -n "${OUT:-}" && -d "${OUT:-}" ]] && cp -r "$out" "$OUT/"' EXIT

"$python" -m dynaspec devicecheck "${dry[@]}" --out "$out" --budget-s "$budget"
"$python" -m dynaspec project --costs "$out/devicecheck.json" --variant graphs \
  --out "$out/projection-graphs" > /dev/null
# The eager variant, where the budget left time for it (the graph variant came first).
if "$python" -c 'import json, sys; pairs = json.load(open(sys.argv[1]))["pairs"]
sys.exit(not any("costs" in p["variants"].get("eager", {}) for p in pairs))' \
  "$out/devicecheck.json"; then
  "$python" -m dynaspec project --costs "$out/devicecheck.json" --out "$out" > /dev/null
fi
echo "gpu-check: results in $out (devicecheck.md, projection-graphs/projection.md)"
