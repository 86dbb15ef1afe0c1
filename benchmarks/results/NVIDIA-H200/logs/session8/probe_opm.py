"""Session 8 probe (temporary): the bf16 Outer Product Mean kernel's device time against S and pair_dim
under given configs, to split it into main loop and epilogue; `--ncu` runs one launch for ncu.

python3 probe_opm.py [--ncu] [--configs a,b,...] [--grid]
"""
import argparse
import os

os.environ["EVOFUSE_AUTOTUNE"] = "0"
import torch  # noqa: E402
import triton  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402

from evofuse.ops import outer_product_mean as opm  # noqa: E402
from evofuse.suite import Case, make_inputs, make_module  # noqa: E402

EVERY = opm._configs()
EVERY2 = opm._two_pass_configs()


REF = {}


def kernel_ms(case, dtype=torch.bfloat16, reps=20):
    mod = make_module(case).cuda().to(dtype)
    inputs = make_inputs(case, "cuda", dtype, fully_masked=False)
    if case not in REF:
        with torch.no_grad():
            REF[case] = make_module(case).cuda().double()(*[t.double() for t in inputs], impl="torch")
    with torch.no_grad():
        out = mod(*inputs, impl="triton").double()
    err = ((out - REF[case]).abs().max() / REF[case].abs().max()).item()
    with torch.no_grad():
        for _ in range(3):
            mod(*inputs, impl="triton")
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(reps):
                mod(*inputs, impl="triton")
            torch.cuda.synchronize()
    k = [e for e in prof.key_averages() if e.key.startswith("_opm_")]
    fwd = triton.testing.do_bench(lambda: mod(*inputs, impl="triton"), warmup=10, rep=50, return_mode="median")
    return sum(e.device_time_total for e in k) / reps / 1e3, fwd, err


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--ncu", action="store_true")
    p.add_argument("--configs", default="0")
    p.add_argument("--grid", action="store_true")
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--two-pass", default="", help="indices of _two_pass_configs() to time (one-pass first, as --configs)")
    p.add_argument("--extra", default="", help="(TILE_ROWS, COLS_FACTOR, BLOCK_S, BLOCK_R, warps, stages);...")
    a = p.parse_args()
    dtype = getattr(torch, a.dtype)
    picks = [int(x) for x in a.configs.split(",")]
    for k, t in enumerate(x for x in a.extra.split(";") if x):
        tr, cf, bs, br, w, st = eval(t)
        EVERY.append(triton.Config({"TILE_ROWS": tr, "COLS_FACTOR": cf, "BLOCK_S": bs, "BLOCK_R": br, "GROUP_I": 8},
                                   num_warps=w, num_stages=st))
        picks.append(len(EVERY) - 1)
    if a.ncu:
        opm.TWO_PASS = bool(a.two_pass)
        opm._configs = lambda: [EVERY[picks[0]]]
        opm._two_pass_configs = lambda: [EVERY2[int(a.two_pass or 0)]]
        case = Case("x", "opm", 1, 512, 384, 256, 128, 32)
        mod = make_module(case).cuda().to(dtype)
        inputs = make_inputs(case, "cuda", dtype, fully_masked=False)
        with torch.no_grad():
            for _ in range(3):
                mod(*inputs, impl="triton")
        torch.cuda.synchronize()
        return
    shapes = [(512, 128)]
    if a.grid:
        shapes = [(s, r) for s in (256, 512, 1024) for r in (32, 64, 128, 256)]
    runs = [(False, EVERY[k]) for k in picks] + [(True, EVERY2[int(k)]) for k in a.two_pass.split(",") if k]
    for two_pass, cfg in runs:
        opm.TWO_PASS = two_pass
        if two_pass:
            opm._two_pass_configs = lambda cfg=cfg: [cfg]
        else:
            opm._configs = lambda cfg=cfg: [cfg]
        print(f"{'two-pass' if two_pass else 'one-pass'}: {cfg.kwargs} warps={cfg.num_warps} stages={cfg.num_stages}",
              flush=True)
        for s, r in shapes:
            try:
                ms, fwd, err = kernel_ms(Case("x", "opm", 1, s, 384, 256, r, 32), dtype)
            except Exception as exc:  # out of resources
                print(f"  S={s:5d} R={r:4d}  {type(exc).__name__}: {str(exc)[:200]}", flush=True)
                break
            flops = 2 * 384 * 384 * 1024 * (s + r)
            print(f"  S={s:5d} R={r:4d}  kernel {ms:.4f} ms  {flops / ms / 1e9:6.1f} TFLOP/s  forward {fwd:.4f} ms"
                  f"  err {err:.2e}", flush=True)
    opm._configs = lambda: EVERY


if __name__ == "__main__":
    main()
