#!/usr/bin/env bash
# How benchmarks/results/NVIDIA-H200/results.* were made (run from the repository root): session 7's rows
# (../session7/merge.sh says where each comes from; its list is repeated here), then these rows of session 8,
# which replace earlier rows of the same case, mode and implementation:
# - run 7 (21:13-21:15 UTC, `python3 -m evofuse bench --suite opm-af2-main,opm-af2-extra,opm-long --dtype bfloat16
#   --train --peers "eager fp32"`, final code with the two-pass Outer Product Mean kernel): the Outer Product
#   Mean's bf16 forward and forward+backward, evofuse beside eager fp32 in one run.
# Runs 1-5 and 9 are probes and tests (notes/PERFORMANCE.md, "Session 8"); run 2 timed code since reverted
# (the register-accumulating multi-pass kernel). Run 9's float32 forward rows (9-bench-fwd32.log) are not in
# the table: opm-af2-main fp32 measured 3.964 ms against session 7's 2.976 and the cause is not yet known.
source benchmarks/results/NVIDIA-H200/logs/session6/merge.sh
L7=benchmarks/results/NVIDIA-H200/logs/session7
L8=benchmarks/results/NVIDIA-H200/logs/session8
python3 benchmarks/merge_results.py benchmarks/results "${S6_RUNS[@]}" "$L7/run4-fp32.json:" \
  "$L7/run5-fp32.json:opm-long fwd evofuse" "$L7/run7-seeds.json:" "$L8/run7-opm.json:"
