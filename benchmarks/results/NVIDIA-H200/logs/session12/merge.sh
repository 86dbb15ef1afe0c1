#!/usr/bin/env bash
# How benchmarks/results/NVIDIA-H200/results.* were made (run from the repository root): the rows of sessions 4-11
# (../session11/merge.sh says where each comes from; its call is repeated here), then these rows of session 12,
# which replace earlier rows of the same case, mode and implementation:
# - run 6 (02:59-03:00 UTC 2026-11-30, `python3 -m evofuse bench --suite opm-af2-main,opm-af2-extra,opm-long --dtype
#   bfloat16 --train --peers "eager fp32,folded einsum bf16"`): the Outer Product Mean's bf16 forward and
#   forward+backward at the three suite shapes, evofuse beside eager fp32 and the folded einsum in one run, on the
#   committed code (the training forward keeping a and b; the LayerNorm's and projections' gradients by
#   ln_linear_backward).
# - run 8 (~03:05 UTC, `python3 -m evofuse bench --suite opm-af2-main --dtype float32 --peers "eager fp32,torch.compile
#   fp32"`): the fp32 forward at opm-af2-main beside eager and torch.compile, same code. Run 1 measured the same
#   code's fp32 forward at 2.389 ms on another machine (1-bench-opm32.log; its JSON did not come back: a call returns
#   at most 8 files); the fp32 forward's ~2 ms of host time makes it move with the machine.
# Runs 1-5 and 7 are tests and probes (notes/PERFORMANCE.md, "Session 12").
source benchmarks/results/NVIDIA-H200/logs/session6/merge.sh
L7=benchmarks/results/NVIDIA-H200/logs/session7
L8=benchmarks/results/NVIDIA-H200/logs/session8
L9=benchmarks/results/NVIDIA-H200/logs/session9
L10=benchmarks/results/NVIDIA-H200/logs/session10
L11=benchmarks/results/NVIDIA-H200/logs/session11
L12=benchmarks/results/NVIDIA-H200/logs/session12
python3 benchmarks/merge_results.py benchmarks/results "${S6_RUNS[@]}" "$L7/run4-fp32.json:" \
  "$L7/run5-fp32.json:opm-long fwd evofuse" "$L7/run7-seeds.json:" "$L8/run7-opm.json:" "$L9/run4-att.json:" \
  "$L9/run5-opm32.json:" "$L10/run5a-opm32.json:" "$L10/run5b-att.json:" "$L11/run8-opm.json:" "$L12/run6-opm.json:" \
  "$L12/run8-opm32.json:"
