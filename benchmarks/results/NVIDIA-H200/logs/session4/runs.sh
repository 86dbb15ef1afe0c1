# The runs (and the rows of each) that session 4's table merges; sourced by merge.sh here and by session 5's.
L=benchmarks/results/NVIDIA-H200/logs/session4
S3=benchmarks/results/NVIDIA-H200/logs/session3
peers() { local out=""; for c in "$@"; do for m in "fwd " "fwd+bwd "; do
  for p in eager torch folded chunked; do out+="$c $m$p,"; done; done; done; echo "${out%,}"; }
S4_RUNS=(
  "$L/run5-suite.json:opm-seed ,att-,$(peers opm-af2-main opm-af2-extra opm-long),opm-af2-extra fwd+bwd evofuse"
  "$L/run6-opm.json:opm-af2-main fwd evofuse,opm-af2-main fwd+bwd evofuse,opm-long fwd evofuse,opm-long fwd+bwd evofuse"
  "$L/run6-opm32.json:opm-af2-main fwd evofuse fp32"
  "$L/run5-fwd32.json:att-af2-main fwd evofuse fp32"
  "$S3/run-fwd.json:opm-af2-extra fwd evofuse,opm-long fwd evofuse fp32,att-long fwd evofuse fp32,opm-seed fwd evofuse fp32,att-seed fwd evofuse fp32"
)
