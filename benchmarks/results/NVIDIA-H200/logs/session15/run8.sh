# session 15 run 8: the bench's opm-af2-main step (evofuse alone) in alternating processes, the autograd engine's
# device thread (default) against every backward on the calling thread (--backward-on-caller), three pairs
export PYTHONPATH=$PWD
for i in 1 2 3; do
  timeout 45 python3 -m evofuse bench --suite opm-af2-main --dtype bfloat16 --train --peers none --out /tmp/e$i 2>&1 | grep -E "fwd\+bwd" | sed "s/^/engine /" | tee -a $OUT/8-threads.log
  timeout 45 python3 -m evofuse bench --suite opm-af2-main --dtype bfloat16 --train --peers none --backward-on-caller --out /tmp/c$i 2>&1 | grep -E "fwd\+bwd" | sed "s/^/caller /" | tee -a $OUT/8-threads.log
done
