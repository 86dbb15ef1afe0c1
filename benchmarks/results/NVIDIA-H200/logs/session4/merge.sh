#!/usr/bin/env bash
# How benchmarks/results/NVIDIA-H200/results.* were made from session 4's runs (run from the repository root).
# run5-suite: every suite shape, forward and forward+backward (bf16), every peer (16:13 UTC); its Outer Product
# Mean rows of evofuse at af2-main and long used the cuBLAS-epilogue forward, since reverted: those come from
# run6 (final code, 16:20 UTC). The float32 forward rows of evofuse not re-measured this session come from
# session 3's run (the same forward kernels: the session's float32 changes were reverted).
L=benchmarks/results/NVIDIA-H200/logs/session4
S3=benchmarks/results/NVIDIA-H200/logs/session3
peers() { local out=""; for c in "$@"; do for m in "fwd " "fwd+bwd "; do
  for p in eager torch folded chunked; do out+="$c $m$p,"; done; done; done; echo "${out%,}"; }
python3 benchmarks/merge_results.py benchmarks/results \
  "$L/run5-suite.json:opm-seed ,att-,$(peers opm-af2-main opm-af2-extra opm-long),opm-af2-extra fwd+bwd evofuse" \
  "$L/run6-opm.json:opm-af2-main fwd evofuse,opm-af2-main fwd+bwd evofuse,opm-long fwd evofuse,opm-long fwd+bwd evofuse" \
  "$L/run6-opm32.json:opm-af2-main fwd evofuse fp32" \
  "$L/run5-fwd32.json:att-af2-main fwd evofuse fp32" \
  "$S3/run-fwd.json:opm-af2-extra fwd evofuse,opm-long fwd evofuse fp32,att-long fwd evofuse fp32,opm-seed fwd evofuse fp32,att-seed fwd evofuse fp32"
