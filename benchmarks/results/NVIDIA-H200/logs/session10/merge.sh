#!/usr/bin/env bash
# How benchmarks/results/NVIDIA-H200/results.* were made (run from the repository root): session 9's rows
# (../session9/merge.sh says where each comes from; its call is repeated here), then these rows of session 10,
# which replace earlier rows of the same case, mode and implementation:
# - run 5a (00:07-00:08 UTC 2026-11-30, `python3 -m evofuse bench --suite opm-af2-main --dtype float32 --peers
#   "eager fp32,torch.compile fp32"`, the SPLIT projection on 4 warps): the Outer Product Mean's fp32 forward at
#   opm-af2-main, evofuse beside eager fp32 and torch.compile fp32 in one run.
# - run 5b (00:08-00:10 UTC, `python3 -m evofuse bench --suite att-af2-main,att-long --dtype bfloat16 --train
#   --peers "eager fp32,FlexAttention bf16,cuEquivariance bf16"`, cuEquivariance's wheels carried in .whl/ and
#   .whl2/ by runs 5a and 5b): row attention's bf16 forward and forward+backward at both suite shapes, evofuse
#   beside eager fp32, FlexAttention and cuEquivariance in one run.
# Runs 1-4 are probes and tests (notes/PERFORMANCE.md, "Session 10").
source benchmarks/results/NVIDIA-H200/logs/session6/merge.sh
L7=benchmarks/results/NVIDIA-H200/logs/session7
L8=benchmarks/results/NVIDIA-H200/logs/session8
L9=benchmarks/results/NVIDIA-H200/logs/session9
L10=benchmarks/results/NVIDIA-H200/logs/session10
python3 benchmarks/merge_results.py benchmarks/results "${S6_RUNS[@]}" "$L7/run4-fp32.json:" \
  "$L7/run5-fp32.json:opm-long fwd evofuse" "$L7/run7-seeds.json:" "$L8/run7-opm.json:" "$L9/run4-att.json:" \
  "$L9/run5-opm32.json:" "$L10/run5a-opm32.json:" "$L10/run5b-att.json:"
