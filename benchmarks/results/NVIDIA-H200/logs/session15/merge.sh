#!/usr/bin/env bash
# How benchmarks/results/NVIDIA-H200/results.* were made (run from the repository root): the rows of sessions 4-14
# (../session14/merge.sh says where each comes from; its call is repeated here), then these rows of session 15,
# which replace earlier rows of the same case, mode and implementation:
# - run 4 (06:41-06:43 UTC 2026-11-30, `python3 -m evofuse bench --suite opm-af2-main,opm-af2-extra,opm-long --dtype
#   bfloat16 --train --peers "eager fp32,folded einsum bf16"`, then `python3 -m evofuse bench --suite att-af2-main
#   --dtype bfloat16 --train --peers "eager fp32,FlexAttention bf16"` in the same call): the Outer Product Mean's
#   bf16 forward and forward+backward at the three suite shapes and row attention at att-af2-main, evofuse beside
#   eager fp32 and the folded einsum / FlexAttention, on the committed code (session 15's host trims). Its
#   opm-af2-main step read 2.298 ms (host-bound); run 6 (evofuse alone, run6-engine.json) read 1.885 on the same
#   code; notes/PERFORMANCE.md, "Session 15", has every reading.
# Runs 1-3, 5, 7 and 8 are tests and probes; run 7's bench timed a projections kernel that was reverted; run 8 read
# the step, evofuse alone, at 1.826-1.837 ms in six processes (8-threads.log).
source benchmarks/results/NVIDIA-H200/logs/session6/merge.sh
L7=benchmarks/results/NVIDIA-H200/logs/session7
L8=benchmarks/results/NVIDIA-H200/logs/session8
L9=benchmarks/results/NVIDIA-H200/logs/session9
L10=benchmarks/results/NVIDIA-H200/logs/session10
L11=benchmarks/results/NVIDIA-H200/logs/session11
L12=benchmarks/results/NVIDIA-H200/logs/session12
L13=benchmarks/results/NVIDIA-H200/logs/session13
L14=benchmarks/results/NVIDIA-H200/logs/session14
L15=benchmarks/results/NVIDIA-H200/logs/session15
python3 benchmarks/merge_results.py benchmarks/results "${S6_RUNS[@]}" "$L7/run4-fp32.json:" \
  "$L7/run5-fp32.json:opm-long fwd evofuse" "$L7/run7-seeds.json:" "$L8/run7-opm.json:" "$L9/run4-att.json:" \
  "$L9/run5-opm32.json:" "$L10/run5a-opm32.json:" "$L10/run5b-att.json:" "$L11/run8-opm.json:" "$L12/run6-opm.json:" \
  "$L12/run8-opm32.json:" "$L13/run8-opm.json:" "$L14/run7-opm.json:" "$L14/run9-att.json:" "$L15/run4-opm.json:" \
  "$L15/run4-att.json:"
