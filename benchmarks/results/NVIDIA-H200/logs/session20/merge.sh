#!/usr/bin/env bash
# How benchmarks/results/NVIDIA-H200/results.* were made (run from the repository root, PYTHONPATH=$PWD): the rows
# of sessions 4-19 (../session19/merge.sh says where each comes from; its call is repeated here), then these rows of
# session 20, which replace earlier rows of the same case, mode and implementation:
# - run 5 (~15:24 UTC 2026-11-30, `python3 -m evofuse bench --suite opm-af2-main,opm-af2-extra,opm-long --dtype
#   bfloat16 --train --peers "eager fp32,folded einsum bf16"`): the Outer Product Mean's bf16 forward and training
#   step at the three suite shapes, evofuse (the partial sums ended in one launch, the Gluon kernel launched through
#   its binary; the code at run5.sh's commit) beside eager fp32 and the folded einsum.
# Runs 1-4's and 6's tests, probes and benches are in 1-*.log .. 6-*.log (run 3's bench, run3-opm.json, not merged:
# the code before the partial sums' inputs were let go early, 368.3 MiB).
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
L16=benchmarks/results/NVIDIA-H200/logs/session16
L17=benchmarks/results/NVIDIA-H200/logs/session17
L18=benchmarks/results/NVIDIA-H200/logs/session18
L19=benchmarks/results/NVIDIA-H200/logs/session19
L20=benchmarks/results/NVIDIA-H200/logs/session20
python3 benchmarks/merge_results.py benchmarks/results "${S6_RUNS[@]}" "$L7/run4-fp32.json:" \
  "$L7/run5-fp32.json:opm-long fwd evofuse" "$L7/run7-seeds.json:" "$L8/run7-opm.json:" "$L9/run4-att.json:" \
  "$L9/run5-opm32.json:" "$L10/run5a-opm32.json:" "$L10/run5b-att.json:" "$L11/run8-opm.json:" "$L12/run6-opm.json:" \
  "$L12/run8-opm32.json:" "$L13/run8-opm.json:" "$L14/run7-opm.json:" "$L14/run9-att.json:" "$L15/run4-opm.json:" \
  "$L15/run4-att.json:" "$L16/run5-opm32.json:" "$L17/run2-opm32.json:" "$L18/run6-opm.json:" \
  "$L19/run6-opm.json:" "$L20/run5-opm.json:"
