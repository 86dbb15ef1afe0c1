"""Where a call's time goes, on a CUDA machine: for suite cases, the GPU time of each kernel a call launches
(torch profiler, summed by kernel name) and the host's time to enqueue the call with the GPU idle.

    python benchmarks/kernel_profile.py --case pwa-af3,opm-af2-main [--train] [--dtype bfloat16] [--top 12] [--tiles]

Kernel sums are per call (forward, or forward + backward with --train, the output's gradient all ones and every
gradient set to None before the step, as `evofuse bench` times it), averaged
over 5 calls after 3 warm-up calls. The host time is the wall time of 200 calls at the seed shape of the case's
operation (its kernels take microseconds, so the GPU never holds the host back), per call. Where the host time
exceeds the kernels' sum, do_bench's median measures the host (docs/PERFORMANCE.md). With --tiles, each autotuned
kernel's candidates as Triton's autotuner timed them at its last tuning (ms, its chosen tile first): what a kernel
could reach with the tiles it has.
"""

from __future__ import annotations

import argparse
import collections
import sys
import time

import torch

from evofuse._timing import training_step
from evofuse.suite import make_inputs, make_module, seed_cases, suite_cases


def _call(case, dtype, train):
    """The case's module call (or training step) on seeded inputs, in `dtype`."""
    mod = make_module(case).to(device="cuda", dtype=dtype)
    inputs = make_inputs(case, "cuda", dtype, seed=1, fully_masked=False)
    if train:
        leaves = [t.requires_grad_(True) for t in inputs[:-1]] + list(mod.parameters())
        return training_step(lambda: mod(*inputs), leaves)  # (the gradients set to None first, as evofuse bench's)

    def forward():
        with torch.no_grad():
            return mod(*inputs)
    return forward


def kernel_sums(case, dtype, train, calls=5) -> collections.Counter:
    """GPU ms per call of each kernel name."""
    from torch.profiler import ProfilerActivity, profile

    run = _call(case, dtype, train)
    for _ in range(3):
        run()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            run()
        torch.cuda.synchronize()
    sums = collections.Counter()
    for event in prof.events():
        if event.device_type == torch.autograd.DeviceType.CUDA:
            sums[event.name] += event.device_time / 1000 / calls
    return sums


def host_ms(case, dtype, train, calls=200) -> float:
    """Wall ms per call of the seed shape of the case's operation (GPU idle)."""
    seed = next(c for c in seed_cases() if c.op == case.op)
    run = _call(seed, dtype, train)
    for _ in range(10):
        run()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        run()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / calls * 1000


def tile_timings() -> list[tuple[str, list[tuple[float, str]]]]:
    """(kernel name, [(ms, tile)] fastest first) of every kernel tuned so far, from its autotuner's last tuning."""
    from evofuse._runtime import _AUTOTUNED

    out = []
    for kernel, tuned in _AUTOTUNED.items():
        timings = getattr(tuned.tuner, "configs_timings", None) or {}
        ranked = sorted((times[0] if isinstance(times, (list, tuple)) else times, str(config))
                        for config, times in timings.items())
        out.append((kernel.__name__, ranked))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--case", required=True, help="comma-separated suite case names (evofuse/suite.py)")
    parser.add_argument("--train", action="store_true", help="forward + backward instead of the forward")
    parser.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float16", "float32"))
    parser.add_argument("--top", type=int, default=12, help="kernels listed a case")
    parser.add_argument("--tiles", action="store_true", help="each autotuned kernel's candidate tiles, timed")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("benchmarks/kernel_profile.py needs a CUDA GPU", file=sys.stderr)
        return 2
    names = args.case.split(",")
    unknown = [n for n in names if n not in {c.name for c in suite_cases()}]
    if unknown:
        print(f"unknown case(s) {unknown}; the suite's: {[c.name for c in suite_cases()]}", file=sys.stderr)
        return 2
    dtype = getattr(torch, args.dtype)
    mode = "forward + backward" if args.train else "forward"
    for case in (c for c in suite_cases() if c.name in names):
        sums = kernel_sums(case, dtype, args.train)
        tiles = tile_timings() if args.tiles else ()  # (before the host's calls at the seed shape tune again)
        print(f"{case.name} {args.dtype} {mode}: kernels {sum(sums.values()):.3f} ms a call; host "
              f"{host_ms(case, dtype, args.train):.3f} ms a call at its operation's seed shape")
        for name, ms in sums.most_common(args.top):
            print(f"  {ms:8.3f} ms  {name[:100]}")
        for name, ranked in tiles:
            print(f"  {name}: {len(ranked)} tiles timed at its last tuning")
            for ms, tile in ranked[:args.top]:
                print(f"    {ms:8.3f} ms  {tile[:110]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
