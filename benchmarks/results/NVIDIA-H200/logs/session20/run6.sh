# session 20 run 6 (the final code): every OPM gpu test of test_gpu.py and the CachedLaunch/launch-path ones (the
# forwards too, whose 16-bit Hopper launches now go through the Gluon kernel's binary after a key's first).
export PYTHONPATH=$PWD
timeout 400 python3 -m pytest -q -n 16 tests/test_gpu.py tests/test_gpu_launch_path.py tests/test_cached_launch.py -k "opm or launch or replay" > $OUT/6-tests.log 2>&1; grep -E "passed|failed|FAILED|Error" $OUT/6-tests.log | head -20
