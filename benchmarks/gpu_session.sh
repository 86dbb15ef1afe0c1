#!/usr/bin/env bash
# One device-machine session: `benchmarks/gpu_session.sh tests` and `tests-grid` run the gpu-marked tests
# (`tests-all`: all of them, the grids on 12 pytest-xdist workers, then memcheck; `tests-grad`: the training ones;
# `seeds`: the host-bound seed shapes three ways (`seeds-tests`: the single-launch kernels' and library tests first); `measure`: training tests and evofuse alone; `final`: the suite with every peer;
# `host-final`: the suite beside eager fp32, the seeds beside torch.compile, training tests, host times),
# `tests-rest` the others on CUDA tensors and compute-sanitizer; `... probe` prints kernel-by-kernel and per-config times; `... bench ARGS` runs `evofuse bench ARGS`.
# Wheels carried in .whl/ and .whl2/ (cuEquivariance) are installed into /tmp/site first.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD:/tmp/site"
OUT=${OUT:-/tmp/evofuse-out}
mkdir -p "$OUT"
for d in .whl .whl2; do
  if [ -d "$d" ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$d"/*.whl
  fi
done
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
memcheck() {  # compute-sanitizer over a few small gpu-marked tests
  timeout ${MEMCHECK_TIMEOUT:-300} compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m pytest -q -x -m gpu \
    tests/test_gpu.py -k "opm_awkward and 17-3 or attention_awkward and 17-3 or gradients_awkward and 17-5 or reuses or replayed" 2>&1 \
    | tee "$OUT/memcheck.log" | tail -8
}
case "${1:-tests}" in
  tests-all)  # the suite-shape tests one at a time (float64 references of ~30 GB), the grids on 12 workers
    timeout ${TESTS_TIMEOUT:-420} bash -c 'python3 -m pytest -q tests/test_gpu.py -k "not awkward and not every"; \
      python3 -m pytest -q -n 12 --maxfail=20 tests/test_gpu.py -k "awkward or every" --durations=8' 2>&1 \
      | grep -v DEBUG | tee "$OUT/gpu-tests.log" | tail -30
    memcheck
    ;;
  tests-grids)  # the memory tests, then the grids on 12 workers, then memcheck (after a suite-shape run)
    timeout ${TESTS_TIMEOUT:-300} bash -c 'python3 -m pytest -q tests/test_gpu.py -k "memory"; \
      python3 -m pytest -q -n 12 --maxfail=20 tests/test_gpu.py -k "awkward or every" --durations=8' 2>&1 \
      | grep -v DEBUG | tee "$OUT/gpu-grid-tests.log" | tail -30
    memcheck
    ;;
  tests-grad)  # the gradient and memory tests (training), then memcheck
    timeout ${TESTS_TIMEOUT:-240} python3 -m pytest -q tests/test_gpu.py \
      -k "gradient or memory or backward_config" --durations=8 2>&1 | grep -v DEBUG | tee "$OUT/gpu-grad-tests.log" | tail -20
    memcheck
    ;;
  tests)  # the gpu-marked tests at the suite shapes, memory limits and long sequences (~5 min)
    timeout 560 python3 -m pytest -q --maxfail=10 tests/test_gpu.py -k "not awkward and not every" --durations=10 \
      2>&1 | grep -v DEBUG | tee "$OUT/gpu-tests.log" | tail -40
    ;;
  tests-grid)  # the gpu-marked grids of awkward shapes and every candidate tile (~5 min)
    timeout 560 python3 -m pytest -q --maxfail=10 tests/test_gpu.py -k "awkward or every" --durations=10 2>&1 \
      | grep -v DEBUG | tee "$OUT/gpu-grid-tests.log" | tail -40
    ;;
  tests-rest)  # every other test on CUDA tensors, then memcheck at small shapes
    timeout 450 python3 -m pytest -q --maxfail=10 tests/ --ignore=tests/test_gpu.py --durations=10 2>&1 \
      | grep -v DEBUG | tee "$OUT/other-tests.log" | tail -30
    memcheck
    ;;
  measure)  # after CPU-only changes: the training tests, then evofuse alone on the main cases and the host profile
    timeout ${TESTS_TIMEOUT:-200} python3 -m pytest -q tests/test_gpu.py -k "gradient or memory or backward_config or column_sums" \
      --durations=5 2>&1 | grep -v DEBUG | tee "$OUT/gpu-grad-tests.log" | tail -6
    timeout 150 python3 -m evofuse bench --suite opm-af2-main,att-af2-main --dtype bfloat16 --train --peers none \
      --out "$OUT/train" 2>&1 | grep -E "fwd|fwd\+bwd" | tee "$OUT/bench-train.log"
    timeout 90 python3 -m evofuse bench --suite opm-af2-main,att-af2-main --dtype float32 --peers none \
      --out "$OUT/fwd32" 2>&1 | grep -E " fwd " | tee "$OUT/bench-fwd32.log"
    timeout 90 python3 benchmarks/breakdown.py opm-af2-main att-af2-main --train 2>&1 | tee "$OUT/breakdown-train.log" | grep -v Warn
    for dt in bfloat16 float32; do
      timeout 40 python3 benchmarks/breakdown.py opm-seed att-seed --dtype $dt --host 2>&1 | tee -a "$OUT/seeds-host.log" \
        | grep -E "forward|host:"
    done
    find "$OUT/train" "$OUT/fwd32" -type f ! -name results.json -delete
    ;;
  final)  # every suite shape forward and forward+backward (bf16) beside every peer; float32 forward beside eager
    # and torch.compile; the seed shapes' host profile
    TRITON_PRINT_AUTOTUNING=1 timeout ${BENCH_TIMEOUT:-400} python3 -m evofuse bench --suite all --dtype bfloat16 \
      --train --out "$OUT/suite" 2>&1 | tee "$OUT/suite.log" | grep -E "^  (opm|att)-"
    timeout 80 python3 -m evofuse bench --suite opm-af2-main,att-af2-main --dtype float32 \
      --peers "eager fp32,torch.compile fp32" --out "$OUT/fwd32" 2>&1 | grep -E "^  (opm|att)-" | tee "$OUT/bench-fwd32.log"
    timeout 30 python3 benchmarks/breakdown.py opm-seed att-seed --dtype bfloat16 --host 2>&1 \
      | tee "$OUT/seeds-host.log" | grep -E "forward|host:"
    find "$OUT/suite" "$OUT/fwd32" -type f ! -name results.json -delete
    ;;
  opm-final)  # after the Outer Product Mean's forward went back to the in-kernel epilogue: its GPU tests, its
    # forward and forward+backward rows, float32 beside eager and torch.compile, the training breakdown
    timeout 100 python3 -m pytest -q -n 12 tests/test_gpu.py \
      -k "opm_awkward or opm_long_memory or (suite_gradients and opm) or (suite_shapes and opm-af2-main)" 2>&1 \
      | grep -v DEBUG | tee "$OUT/gpu-opm-tests.log" | tail -4
    timeout 90 python3 -m evofuse bench --suite opm-af2-main,opm-long --dtype bfloat16 --train --peers "eager fp32" \
      --out "$OUT/opm" 2>&1 | grep -E "^  (opm|att)-" | tee "$OUT/bench-opm.log"
    timeout 50 python3 -m evofuse bench --suite opm-af2-main --dtype float32 --peers "eager fp32,torch.compile fp32" \
      --out "$OUT/opm32" 2>&1 | grep -E "^  (opm|att)-" | tee "$OUT/bench-opm32.log"
    timeout 40 python3 benchmarks/breakdown.py opm-af2-main --train 2>&1 | tee "$OUT/breakdown-train.log" | head -24
    find "$OUT/opm" "$OUT/opm32" -type f ! -name results.json -delete
    ;;
  launches)  # after a launch-path change: tests through each kind of launch (single, default config, autotuned,
    # backward, CUDA graph, compile), then evofuse's training at af2-main and its host time
    timeout 150 python3 -m pytest -q -n 6 tests/test_gpu.py tests/test_library.py -k "autotuned_path or reuses \
      or (suite_gradients and af2-main) or (awkward and 17-3) or memory or compile or graph" 2>&1 | grep -v DEBUG \
      | tee "$OUT/launch-tests.log" | tail -4
    timeout 90 python3 -m evofuse bench --suite opm-af2-main,att-af2-main --dtype bfloat16 --train --peers none \
      --out "$OUT/train" 2>&1 | grep -E "^  (opm|att)-" | tee "$OUT/bench-train.log"
    timeout 45 python3 benchmarks/breakdown.py opm-af2-main --train --host 2>&1 | tee "$OUT/train-host.log" \
      | grep -E "forward|host:"
    find "$OUT/train" -type f ! -name results.json -delete
    ;;
  host-final)  # after host-path changes: every suite shape's evofuse rows (forward, forward+backward) beside
    # eager fp32, the seed shapes beside eager, autocast and torch.compile, the training and library tests,
    # memcheck, and the host time of each part of a call
    timeout 240 python3 -m evofuse bench --suite all --dtype bfloat16 --train --peers "eager fp32" \
      --out "$OUT/suite" 2>&1 | tee "$OUT/suite.log" | grep -E "^  (opm|att)-" | grep -v "eager"
    timeout 100 python3 -m evofuse bench --suite opm-seed,att-seed --peers "eager fp32,eager bf16 autocast,torch.compile fp32" \
      --out "$OUT/seeds" 2>&1 | tee "$OUT/seeds.log" | grep -E "^  (opm|att)-"
    timeout 180 bash -c 'python3 -m pytest -q tests/test_gpu.py -k "gradient or memory or column_sums or backward_config \
      or reuses"; python3 -m pytest -q tests/test_library.py' 2>&1 | grep -v DEBUG | tee "$OUT/gpu-tests.log" \
      | grep -E "passed|failed|FAILED|Error"
    MEMCHECK_TIMEOUT=60 memcheck
    timeout 60 python3 benchmarks/host_time.py 2>&1 | grep -v Warn | tee "$OUT/host-time.log"
    find "$OUT/suite" "$OUT/seeds" -type f ! -name results.json -delete
    ;;
  probe)  # kernel-by-kernel device time of the main cases, and each candidate config's time
    for dt in bfloat16 float32; do
      timeout 120 python3 benchmarks/breakdown.py opm-af2-main att-af2-main --dtype $dt 2>&1 | tee -a "$OUT/breakdown.log"
    done
    timeout 150 python3 benchmarks/breakdown.py opm-af2-main att-af2-main --train 2>&1 | tee -a "$OUT/breakdown.log"
    timeout 200 python3 benchmarks/configs.py opm-af2-main att-af2-main 2>&1 | tee "$OUT/configs.log"
    timeout 150 python3 benchmarks/configs.py opm-af2-main --dtype float32 2>&1 | tee -a "$OUT/configs.log"
    ;;
  seeds-tests)  # the single-launch kernels' GPU tests, the library's (compile, CUDA graphs, opcheck) on CUDA,
    # memcheck, then the seeds as below
    timeout 240 python3 -m pytest -q -n 8 tests/test_gpu.py -k "reuses_its_binary or (awkward and auto)" 2>&1 \
      | grep -v DEBUG | tee "$OUT/gpu-small-tests.log" | tail -4
    timeout 240 python3 -m pytest -q tests/test_library.py tests/test_cached_launch.py tests/test_gpu_launch_path.py \
      tests/test_dispatch.py --durations=5 2>&1 | grep -v DEBUG | tee "$OUT/library-tests.log" | tail -12
    memcheck
    timeout 60 python3 benchmarks/breakdown.py opm-af2-main --train --host 2>&1 | tee "$OUT/train-host.log" | grep -E "forward|host:"
    ;&
  seeds)  # the host-bound seed shapes: evofuse alone in a fresh process, then beside eager and torch.compile
    # (in session 3 the same call took 0.133 ms in the bench and 0.047 ms in breakdown.py), then the host profile
    timeout 120 python3 -m evofuse bench --suite opm-seed,att-seed --peers none --out "$OUT/seeds-alone" 2>&1 | tail -8
    timeout 150 python3 -m evofuse bench --suite opm-seed,att-seed --peers "eager fp32,eager bf16 autocast,torch.compile fp32" \
      --out "$OUT/seeds" 2>&1 | tail -12
    for dt in bfloat16 float32; do
      timeout 60 python3 benchmarks/breakdown.py opm-seed att-seed --dtype $dt --host 2>&1 | tee -a "$OUT/seeds-host.log" \
        | grep -E "forward|host:"
    done
    find "$OUT/seeds-alone" "$OUT/seeds" -type f ! -name results.json -delete
    ;;
  bench)  # RESULTS names the run; only its JSON comes back (benchmarks/merge_results.py makes the rest)
    run=${RESULTS:-results}
    TRITON_PRINT_AUTOTUNING=1 timeout ${BENCH_TIMEOUT:-540} python3 -m evofuse bench --out "$OUT/$run" "${@:2}" 2>&1 \
      | tee "$OUT/$run.log" | grep -v "^Autotuning kernel" | tail -45
    find "$OUT/$run" -type f ! -name results.json -delete
    ;;
esac
