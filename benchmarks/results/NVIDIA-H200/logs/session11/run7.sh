# session 11 run 7: A/B on one machine, alternating, of the Outer Product Mean bf16 training step at opm-af2-main:
# session 10's last tree (01b7bfb, carried as oldtree/, not committed) and this session's
export L=benchmarks/results/NVIDIA-H200/logs/session11
for k in 1 2; do
  for tree in old new; do
    if [ $tree = old ]; then export PYTHONPATH=$PWD/oldtree; else export PYTHONPATH=$PWD; fi
    timeout 60 python3 benchmarks/breakdown.py opm-af2-main --train > $OUT/7-breakdown-$tree-$k.log 2>&1
    echo "$tree $k: $(grep 'forward+backward' $OUT/7-breakdown-$tree-$k.log)"
    timeout 60 python3 $L/host_probe.py opm-af2-main > $OUT/7-host-$tree-$k.log 2>&1
    echo "$tree $k: $(grep 'host alone' $OUT/7-host-$tree-$k.log)"
  done
done
