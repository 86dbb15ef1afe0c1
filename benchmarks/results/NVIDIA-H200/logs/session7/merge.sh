#!/usr/bin/env bash
# How benchmarks/results/NVIDIA-H200/results.* were made (run from the repository root): session 6's rows
# (../session6/merge.sh says where each comes from), then these rows of session 7, which replace earlier
# rows of the same case, mode and implementation:
# - run 4 (~19:29 UTC, `RESULTS=run4-fp32 bash benchmarks/gpu_session.sh bench --suite
#   opm-af2-main,opm-af2-extra,opm-long --dtype float32 --peers "eager fp32,torch.compile fp32"`): the Outer
#   Product Mean's float32 forward, evofuse beside eager and torch.compile in one run, except
# - opm-long's evofuse fp32 row, from run 5 (~19:36 UTC, `RESULTS=run5-fp32 ... bench --suite
#   opm-af2-main,opm-long --dtype float32 --peers none`, same code): run 4 measured its peak as 0 MiB (the
#   torch.compile row's buffers were freed during the call; bench.py now collects garbage first).
# - run 7 (19:54:57 UTC, `bash benchmarks/gpu_session.sh seeds`, its second bench: `evofuse bench --suite
#   opm-seed,att-seed --peers "eager fp32,eager bf16 autocast,torch.compile fp32"`): the seed shapes' forward,
#   evofuse fp32 and bf16 beside eager fp32, autocast and torch.compile in one run (replays launching with
#   integer addresses; the same call's first bench, evofuse alone: opm-seed bf16 0.0195 ms, att-seed 0.0238).
source benchmarks/results/NVIDIA-H200/logs/session6/merge.sh
L7=benchmarks/results/NVIDIA-H200/logs/session7
python3 benchmarks/merge_results.py benchmarks/results "${S6_RUNS[@]}" "$L7/run4-fp32.json:" \
  "$L7/run5-fp32.json:opm-long fwd evofuse" "$L7/run7-seeds.json:"
