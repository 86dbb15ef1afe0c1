# session 12 run 3 (and 4, with the transposed form added): forms of the LayerNorm + projection backward at opm-af2-main bf16, timed alone (lnbwd_variants.py)
export PYTHONPATH=$PWD; L=benchmarks/results/NVIDIA-H200/logs/session12
timeout 200 python3 $L/lnbwd_variants.py > $OUT/$1-lnbwd-variants.log 2>&1; grep -v Warn $OUT/$1-lnbwd-variants.log
