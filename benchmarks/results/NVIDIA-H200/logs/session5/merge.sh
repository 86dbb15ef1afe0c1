#!/usr/bin/env bash
# How benchmarks/results/NVIDIA-H200/results.* were made (run from the repository root): session 4's runs
# (`../session4/runs.sh`; its merge.sh says where each of those rows comes from), then these rows of session 5,
# which replace session 4's rows of the same case, mode and implementation:
# - the seed shapes' forward rows, evofuse's and eager's, autocast's and torch.compile's: run 4 (17:2x UTC,
#   `bash benchmarks/gpu_session.sh seeds`, final code); the folded einsum's, chunked eager's, FlexAttention's
#   and cuEquivariance's seed rows stay session 4's (run 5);
# - evofuse's forward+backward at opm-af2-main: run 6 (~17:37 UTC, `gpu_session.sh launches`, evofuse alone,
#   every Triton launch through its cached binary: the final code's Outer Product Mean path);
# - evofuse's forward+backward at att-af2-main: run 1 (16:5x UTC, `measure`, evofuse alone; since then its
#   launches go through the cached binaries too (run 6 failed on them, fixed and tested in run 8, whose
#   training row ran out of the device time): its device time is unchanged, its host time lower).
source benchmarks/results/NVIDIA-H200/logs/session4/runs.sh
L5=benchmarks/results/NVIDIA-H200/logs/session5
python3 benchmarks/merge_results.py benchmarks/results "${S4_RUNS[@]}" "$L5/run4-seeds.json:opm-seed fwd,att-seed fwd" \
  "$L5/run6-train.json:opm-af2-main fwd+bwd evofuse" "$L5/run1-train.json:att-af2-main fwd+bwd evofuse"
