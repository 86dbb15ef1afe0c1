#!/usr/bin/env bash
# How benchmarks/results/NVIDIA-H200/results.* were made (run from the repository root): session 5's merge
# (session 4's runs, then session 5's rows; ../session5/merge.sh says where each comes from), then these rows
# of session 6, which replace earlier rows of the same case, mode and implementation:
# - run 4 (18:33 UTC, `bash benchmarks/gpu_session.sh host-final`, final code): every suite shape's evofuse
#   bf16 forward and forward+backward rows beside eager fp32's, in one run (the other peers' rows stay
#   session 4's);
# - run 4's second bench (18:36 UTC, same call): the seed shapes' forward beside eager fp32, eager bf16
#   autocast and torch.compile fp32, evofuse fp32 and bf16 (replacing the suite bench's opm-seed and att-seed
#   forward rows of evofuse and eager).
source benchmarks/results/NVIDIA-H200/logs/session4/runs.sh
L5=benchmarks/results/NVIDIA-H200/logs/session5
L6=benchmarks/results/NVIDIA-H200/logs/session6
S6_RUNS=("${S4_RUNS[@]}" "$L5/run4-seeds.json:opm-seed fwd,att-seed fwd" \
  "$L5/run6-train.json:opm-af2-main fwd+bwd evofuse" "$L5/run1-train.json:att-af2-main fwd+bwd evofuse" \
  "$L6/run4-suite.json:" "$L6/run4-seeds.json:")
# run directly, it merges; sourced (by a later session's merge.sh), it only defines S6_RUNS
if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
  python3 benchmarks/merge_results.py benchmarks/results "${S6_RUNS[@]}"
fi
