#!/usr/bin/env bash
# agl on one CUDA device: the GPU tests, the quickstart on CUDA, and the torch benchmark.
#
# Usage: bash benchmarks/gpu.sh RESULTS_DIR
#
# Needs an environment with agl-core, agl-torch and agl-verl installed (CUDA torch), run from
# the repository's root. Writes to RESULTS_DIR: gpu.txt (the device), pytest.log (`pytest -m
# gpu tests/torch tests/verl`), quickstart.log + reward.png + metrics.jsonl (a 30-step
# quickstart on CUDA, run while the tests run), torch_loop.txt (the benchmark on the
# quickstart's model) and torch_loop_24x1024.txt (on a 24-layer, 1024-wide model), each
# benchmark alone on the device. Each part has a time limit; the script goes on past a
# failed part and exits non-zero if any failed.
set -uo pipefail
out=${1:?usage: bash benchmarks/gpu.sh RESULTS_DIR}
python=${PYTHON:-python3}
mkdir -p "$out"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
status=0

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv >"$out/gpu.txt" 2>&1
"$python" -c 'import torch; print("torch", torch.__version__, torch.cuda.get_device_name())' \
    >>"$out/gpu.txt" 2>&1

# 1. The GPU tests and, beside them, the quickstart (CPU figures: README's quickstart section).
#    -p no:warnings: the device's library versions differ from the lock's, and their warnings
#    are not what is tested here.
timeout 480 "$python" -m pytest -m gpu tests/torch tests/verl -p no:warnings \
    -p no:cacheprovider -s -v --durations=0 >"$out/pytest.log" 2>&1 &
tests=$!
started=$(date +%s)
timeout 480 "$python" -m agl_torch.quickstart --device cuda --run-dir "$work/quickstart" \
    --quiet >"$out/quickstart.log" 2>&1 || status=1
echo "quickstart wall time: $(($(date +%s) - started)) s (beside the tests)" >>"$out/quickstart.log"
cp "$work/quickstart/reward.png" "$work/quickstart/metrics.jsonl" "$out/" 2>/dev/null || status=1
wait "$tests" || status=1

# 2. The benchmark, alone on the device.
timeout 240 "$python" benchmarks/torch_loop.py --device cuda >"$out/torch_loop.txt" 2>&1 \
    || status=1
timeout 240 "$python" benchmarks/torch_loop.py --device cuda --layers 24 --width 1024 \
    --steps 0 >"$out/torch_loop_24x1024.txt" 2>&1 || status=1
exit "$status"
