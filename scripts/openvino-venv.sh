#!/usr/bin/env bash
# Makes the virtual environment in which `dynaspec bench` exports a model folder to OpenVINO IR
# (optimum-cli export openvino) for its openvino-* peers (benchmarks/README.md, "Other engines
# as peers").
# It stays apart from the main install: optimum-intel 2.2 pins transformers < 5.6 and pulls in
# torchvision, whose PyPI build is made for another torch and makes the export fail, so the
# torchvision that matches torch 2.13 is let in for the resolver and removed again (nothing the
# export of a text model runs imports it). The generation itself runs in the main install
# (pip install -e ".[openvino]": openvino-genai needs neither torch nor transformers).
#
#   bash scripts/openvino-venv.sh [VENV]   (default $DYNASPEC_CACHE or ~/.cache/dynaspec, then
#                                           venvs/openvino-export; about 3 minutes, 2 GB)
#   DYNASPEC_OPENVINO_EXPORT_PYTHON=VENV/bin/python   tells the bench where it is, when not there
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${1:-${DYNASPEC_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/dynaspec}/venvs/openvino-export}"
"${PYTHON:-python3}" -m venv "$venv"
pip="$venv/bin/pip"
"$pip" install -q --upgrade pip
"$pip" install -q torch==2.13.0
"$pip" install -q torch==2.13.0 "transformers==${OPENVINO_TRANSFORMERS_VERSION:-5.5.4}" \
  "optimum-intel[openvino]==${OPTIMUM_INTEL_VERSION:-2.2.0}" \
  "openvino==2026.4.1" "openvino-tokenizers==2026.4.1.0" "nncf==3.4.0" "optimum==2.3.0"
"$pip" uninstall -q -y torchvision torchaudio torchcodec || true
"$venv/bin/python" -c "import optimum.intel, openvino, torch, transformers; \
print('openvino', openvino.__version__, 'torch', torch.__version__, \
'transformers', transformers.__version__, 'ok')"
echo "ready: $venv/bin/python"
