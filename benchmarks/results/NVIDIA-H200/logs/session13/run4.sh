# session 13 run 4: where the opm-af2-main bf16 training step's host time goes (run 3: kernels 1.869 ms, the bench's step
# 2.475 ms on a host that bounds it): the host time of its parts, with the backward's row blocks of 256 and 512 MiB,
# and the profiler's and cProfile's host breakdown
export PYTHONPATH=$PWD
timeout 120 python3 benchmarks/host_time.py opm-af2-main --block-mib 256 512 > $OUT/4-host-time.log 2>&1; grep -v Warn $OUT/4-host-time.log
timeout 200 python3 benchmarks/breakdown.py opm-af2-main --train --host > $OUT/4-breakdown-host.log 2>&1; grep -v Warn $OUT/4-breakdown-host.log | sed -n 1,200p | grep -v "^ *0\.00[0-9] ms" | head -150
