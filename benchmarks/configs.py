"""Forward time of a suite case under each candidate config of its kernel, one config at a time.

python3 benchmarks/configs.py CASE [CASE ...] [--dtype bfloat16|float16|float32] [--precision default|fast]
Shows how far apart the candidates are (the autotuner keeps only the best) and whether a candidate
fails to compile (out of shared memory or registers).
"""

import argparse
import os

os.environ["EVOFUSE_AUTOTUNE"] = "0"  # each config is launched directly, as the default would be

import torch  # noqa: E402
import triton  # noqa: E402
import triton.testing  # noqa: E402

from evofuse.ops import outer_product_mean, row_attention  # noqa: E402
from evofuse.suite import SUITE, make_inputs, make_module  # noqa: E402


def sweep(case, dtype, precision):
    module = outer_product_mean if case.op == "opm" else row_attention
    mod = make_module(case, precision=precision).cuda().to(dtype)
    inputs = make_inputs(case, "cuda", dtype)
    every = module._configs()
    rows = []
    for cfg in every:
        module._configs = lambda cfg=cfg: [cfg]
        try:
            with torch.no_grad():
                ms = triton.testing.do_bench(lambda: mod(*inputs, impl="triton"), warmup=10, rep=50,
                                             return_mode="median")
        except (triton.runtime.errors.OutOfResources, RuntimeError, IndexError) as err:  # IndexError: pruned
            rows.append((float("inf"), cfg, type(err).__name__))
            continue
        rows.append((ms, cfg, ""))
    module._configs = lambda: every
    print(f"\n{case.name} {dtype} {precision}:")
    for ms, cfg, err in sorted(rows, key=lambda r: r[0]):
        print(f"  {ms:8.3f} ms  {cfg.kwargs} warps={cfg.num_warps} stages={cfg.num_stages} {err}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("cases", nargs="+")
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    parser.add_argument("--precision", default="default", choices=["default", "fast"])
    args = parser.parse_args()
    by_name = {c.name: c for c in SUITE}
    for name in args.cases:
        sweep(by_name[name], getattr(torch, args.dtype), args.precision)
