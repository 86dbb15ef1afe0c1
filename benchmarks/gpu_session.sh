#!/usr/bin/env bash
# One device-machine session: `benchmarks/gpu_session.sh tests` runs the gpu tests, `evofuse check` and
# compute-sanitizer; `... breakdown` prints kernel-by-kernel times; `... bench ARGS` runs `evofuse bench ARGS`.
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
case "${1:-tests}" in
  tests)
    timeout 420 python3 -m pytest -q -x -m gpu tests/test_gpu.py --durations=8 2>&1 | tee "$OUT/gpu-tests.log" | tail -40
    timeout 150 python3 -m evofuse check --trials 1 --case opm-seed --case opm-af2-main --case att-seed \
      --case att-af2-main --dtype float32 --dtype bfloat16 --dtype float16 2>&1 | tee "$OUT/check.log" | tail -20
    timeout 100 compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m pytest -q -x -m gpu tests/test_gpu.py \
      -k "opm_awkward and 17-3 or attention_awkward and 17-3" 2>&1 | tee "$OUT/memcheck.log" | tail -8
    ;;
  breakdown)  # kernel-by-kernel device time of the main cases
    for dt in bfloat16 float32; do
      timeout 120 python3 benchmarks/breakdown.py opm-af2-main att-af2-main --dtype $dt 2>&1 | tee -a "$OUT/breakdown.log"
    done
    ;;
  bench)  # RESULTS names the run; only its JSON comes back (benchmarks/merge_results.py makes the rest)
    run=${RESULTS:-results}
    TRITON_PRINT_AUTOTUNING=1 timeout ${BENCH_TIMEOUT:-540} python3 -m evofuse bench --out "$OUT/$run" "${@:2}" 2>&1 \
      | tee "$OUT/$run.log" | grep -v "^Autotuning kernel" | tail -45
    find "$OUT/$run" -type f ! -name results.json -delete
    ;;
esac
