#!/usr/bin/env bash
# The GPU checks of a session lent a GPU, as one call on the device machine (step 3 of
# ../shared/gpu/README.md, after call 1 unpacked TVM into /root/site):
#
#   bash benchmarks/gpu_checks.sh [SECONDS [MINUTES [STEP...]]]
#
# SECONDS bounds the whole call (default 540); MINUTES is gpu_e2e's T (default 3); STEP names
# pick steps (gpu_e2e, gpu_engine, test_gpu, fleet), in this file's order, most valuable
# first. Only what needs the GPU runs here: simulated runs and CPU-only studies run on any host.
#
# Steps, each cut to the time left:
#   1. gpu_e2e.py on vggish: untuned, vanilla tune_relax for T, ours for T and for T/3, all
#      compiled by stock compile_relax and timed in turn at the end (about 2.2 T + 1 minute);
#   2. gpu_engine.py: LocalRunner against our engine on the same 64 built candidates;
#   3. tests/test_gpu.py on the real GPU;
#   4. fleet: vggish tuned for 2 minutes by a head process that sees no GPU
#      (CUDA_VISIBLE_DEVICES=) through a TVM RPC tracker and one server holding the GPU.
# Everything printed goes to $OUT/log.txt; what the steps wrote (benchmarks/results, and our
# runs' reports from gpu_e2e) to $OUT/results.tar, refreshed after each step so that a call cut
# short keeps them.
set -u
seconds=${1:-540}
minutes=${2:-3}
shift $(($# > 1 ? 2 : $#))
wanted=" ${*:-gpu_e2e gpu_engine test_gpu fleet} "
deadline=$(($(date +%s) + seconds))
out=${OUT:-/tmp/gpu-checks}
mkdir -p "$out"
exec > >(tee -a "$out/log.txt") 2>&1

python3 -m pip install -q --no-index --no-deps --target /root/site2 .stage/b/*.whl || exit 1
# The package as pip installs it (pyproject's package-dir: orchestrator/ is tune_orchestrator,
# the other folders its sub-packages), copied from this tree: the GPU host has no setuptools.
pkg=/root/site3/tune_orchestrator && rm -rf "$pkg" && mkdir -p /root/site3 && cp -r orchestrator "$pkg"
for sub in budget configs filters measure; do cp -r "$sub" "$pkg/$sub"; done
export PYTHONPATH=/root/site:/root/site2:/root/site3 PYTHONUNBUFFERED=1
marker=$(mktemp) && touch "$marker"
work=$PWD/benchmarks/work && mkdir -p "$work"

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw,utilization.gpu --format=csv
lscpu | grep -E "^(Model name|Thread|Core|Socket)"; nproc
python3 -c "import tvm, xgboost, cupy; print('tvm', tvm.__version__, 'cupy', cupy.__version__)"
python3 benchmarks/models.py --model vggish --out "$work/vggish.onnx"

save() {  # results written since the call began, and our runs' reports, into one tar
  (find benchmarks/results -newer "$marker" -type f
   find "$work" -path "*gpu-e2e-*" -name "report.*" -newer "$marker" -type f) |
    tar -cf "$out/results.tar" -T - 2>/dev/null
}

step() {  # step NAME SECONDS COMMAND...: run COMMAND for at most SECONDS (less if time is short)
  local name=$1 want=$2 left=$((deadline - $(date +%s)))
  shift 2
  if [[ $wanted != *" $name "* ]]; then return; fi
  local limit=$((want < left ? want : left))
  if ((limit < 30)); then echo "== $name skipped: ${left}s left"; return; fi
  echo "== $name: at most ${limit}s, from $(date +%T)"
  timeout -k 5 "$limit" "$@"  # timeout signals the command's whole process group
  echo "== $name: exit $?, at $(date +%T)"
  save
}

step gpu_e2e 600 python3 benchmarks/gpu_e2e.py --models vggish --minutes "$minutes"
step gpu_engine 240 python3 benchmarks/gpu_engine.py --model "$work/vggish.onnx" \
  --candidates 64 --whole-run-trials 0
step test_gpu 240 python3 -m pytest tests/test_gpu.py -q -p no:cacheprovider

fleet() {  # a tracker and a server on this host; the head process without the GPU
  python3 -m tvm.exec.rpc_tracker --host 127.0.0.1 --port 9190 --port-end 9191 --silent &
  sleep 3
  python3 -m tvm.exec.rpc_server --host 127.0.0.1 --port 9200 --port-end 9220 \
    --tracker 127.0.0.1:9190 --key gpu &
  sleep 5
  CUDA_VISIBLE_DEVICES= python3 -m tune_orchestrator --budget 2min --target nvidia/nvidia-h100 \
    --rpc 127.0.0.1:9190 --rpc-key gpu --no-library --out "$work/gpu-e2e-fleet/run" \
    "$work/vggish.onnx"
  local rc=$?
  kill %1 %2 2>/dev/null
  return $rc
}
export -f fleet && export work
step fleet 200 bash -c fleet
echo "== done at $(date +%T), $((deadline - $(date +%s)))s to spare"
