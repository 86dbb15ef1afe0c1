"""Times every candidate config of both kernels at the main suite shapes (H200 notes material).

python3 benchmarks/probe_configs.py  ->  one line per (kernel, dtype, config): median ms or the error.
"""

import torch
import triton
import triton.testing

import evofuse.ops._common as common
from evofuse.ops import outer_product_mean as opm
from evofuse.ops import row_attention as att
from evofuse.suite import SUITE, make_inputs, make_module


def probe(case_name, dtype):
    case = next(c for c in SUITE if c.name == case_name)
    mod = make_module(case).cuda().to(dtype)
    inputs = make_inputs(case, "cuda", dtype, fully_masked=False)
    op = opm if case.op == "opm" else att
    configs = op._configs()
    real_configs = op._configs
    for cfg in configs:
        op._configs = lambda cfg=cfg: [cfg]
        try:
            with torch.no_grad():
                ms = triton.testing.do_bench(lambda: mod(*inputs, impl="triton"), warmup=10, rep=40, return_mode="median")
            result = f"{ms:8.3f} ms  {case.flops / ms / 1e9:6.1f} TFLOP/s"
        except Exception as exc:  # report and go on
            result = f"{type(exc).__name__}: {str(exc).splitlines()[0][:100]}"
        print(f"{case_name:<14} {str(dtype):<15} {cfg.kwargs} w{cfg.num_warps} s{cfg.num_stages}: {result}", flush=True)
    op._configs = real_configs


if __name__ == "__main__":
    import os

    os.environ["EVOFUSE_AUTOTUNE"] = "0"
    assert common.autotune_enabled() is False
    for name in ("opm-af2-main", "att-af2-main"):
        for dt in (torch.bfloat16, torch.float32):
            probe(name, dt)
