#!/usr/bin/env bash
# How benchmarks/results/NVIDIA-H200/results.* were made (run from the repository root): session 4's merge
# (its merge.sh says where each of those rows comes from), with these rows of session 5 instead:
# - the seed shapes' forward rows, evofuse's and eager's, autocast's and torch.compile's: run 4 (17:2x UTC,
#   `bash benchmarks/gpu_session.sh seeds`, final code); the folded einsum's, chunked eager's, FlexAttention's
#   and cuEquivariance's seed rows stay session 4's (run 5);
# - evofuse's forward+backward at opm-af2-main: run 6 (~17:37 UTC, `gpu_session.sh launches`, evofuse alone,
#   every Triton launch through its cached binary: the final code's Outer Product Mean path);
# - evofuse's forward+backward at att-af2-main: run 1 (16:5x UTC, `measure`, evofuse alone; since then its
#   launches go through the cached binaries too (run 6 failed on them, fixed and tested in run 8, whose
#   training row ran out of the device time): its device time is unchanged, its host time lower).
L=benchmarks/results/NVIDIA-H200/logs/session5
L4=benchmarks/results/NVIDIA-H200/logs/session4
S3=benchmarks/results/NVIDIA-H200/logs/session3
peers() { local out=""; for c in "$@"; do for m in "fwd " "fwd+bwd "; do
  for p in eager torch folded chunked; do out+="$c $m$p,"; done; done; done; echo "${out%,}"; }
python3 benchmarks/merge_results.py benchmarks/results \
  "$L4/run5-suite.json:opm-seed fwd+bwd,opm-seed fwd folded,opm-seed fwd chunked,att-seed fwd+bwd,att-seed fwd Flex,att-seed fwd cuEq,att-af2-main fwd ,att-af2-main fwd+bwd eager,att-af2-main fwd+bwd torch,att-af2-main fwd+bwd Flex,att-af2-main fwd+bwd cuEq,att-long,$(peers opm-af2-main opm-af2-extra opm-long),opm-af2-extra fwd+bwd evofuse" \
  "$L4/run6-opm.json:opm-af2-main fwd evofuse,opm-long fwd evofuse,opm-long fwd+bwd evofuse" \
  "$L4/run6-opm32.json:opm-af2-main fwd evofuse fp32" \
  "$L4/run5-fwd32.json:att-af2-main fwd evofuse fp32" \
  "$S3/run-fwd.json:opm-af2-extra fwd evofuse,opm-long fwd evofuse fp32,att-long fwd evofuse fp32" \
  "$L/run6-train.json:opm-af2-main fwd+bwd evofuse" \
  "$L/run1-train.json:att-af2-main fwd+bwd evofuse" \
  "$L/run4-seeds.json:opm-seed fwd,att-seed fwd"
