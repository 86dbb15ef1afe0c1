#!/usr/bin/env bash
# On a CUDA machine, from the repository root: the whole test suite on the GPU (the `gpu`-marked tests and the
# full tier included), then `evofuse bench` over the suite, forward and training. Logs and results go to
# ${OUT:-benchmarks/results}. Variables: TESTS=0 skips the tests; SUITE (default all; none for the grid alone);
# PEERS (default all; none times evofuse alone); GRID=1 adds the awkward-shape grid (GRID=pwa or GRID=opm,att a
# part of it); MODELS=1 adds the model families' blocks (benchmarks/models.py); LIMIT seconds for each part
# (default 280).
set -uo pipefail
out="${OUT:-benchmarks/results}"
limit="${LIMIT:-280}"
mkdir -p "$out"
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, torch.cuda.get_device_name())"
if [ "${TESTS:-1}" = 1 ]; then
  workers=$(python3 -c "import importlib.util as u; print('-n 8' if u.find_spec('xdist') else '')")
  EVOFUSE_FULL_TESTS=1 timeout "$limit" python3 -m pytest -q $workers tests -p no:cacheprovider > "$out/tests.log" 2>&1
  grep -E "^FAILED|passed|failed" "$out/tests.log" | tail -15
fi
grid="${GRID:-}"
[ "$grid" = 1 ] && grid=all
timeout "$limit" python3 -m evofuse bench --suite "${SUITE:-all}" --train --peers "${PEERS:-all}" ${grid:+--grid "$grid"} \
  --out "$out" 2>&1 | tee "$out/bench.log" | grep -E "^  |worst|written"
if [ "${MODELS:-0}" = 1 ]; then
  timeout "$limit" python3 benchmarks/models.py --out "$out" 2>&1 | tee "$out/models.log" | grep -E "^  |written"
fi
