#!/usr/bin/env bash
# What a session that is lent a GPU machine runs there, in one go (see docs/runtime.md, "On a GPU"):
#   1. the machine (GPU, torch, NCCL, cores);
#   2. the NCCL tests: the runtime's correctness and fault cases (the host running ahead of
#      the GPU included), the MoE layer and `collsched calibrate --backend nccl`, 8 ranks;
#      with one GPU the launcher gives each rank its own NCCL host id, so the bytes go over
#      loopback sockets (functional, not a bandwidth figure);
#   3. the per-call host benchmark (benchmarks/rank_program.py) on that machine's CPU;
#   4. whether a call waits for the GPU (benchmarks/host_runahead.py, 8 NCCL ranks);
#   5. `collsched bench` on NCCL, 8 ranks (nccl-tests table; functional, same caveat);
#   6. whether the namespace testbed can run there (root, ip, tc) and, if so, one testbed run;
#   7. NCCL without host round-trips (issue 47): the device header exchange and the CUDA-graph
#      captured call site (tests/test_nccl_paths.py), then host and GPU time per call against
#      torch's all_to_all_single, 1 KiB to 64 MiB, 8 ranks (benchmarks/nccl_host_gpu.py).
# Expects the collsched wheel (built here with `maturin build`) in .whl/; writes logs to $OUT.
# Every step is bounded by `timeout`; a failing step does not stop the others.
set -u
OUT=${OUT:-/tmp/gpu_check}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 COLLSCHED_TIMEOUT_S=60
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  || { echo "install failed"; exit 1; }
export PYTHONPATH=/tmp/site PATH=/tmp/site/bin:$PATH
step() { echo; echo "=== $1 ($(date -u +%T))"; }

step "machine"
nvidia-smi -L; nproc; uptime
python3 -c "import torch, collsched; print('torch', torch.__version__, torch.cuda.get_device_name(0), 'nccl', torch.cuda.nccl.version(), 'collsched', collsched.__version__)"

step "NCCL tests"
timeout "${NCCL_TESTS_S:-330}" python3 -m pytest -q -p no:cacheprovider -o addopts="" -rfEs --durations=5 \
  tests/test_moe_nccl.py tests/test_runtime.py tests/test_choose.py -k "nccl" --junitxml "$OUT/nccl_tests.xml" 2>&1 \
  | tail -40

step "per-call host benchmark"
timeout "${RANK_PROGRAM_S:-90}" python3 benchmarks/rank_program.py --servers 8,40,128 --reps 21 2>&1 | tee "$OUT/rank_program.txt"

step "does a call wait for the GPU? (8 NCCL ranks)"
timeout "${RUNAHEAD_S:-90}" python3 benchmarks/host_runahead.py --reps 7 --spin 100000000 2>&1 | tee "$OUT/host_runahead.txt"

step "collsched bench on NCCL (8 ranks, one GPU: functional)"
timeout "${BENCH_S:-90}" collsched bench -w zipf:0.8 -c h100:2,gpus=4 --backend nccl --nprocs 8 -b 1MiB -e 4MiB -n 5 2>&1 | tail -25

step "testbed probe"
if command -v ip >/dev/null && command -v tc >/dev/null && ip netns add collsched-probe 2>/dev/null; then
  ip netns del collsched-probe
  timeout "${TESTBED_S:-90}" collsched testbed run --servers 2 --gpus 4 --nic 200Mbps --workload hot:1.2 --mean 1MiB \
    --algorithms torch,fanout,fast,auto --iters "${TESTBED_ITERS:-5}" --json 2>&1 | tee "$OUT/testbed.json" | tail -30
else
  echo "no testbed here: ip=$(command -v ip) tc=$(command -v tc), netns $(ip netns add x 2>&1; ip netns del x 2>/dev/null)"
fi
step "NCCL without host round-trips: device exchange, captured call site (8 ranks)"
timeout "${NCCL_PATHS_S:-240}" python3 -m pytest -q -p no:cacheprovider -o addopts="" -rfEs tests/test_nccl_paths.py \
  --junitxml "$OUT/nccl_paths.xml" 2>&1 | tail -20

step "host and GPU time per call vs torch (8 NCCL ranks, 1 KiB - 64 MiB)"
timeout "${NCCL_HOST_GPU_S:-420}" python3 benchmarks/nccl_host_gpu.py --ranks 8 --reps "${NCCL_HOST_GPU_REPS:-15}" \
  --json "$OUT/nccl_host_gpu.json" 2>&1 | tee "$OUT/nccl_host_gpu.txt" | tail -70
step "done"
