# session 11 run 3: where the Outer Product Mean training step's host time goes (cProfile)
export PYTHONPATH=$PWD; L=benchmarks/results/NVIDIA-H200/logs/session11
timeout 120 python3 $L/host_probe.py opm-af2-main > $OUT/3-host-probe.log 2>&1; grep "host alone" $OUT/3-host-probe.log
# the same with session 10's last tree (01b7bfb, carried as oldtree/, not committed)
PYTHONPATH=$PWD/oldtree timeout 120 python3 $L/host_probe.py opm-af2-main > $OUT/3-host-probe-old.log 2>&1; grep "host alone" $OUT/3-host-probe-old.log
PYTHONPATH=$PWD/oldtree timeout 60 python3 benchmarks/breakdown.py opm-af2-main --train > $OUT/3-breakdown-old.log 2>&1; grep "forward+backward" $OUT/3-breakdown-old.log
