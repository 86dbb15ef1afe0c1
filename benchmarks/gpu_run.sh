#!/usr/bin/env bash
# On a CUDA machine, from the repository root: the whole test suite on the GPU (the `gpu`-marked tests
# included), then `evofuse bench` over the suite, forward and training, with the awkward-shape grid.
# Logs and results go to ${OUT:-benchmarks/results}. PEERS=none times evofuse alone.
set -uo pipefail
out="${OUT:-benchmarks/results}"
mkdir -p "$out"
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, torch.cuda.get_device_name())"
if [ "${TESTS:-1}" = 1 ]; then
  EVOFUSE_FULL_TESTS=1 python3 -m pytest -q tests -p no:cacheprovider 2>&1 | tee "$out/tests.log" | tail -15
fi
python3 -m evofuse bench --suite "${SUITE:-all}" --train --peers "${PEERS:-all}" ${GRID:+--grid} --out "$out" 2>&1 | tee "$out/bench.log"
