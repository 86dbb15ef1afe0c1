#!/usr/bin/env bash
# How benchmarks/results/NVIDIA-H200/results.* were made (run from the repository root): session 8's rows
# (../session8/merge.sh says where each comes from; its call is repeated here), then these rows of session 9,
# which replace earlier rows of the same case, mode and implementation:
# - run 4 (22:40-22:43 UTC, `python3 -m evofuse bench --suite att-af2-main --dtype bfloat16 --train --peers
#   "eager fp32"`, the fused dq/dk/dv backward kernel): row attention's bf16 forward and forward+backward at
#   att-af2-main, evofuse beside eager fp32 in one run.
# - run 5 (22:58-23:00 UTC, `python3 -m evofuse bench --suite opm-af2-main --dtype float32 --peers "eager fp32"`,
#   the float32 projections in one pass): the Outer Product Mean's fp32 forward at opm-af2-main, evofuse beside
#   eager fp32 in one run (torch.compile's fp32 row stays session 7's).
# Runs 1-3 are probes and tests (notes/PERFORMANCE.md, "Session 9"); runs 2-3 timed variants not kept.
source benchmarks/results/NVIDIA-H200/logs/session6/merge.sh
L7=benchmarks/results/NVIDIA-H200/logs/session7
L8=benchmarks/results/NVIDIA-H200/logs/session8
L9=benchmarks/results/NVIDIA-H200/logs/session9
python3 benchmarks/merge_results.py benchmarks/results "${S6_RUNS[@]}" "$L7/run4-fp32.json:" \
  "$L7/run5-fp32.json:opm-long fwd evofuse" "$L7/run7-seeds.json:" "$L8/run7-opm.json:" "$L9/run4-att.json:" \
  "$L9/run5-opm32.json:"
