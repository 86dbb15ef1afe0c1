#!/usr/bin/env bash
# How benchmarks/results/NVIDIA-H200/results.* were made (run from the repository root): the rows of sessions 4-10
# (../session10/merge.sh says where each comes from; its call is repeated here), then these rows of session 11,
# which replace earlier rows of the same case, mode and implementation:
# - run 8 (01:35-01:37 UTC 2026-11-30, `python3 -m evofuse bench --suite opm-af2-main,opm-af2-extra,opm-long --dtype
#   bfloat16 --train --peers "eager fp32,folded einsum bf16"`): the Outer Product Mean's bf16 forward and
#   forward+backward at the three suite shapes, evofuse beside eager fp32 and the folded einsum in one run. Its
#   code is the committed one but for the normalized gradient Gs, which it computed once for all rows (opm-long
#   peak 1870 MiB); the committed code computes it per block of rows, as run 6's did (opm-long 1614 MiB); not
#   re-measured as committed (the session's device time was spent). Run 6's JSON (one block of rows at
#   opm-af2-main, 3.21 ms on a slower host) is kept beside it, not merged.
# Runs 1-5, 6 and 7 are probes and tests (notes/PERFORMANCE.md, "Session 11").
source benchmarks/results/NVIDIA-H200/logs/session6/merge.sh
L7=benchmarks/results/NVIDIA-H200/logs/session7
L8=benchmarks/results/NVIDIA-H200/logs/session8
L9=benchmarks/results/NVIDIA-H200/logs/session9
L10=benchmarks/results/NVIDIA-H200/logs/session10
L11=benchmarks/results/NVIDIA-H200/logs/session11
python3 benchmarks/merge_results.py benchmarks/results "${S6_RUNS[@]}" "$L7/run4-fp32.json:" \
  "$L7/run5-fp32.json:opm-long fwd evofuse" "$L7/run7-seeds.json:" "$L8/run7-opm.json:" "$L9/run4-att.json:" \
  "$L9/run5-opm32.json:" "$L10/run5a-opm32.json:" "$L10/run5b-att.json:" "$L11/run8-opm.json:"
