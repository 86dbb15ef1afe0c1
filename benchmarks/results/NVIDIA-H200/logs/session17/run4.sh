# session 17 run 4: memcheck over the tests run 3's memcheck did not reach: the fused float32 LayerNorm-linear with
# split_ln_weights' operands (parameter scales 1e-7 to 3e3, maxima, NaN rows), ceil_log2, and the Outer Product Mean
# far outside float16's range (the normalizers and the operands' scales at 1e-7 and 1e6).
export PYTHONPATH=$PWD
timeout 400 compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m pytest -q tests/test_linear_kernel.py tests/test_opm_kernel.py -k "split_ln or ceil or far_outside" > $OUT/4-memcheck.log 2>&1; echo "memcheck rc=$?" >> $OUT/4-memcheck.log; tail -4 $OUT/4-memcheck.log
