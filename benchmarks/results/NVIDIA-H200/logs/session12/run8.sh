# session 12 run 8: opm-af2-main's float32 forward beside eager and torch.compile (run 1 measured it, but its JSON did
# not come back: a call returns at most 8 files), for the table; the code is run 6's
export PYTHONPATH=$PWD
timeout 200 python3 -m evofuse bench --suite opm-af2-main --dtype float32 --peers "eager fp32,torch.compile fp32" --out $OUT/opm32 > $OUT/8-bench-opm32.log 2>&1; grep -E "^  (opm|att)-" $OUT/8-bench-opm32.log
find $OUT/opm32 -type f ! -name results.json -delete
