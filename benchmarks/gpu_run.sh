#!/usr/bin/env bash
# On a CUDA machine, from the repository root: the test suite on the GPU, then `evofuse bench` over the suite,
# forward and training. Logs and results go to ${OUT:-benchmarks/results}. Exits non-zero when a test fails, when
# pytest or the benchmark times out, or when the benchmark fails.
# Variables: TIER=quick (default: every test but the full tier's, `gpu` ones included) or full (EVOFUSE_FULL_TESTS=1:
# every kernel config, the suite's shapes, the cases past 2**31 elements); TESTS=0 skips the tests; BENCH=0 skips the
# benchmark; SUITE (default all; none for the grid alone); PEERS (default all; none times evofuse alone); GRID=1 adds
# the awkward-shape grid (GRID=pwa or GRID=opm,att a part of it); TEST_PATHS (default tests) and TEST_K (a pytest -k
# expression) take a part of the tests (the quick tier passes one 10-minute device call): PART=k/n takes every n-th
# test file from the k-th (PART=1/2 and PART=2/2 in two calls cover them); HOST=1 adds each row's host
# time of a call (`--host`); MODELS=1 adds the model families' blocks (benchmarks/models.py); FLOORS=1 SPEC's forward
# floors (benchmarks/floors.py, rows labelled LABEL, default the commit); PREDICT=1 whole Boltz-2 predictions
# (benchmarks/predict.py at RESIDUES, default 256,512,1024, for PREDICT_PATHS, default all four); PREDICT=protenix
# whole Protenix predictions instead (benchmarks/predict_protenix.py, its three paths); LIMIT seconds for each
# part (default 420; the quick tier with an empty Triton cache nears it: LIMIT=560, or a part); WORKERS pytest-xdist
# workers (default 8); DTYPE the benchmark's dtypes (default float32,bfloat16).
set -uo pipefail
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"  # (the scripts import this checkout's evofuse)
out="${OUT:-benchmarks/results}"
limit="${LIMIT:-420}"
status=0
mkdir -p "$out"
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, torch.cuda.get_device_name())"

# $1: what ran, $2: its exit status; 124 is timeout's
check() {
  if [ "$2" -eq 124 ]; then
    echo "$1: timed out after ${limit}s"
    status=1
  elif [ "$2" -ne 0 ]; then
    echo "$1: exit status $2"
    status=1
  fi
}

if [ "${TESTS:-1}" = 1 ]; then
  full=0
  [ "${TIER:-quick}" = full ] && full=1
  # (one worker a CPU pair compiles in parallel; the `big` cases, tens of GiB each, alone afterwards)
  paths="${TEST_PATHS:-tests}"
  if [ -n "${PART:-}" ]; then
    paths=$(ls tests/test_*.py | awk -v k="${PART%/*}" -v n="${PART#*/}" '(NR - k) % n == 0' | tr '\n' ' ')
  fi
  workers=$(python3 -c "import importlib.util as u; print('-n ${WORKERS:-8}' if u.find_spec('xdist') else '')")
  # (SIGINT at the limit: pytest still prints the failures it has seen)
  EVOFUSE_FULL_TESTS=$full timeout -s INT -k 30 "$limit" python3 -m pytest -q $workers -m "not big" -p no:cacheprovider \
    ${TEST_K:+-k "$TEST_K"} $paths > "$out/tests.log" 2>&1
  check "tests (${TIER:-quick} tier)" $?
  grep -E "^FAILED|^ERROR|passed|failed" "$out/tests.log" | tail -15
  if [ "$full" = 1 ]; then
    EVOFUSE_FULL_TESTS=1 timeout "$limit" python3 -m pytest -q -m big tests -p no:cacheprovider > "$out/tests-big.log" 2>&1
    check "tests (big)" $?
    grep -E "^FAILED|^ERROR|passed|failed" "$out/tests-big.log" | tail -5
  fi
fi
if [ "${BENCH:-1}" = 1 ]; then
  grid="${GRID:-}"
  [ "$grid" = 1 ] && grid=all
  timeout "$limit" python3 benchmarks/bench.py --suite "${SUITE:-all}" --train --peers "${PEERS:-all}" \
    ${DTYPE:+--dtype "$DTYPE"} ${grid:+--grid "$grid"} $([ "${HOST:-0}" = 1 ] && echo --host) --out "$out" \
    > "$out/bench.log" 2>&1
  check bench $?
  grep -E "^  |worst|written" "$out/bench.log"
fi
if [ "${FLOORS:-0}" = 1 ]; then
  timeout "$limit" python3 benchmarks/floors.py --label "${LABEL:-$(git rev-parse --short HEAD 2>/dev/null || echo here)}" \
    --out "$out" > "$out/floors.log" 2>&1
  check floors $?
  grep -E "^  |from" "$out/floors.log"
fi
if [ "${PREDICT:-0}" = protenix ]; then
  timeout "$limit" python3 benchmarks/predict_protenix.py --residues "${RESIDUES:-256,512,1024}" \
    --paths "${PREDICT_PATHS:-unpatched,cuequivariance,evofuse}" --out "$out" > "$out/predict.log" 2>&1
  check predict $?
  grep -E "^  |written" "$out/predict.log"
elif [ "${PREDICT:-0}" = 1 ]; then
  timeout "$limit" python3 benchmarks/predict.py \
    --residues "${RESIDUES:-256,512,1024}" --paths "${PREDICT_PATHS:-unpatched,cuequivariance,evofuse,evofuse-graphs}" \
    --out "$out" > "$out/predict.log" 2>&1
  check predict $?
  grep -E "^  |written" "$out/predict.log"
fi
if [ "${MODELS:-0}" = 1 ]; then
  timeout "$limit" python3 benchmarks/models.py --out "$out" > "$out/models.log" 2>&1
  check models $?
  grep -E "^  |written" "$out/models.log"
fi
exit "$status"
