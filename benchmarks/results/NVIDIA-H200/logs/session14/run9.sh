# session 14 run 9: row attention's training step on the final code (its launches through TunedLaunch's one-lookup
# path since this session; not re-timed since session 10), beside eager fp32 and FlexAttention in one run
export PYTHONPATH=$PWD
timeout 170 python3 -m evofuse bench --suite att-af2-main --dtype bfloat16 --train --peers "eager fp32,FlexAttention bf16" --out $OUT/att > $OUT/9-bench-att.log 2>&1; grep -E "^  (opm|att)-" $OUT/9-bench-att.log
find $OUT/att -type f ! -name results.json -delete
