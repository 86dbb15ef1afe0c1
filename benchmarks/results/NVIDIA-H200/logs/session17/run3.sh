# session 17 run 3: memcheck over the new float32 operand kernels (split_ln_weights, out_proj's halves, a/b halves)
# and the multi-pass kernel's small tests; the OPM autograd/library tests on CUDA on the merged code; two programs a
# multiprocessor for the multi-pass kernel (occ_probe.py: 4-warp configs, the bf16 forward's 0.5 ms target).
export PYTHONPATH=$PWD; L=benchmarks/results/NVIDIA-H200/logs/session17
timeout 200 compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m pytest -q tests/test_opm_kernel.py tests/test_linear_kernel.py -k "multipass_kernel_takes or chunks or hidden_dim_64 or split_ln or ceil or far_outside or wide_msa" > $OUT/3-memcheck.log 2>&1; echo "memcheck rc=$?" >> $OUT/3-memcheck.log; tail -3 $OUT/3-memcheck.log
timeout 70 python3 -m pytest -q -n 8 tests/test_autograd.py tests/test_library.py -k opm 2>&1 | grep -v DEBUG > $OUT/3-tests2.log; grep -E "passed|failed|FAILED|no tests" $OUT/3-tests2.log | head -6
timeout 240 python3 $L/occ_probe.py 2>&1 | grep -v Warn | tee $OUT/3-occ-probe.log
