# session 17 run 5: the float32 projections kernel's num_stages at opm-af2-main (proj_stages_probe.py)
export PYTHONPATH=$PWD; L=benchmarks/results/NVIDIA-H200/logs/session17
timeout 120 python3 $L/proj_stages_probe.py 2>&1 | grep -v Warn | tee $OUT/5-proj-stages.log
