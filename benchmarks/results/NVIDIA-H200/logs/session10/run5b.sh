# on the machine run 5a left warm: the rest of cuEquivariance, then row attention at both suite shapes beside every peer
export PYTHONPATH=$PWD:/tmp/site; L=benchmarks/results/NVIDIA-H200/logs/session10
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl2/*.whl 2>&1 | tail -2
python3 -c "import cuequivariance_torch, torch, triton; print('cuequivariance_torch', cuequivariance_torch.__version__, 'torch', torch.__version__, 'triton', triton.__version__)"
timeout 400 python3 -m evofuse bench --suite att-af2-main,att-long --dtype bfloat16 --train --peers "eager fp32,FlexAttention bf16,cuEquivariance bf16" --out $OUT/att 2>&1 | tee $OUT/5b-bench-att.log | grep -E "^  (opm|att)-"
find $OUT/att -type f ! -name results.json -delete
