"""A/B of a call between code versions on one machine, in alternating processes.

python3 benchmarks/step_ab.py [--case opm-af2-main] [--dtype bfloat16] [--forward] [--rounds 3] DIR [DIR ...]

Each DIR is a checkout's root (its `evofuse` package is imported, put first on PYTHONPATH); "." is this one. The
processes alternate between the versions, `--rounds` of each, so that every version meets the same host. Each
process measures the bench's call (the training step: forward, then backward with an all-ones output gradient,
gradients accumulating; or the forward without gradients with `--forward`):
- the host's own time a call, warm: 20 calls in a row behind ~0.1 s of queued device work, so that no call waits on
  the device (median of 7 such runs);
- PyTorch's `x.add_(1)` time on that host;
- five consecutive `triton.testing.do_bench` medians.
On the lent H200 hosts the same code's step read 1.93-1.98 ms in some processes and 2.2-2.8 in others (session 15):
compare versions by the host time over several processes each, not by one reading.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path


def worker(case_name: str, dtype_name: str, forward: bool) -> dict:
    import torch
    import triton.testing

    import evofuse
    from evofuse.bench import training_step
    from evofuse.suite import SUITE, make_inputs, make_module

    case = next(c for c in SUITE if c.name == case_name)
    dtype = getattr(torch, dtype_name)
    mod = make_module(case).cuda().to(dtype)
    inputs = make_inputs(case, "cuda", dtype, fully_masked=False)
    if forward:
        def call():
            with torch.no_grad():
                mod(*inputs)
    else:
        inputs = [t.requires_grad_(True) if t.dim() == 4 else t for t in inputs]
        call = training_step(lambda: mod(*inputs))
    for _ in range(5):
        call()
    torch.cuda.synchronize()
    x = torch.zeros(1, device="cuda")
    start = time.perf_counter()
    for _ in range(2000):  # (not behind queued work: 2000 launches would fill the launch queue and wait)
        x.add_(1)
    torch.cuda.synchronize()
    add_us = (time.perf_counter() - start) / 2000 * 1e6
    host = []
    for _ in range(7):
        torch.cuda._sleep(200_000_000)  # ~0.1 s of device time ahead of the calls
        start = time.perf_counter()
        for _ in range(20):
            call()
        host.append((time.perf_counter() - start) / 20 * 1e6)
        torch.cuda.synchronize()
    bench = [triton.testing.do_bench(call, return_mode="median") for _ in range(5)]
    return {"evofuse": str(Path(evofuse.__file__).parent.parent), "host_us": statistics.median(host),
            "add_us": add_us, "do_bench_ms": bench}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dirs", nargs="*")
    parser.add_argument("--case", default="opm-af2-main")
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    parser.add_argument("--forward", action="store_true", help="the forward without gradients, not the training step")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(args.case, args.dtype, args.forward)))
        return 0
    if not args.dirs:
        parser.error("give at least one DIR")
    results = {d: [] for d in args.dirs}
    what = "forward" if args.forward else "training step"
    print(f"{args.case} {args.dtype} {what}: host us a call (warm), x.add_ us, do_bench ms x5 (one line a process)")
    for _ in range(args.rounds):
        for d in args.dirs:
            env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(Path(d).resolve()), os.environ.get("PYTHONPATH", "")]))
            cmd = [sys.executable, __file__, "--worker", "--case", args.case, "--dtype", args.dtype]
            out = subprocess.run(cmd + (["--forward"] if args.forward else []), env=env, capture_output=True, text=True)
            if out.returncode:
                print(f"  {d}: failed\n{out.stderr[-2000:]}")
                return 1
            r = json.loads(out.stdout.strip().splitlines()[-1])
            results[d].append(r)
            print(f"  {d:<24} host {r['host_us']:7.0f}  x.add_ {r['add_us']:5.1f}  do_bench "
                  + " ".join(f"{b:.3f}" for b in r["do_bench_ms"]), flush=True)
    print("per version: median over processes of the host time; each process's median do_bench")
    for d, rs in results.items():
        print(f"  {d:<24} host {statistics.median(r['host_us'] for r in rs):7.0f} us   do_bench "
              + " ".join(f"{statistics.median(r['do_bench_ms']):.3f}" for r in rs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
