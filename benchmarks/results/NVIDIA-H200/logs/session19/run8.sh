# session 19 run 8: run 7's bench read the bf16 training step at 2.174 ms (run 6: 1.754) on code that differs only in
# the Gluon kernel's autotuning and the tapes' tag checks: the step in alternating processes, the final code against
# run 4's (.out/base2: taped, the multi-pass training forward), and the bench's training row alone twice.
export PYTHONPATH=$PWD
timeout 200 python3 benchmarks/step_ab.py --rounds 2 . .out/base2 > $OUT/8-step-ab.log 2>&1; grep -v Warn $OUT/8-step-ab.log
for k in 1 2; do timeout 60 python3 -m evofuse bench --suite opm-af2-main --dtype bfloat16 --train --peers none --out $OUT/b$k > $OUT/8-bench-$k.log 2>&1; grep -E "^  opm-af2-main   fwd\+bwd" $OUT/8-bench-$k.log; done
find $OUT -name "*.png" -delete
