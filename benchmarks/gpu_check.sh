#!/usr/bin/env bash
# The GPU checks of issue 16, for a machine with an NVIDIA GPU, CuPy and numba-cuda (the lent
# device machines have cupy-cuda13x, numba-cuda, PyTorch with CUDA, and no network). Run from
# the repository root, with the data packed by benchmarks/gpu_data.py in .gpu-data/:
#
#   here:   python benchmarks/gpu_data.py .gpu-data && echo /.gpu-data/ >> .git/info/exclude
#   there:  bash benchmarks/gpu_check.sh tests      # 1. the GPU tests        (~3 min)
#           bash benchmarks/gpu_check.sh train      # 2. every seed preset    (~5 min)
#           bash benchmarks/gpu_check.sh bench      # 3. BENCHMARKS.md's table (~6 min)
#
# (with the device tool: run(command="bash benchmarks/gpu_check.sh tests", carry=[".gpu-data"]),
# one call per step, each under the tool's 10 minutes). Results go to $OUT (the device tool's
# folder that comes back) or gpu-results/. tapegrad needs numpy, numba, safetensors, tqdm and
# psutil there (all present on the device machines); pooch is only imported to download.
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 TAPEGRAD_OFFLINE=1
export TAPEGRAD_DATA="${TAPEGRAD_DATA:-$PWD/.gpu-data}"
PY="${PYTHON:-python3}"
RESULTS="${OUT:-gpu-results}"
mkdir -p "$RESULTS"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$RESULTS/gpu.txt"
"$PY" -c "import cupy, numba, numba.cuda as c; print('cupy', cupy.__version__, 'numba', numba.__version__, 'cuda available', c.is_available())" | tee -a "$RESULTS/gpu.txt"

case "${1:-all}" in
tests | all)
    "$PY" -m pytest -q -rs -p no:cacheprovider tests/gpu tests/test_cudasim.py 2>&1 | tee "$RESULTS/tests.log"
    ;;&
train | all)
    for preset in seed-cnn seed-rnn seed-rnn-lr0.2 text-cnn text-cnn-learned mlp; do
        "$PY" -m tapegrad train "$preset" --device cuda --json "$RESULTS/$preset.json"
    done 2>&1 | tee "$RESULTS/train.log"
    "$PY" benchmarks/gpu_accuracy.py "$RESULTS"/*.json | tee "$RESULTS/accuracy.md"
    ;;&
bench | all)
    "$PY" benchmarks/gpu_bench.py --markdown "$RESULTS/gpu_table.md" 2>&1 | tee "$RESULTS/bench.log"
    ;;
esac
