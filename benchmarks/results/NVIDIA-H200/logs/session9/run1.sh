export PYTHONPATH=$PWD; L=benchmarks/results/NVIDIA-H200/logs/session9
nvidia-smi --query-gpu=name,clocks.sm --format=csv,noheader
python3 -c "import torch, triton; print(torch.__version__, triton.__version__)"
( timeout 60 python3 $L/fp32_ab.py --tag new --alpha
  timeout 45 python3 $L/fp32_ab.py --tag new-shift0 --shift 0
  cd old7 && PYTHONPATH=$PWD timeout 45 python3 ../$L/fp32_ab.py --tag old7
  cd .. && timeout 45 python3 $L/fp32_ab.py --tag new-again
  timeout 100 python3 benchmarks/configs.py opm-af2-main --dtype float32
  cd old7 && PYTHONPATH=$PWD timeout 100 python3 benchmarks/configs.py opm-af2-main --dtype float32 ) 2>&1 | grep -v Warn | tee $OUT/1-fp32-ab.log
