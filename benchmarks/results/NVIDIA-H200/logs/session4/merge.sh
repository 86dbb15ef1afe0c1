#!/usr/bin/env bash
# How benchmarks/results/NVIDIA-H200/results.* were made from session 4's runs (run from the repository root).
# run5-suite: every suite shape, forward and forward+backward (bf16), every peer (16:13 UTC); its Outer Product
# Mean rows of evofuse at af2-main and long used the cuBLAS-epilogue forward, since reverted: those come from
# run6 (final code, 16:20 UTC). The float32 forward rows of evofuse not re-measured this session come from
# session 3's run (the same forward kernels: the session's float32 changes were reverted).
source benchmarks/results/NVIDIA-H200/logs/session4/runs.sh
python3 benchmarks/merge_results.py benchmarks/results "${S4_RUNS[@]}"
