#!/usr/bin/env bash
# The GPU half of docs/benchmarks.md, in one go (about 9 minutes on one H200 for all steps):
#   1. the CUDA tests (tests/test_cuda.py, the CUDA hash test),
#   2. generation overhead on the tiny backbone and on 8B-class backbones (LLaDA-8B / Dream-7B shapes,
#      bf16, random weights), DMARK-style at full V (its table fits in GPU memory),
#   3. the scaling sweeps on the LLaDA-8B-shaped backbone,
#   4. detection throughput with the hashing on the GPU.
# Every step has its own time limit and a failing step does not stop the others; the JSON files and
# one log (steps.log) land in the output folder (default docs/benchmarks/gpu).
#
# Usage: bash scripts/gpu_benchmarks.sh [OUT_DIR]      (STEPS="lrdwm_full detection" runs only those)
# A machine whose transformers is older than the package needs can install wheels first: put them in
# .whl/ and they are installed into /tmp/site (no network needed).
set -u
out="${1:-docs/benchmarks/gpu}"
mkdir -p "$out"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
export HF_HOME="${HF_HOME:-$(mktemp -d)}"
if compgen -G ".whl/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH="/tmp/site:${PYTHONPATH:-}"
fi
export PYTHONPATH="$PWD:${PYTHONPATH:-}"
py=python3

step() {  # step NAME SECONDS COMMAND...
  local name="$1" limit="$2"
  shift 2
  local t0=$SECONDS
  echo "=== $name (limit ${limit}s)" | tee -a "$out/steps.log"
  timeout "$limit" "$@" >"$out/$name.tmp" 2>&1
  local rc=$?
  cat "$out/$name.tmp" >>"$out/steps.log"
  echo "=== $name: rc=$rc in $((SECONDS - t0))s" | tee -a "$out/steps.log"
  tail -n 25 "$out/$name.tmp"
  rm -f "$out/$name.tmp"
}

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
$py -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__, torch.cuda.get_device_name(0))"

want() { [[ " ${STEPS} " == *" $1 "* ]]; }
STEPS="${STEPS:-pytest_cuda overhead_tiny overhead_full lrdwm_tiny lrdwm_full scaling_full detection}"

want pytest_cuda && step pytest_cuda 40 $py -m pytest -q -p no:cacheprovider tests/test_cuda.py tests/test_hashing.py
# Every method side by side (3 repetitions each); DMARK's table at full V.
want overhead_tiny && step overhead_tiny 120 $py scripts/bench_overhead.py --device cuda --in-process \
  --backbone tiny --reps 3 --prompts 2 --dmark-vocab full --per-call-methods '' --out "$out/overhead_tiny.json"
want overhead_full && step overhead_full 180 $py scripts/bench_overhead.py --device cuda --in-process \
  --backbone full --reps 3 --prompts 1 --dmark-vocab full --per-call-methods '' --out "$out/overhead_full.json"
# LR-DWM against vanilla alone, 8 alternating repetitions: the ratio to a percent.
want lrdwm_tiny && step lrdwm_tiny "${TINY_LIMIT:-70}" $py scripts/bench_overhead.py --device cuda --in-process \
  --backbone tiny --methods vanilla,lrdwm --reps "${LRDWM_REPS:-8}" --prompts 2 --dmark-vocab 0 --per-call-methods '' \
  --out "$out/lrdwm_tiny.json"
want lrdwm_full && step lrdwm_full "${FULL_LIMIT:-150}" $py scripts/bench_overhead.py --device cuda --in-process \
  --backbone full --methods vanilla,lrdwm --reps "${LRDWM_REPS:-8}" --prompts 1 --dmark-vocab 0 --per-call-methods '' \
  --out "$out/lrdwm_full.json"
want scaling_full && step scaling_full 110 $py scripts/bench_scaling.py --device cuda --in-process \
  --backbone full --reps 2 --prompts 1 --out "$out/scaling_full.json"
want detection && step detection 40 $py scripts/bench_detection.py --device cuda --repeats 3 --kgw-rows 4 \
  --out "$out/detection.json"
echo "done in ${SECONDS}s"
