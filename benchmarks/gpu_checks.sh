#!/usr/bin/env bash
# The GPU checks of a session lent a GPU, as one call on the device machine (step 3 of
# ../shared/gpu/README.md, after call 1 unpacked TVM into /root/site):
#
#   bash benchmarks/gpu_checks.sh [SECONDS [STEP...]]   (default 500 s, every step)
#
# SECONDS bounds the whole call; STEP names pick steps (test_gpu, orchestrate_real,
# search_cost_simulated, search_cost_512, search_threads), in this file's order. All five took
# about 870 s on the H200's host, more than one device call may run (600 s): name the steps
# of each call, as the session of 2026-11-26 did (orchestrate_real search_cost_simulated in
# 490 s, then search_cost_512 in 345 s).
#
# Steps, in order, each cut to the time left (on the lent H200's host, 2026-11-26: test_gpu
# 125 s; orchestrate_real 238 s; the simulated runs 112-141 s at 192 trials, 237 s at 512;
# search_threads 126 s):
#   1. tests/test_gpu.py on the real GPU;
#   2. an `orchestrate` run of vggish on the real GPU, 4 minutes of wall (it refuses 2: the
#      untuned baseline, compile and check were forecast at 2m27s there): what tuning buys over
#      TVM's untuned kernels, and the search's share with real timings;
#   3. search_cost.py --simulate: the search's share of a CUDA run on this host's cores
#      (vggish, 192 trials, seed 1, timings from the simulated GPU: issue 11's 16-core target);
#   4. the same at 512 trials, seed 0;
#   5. search_threads.py: do several searches at once scale in threads on this many cores?
# Everything printed goes to $OUT/log.txt; the results the steps wrote (benchmarks/results and
# the run's report) to $OUT/results.tar, refreshed after each step so a cut call keeps them.
set -u
seconds=${1:-500}
shift $(($# > 0 ? 1 : 0))
wanted=" ${*:-test_gpu orchestrate_real search_cost_simulated search_cost_512 search_threads} "
deadline=$(($(date +%s) + seconds))
out=${OUT:-/tmp/gpu-checks}
mkdir -p "$out"
exec > >(tee -a "$out/log.txt") 2>&1

python3 -m pip install -q --no-index --no-deps --target /root/site2 .stage/b/*.whl || exit 1
export PYTHONPATH=/root/site:/root/site2:$PWD PYTHONUNBUFFERED=1
marker=$(mktemp) && touch "$marker"
work=$PWD/benchmarks/work && mkdir -p "$work"
run_dir=$work/gpu-run

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw,utilization.gpu --format=csv
lscpu | grep -E "^(Model name|Thread|Core|Socket)"; nproc && python3 -c "import tvm, xgboost, cupy; print('tvm', tvm.__version__, 'cupy', cupy.__version__)"
# TVM 0.27 compiles CUDA with NVRTC through cuda-bindings unless TVM_CUDA_COMPILE_MODE=nvcc:
# which one the builds use here (the real run's builds took 88 s of its 4 minutes).
python3 -c "import importlib.util as u, os; ok = u.find_spec('cuda') is not None and u.find_spec('cuda.bindings') is not None; print('cuda-bindings', ok, 'TVM_CUDA_COMPILE_MODE', os.environ.get('TVM_CUDA_COMPILE_MODE', 'nvrtc (default)'))"
python3 benchmarks/models.py --model vggish --out "$work/vggish.onnx"

step() {  # step NAME SECONDS COMMAND...: run COMMAND for at most SECONDS (less if time is short)
  local name=$1 want=$2 left=$((deadline - $(date +%s)))
  shift 2
  if [[ $wanted != *" $name "* ]]; then return; fi
  local limit=$((want < left ? want : left))
  if ((limit < 30)); then echo "== $name skipped: ${left}s left"; return; fi
  echo "== $name: at most ${limit}s, from $(date +%T)"
  timeout -k 5 "$limit" "$@"  # timeout signals the command's whole process group
  echo "== $name: exit $?, at $(date +%T)"
  (find benchmarks/results -newer "$marker" -type f; ls "$run_dir"/report.* 2>/dev/null) |
    tar -cf "$out/results.tar" -T - 2>/dev/null
}

step test_gpu 150 python3 -m pytest tests/test_gpu.py -q -p no:cacheprovider
step orchestrate_real 330 python3 -m orchestrator tune --budget 4min --target cuda \
  --out "$run_dir" "$work/vggish.onnx"
step search_cost_simulated 150 python3 benchmarks/search_cost.py --simulate \
  --target nvidia/nvidia-h100 --model "$work/vggish.onnx" --trials 192 --seeds 1 \
  --presets sized --label gpu-host-16core-seed1
step search_cost_512 330 python3 benchmarks/search_cost.py --simulate \
  --target nvidia/nvidia-h100 --model "$work/vggish.onnx" --trials 512 --seeds 0 \
  --presets sized --label gpu-host-16core
step search_threads 150 python3 benchmarks/search_threads.py --model vggish \
  --target nvidia/nvidia-h100 --tasks 8 --layouts 1x16,4x4,8x2 --repeats 1 \
  --label gpu-host-16core
echo "== done at $(date +%T), $((deadline - $(date +%s)))s to spare"
