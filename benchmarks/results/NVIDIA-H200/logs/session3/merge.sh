#!/usr/bin/env bash
# How benchmarks/results/NVIDIA-H200/results.* were made from this session's runs (run from the repository root).
L=benchmarks/results/NVIDIA-H200/logs/session3
python3 benchmarks/merge_results.py benchmarks/results \
  "$L/run-fwd.json:opm-af2-main fwd ,opm-af2-extra fwd ,opm-long fwd ,att-af2-main fwd ,att-long fwd " \
  "$L/run-seed.json:opm-seed fwd ,att-seed fwd " \
  "$L/run-train-start.json:opm-af2-main fwd+bwd eager,opm-af2-main fwd+bwd torch,opm-af2-main fwd+bwd folded,opm-af2-main fwd+bwd chunked,att-af2-main fwd+bwd eager,att-af2-main fwd+bwd torch,att-af2-main fwd+bwd Flex,att-af2-main fwd+bwd cuEq" \
  "$L/run-train-opm.json:opm-af2-main fwd+bwd evofuse" \
  "$L/run-train-att.json:att-af2-main fwd+bwd evofuse"
