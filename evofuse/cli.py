"""Command line: `evofuse check` and `evofuse bench` (also `python -m evofuse ...`)."""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None, peers: dict | None = None) -> int:
    """`peers`: the benchmark's peers by operation (`benchmarks/bench.py` passes the lab's), for `bench`."""
    parser = argparse.ArgumentParser(prog="evofuse", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    check = sub.add_parser("check", help="evofuse vs the float64 reference under the numerics contract")
    check.add_argument("--trials", type=int, default=3, help="random trials per case and dtype (default 3)")
    check.add_argument("--dtype", action="append", choices=["float32", "bfloat16", "float16"],
                       help="dtype to check (repeatable; default float32 on CPU, float32 and bfloat16 on CUDA)")
    check.add_argument("--case", action="append", help="suite case to check (repeatable; default: all that fit)")
    check.add_argument("--impl", choices=["auto", "triton", "torch"], default=None,
                       help="'triton' without a GPU runs the kernels in Triton's interpreter (slow; correctness only)")
    check.add_argument("--precision", choices=["default", "fast"], default="default")

    bench = sub.add_parser("bench", help="time evofuse against eager PyTorch, torch.compile and any peers given")
    bench.add_argument("--suite", default="all",
                       help="'all', an operation (its key in evofuse.operations: opm, trimul, ...), 'none' or "
                            "comma-separated case names")
    bench.add_argument("--dtype", action="append", choices=["float32", "bfloat16"],
                       help="evofuse dtype (repeatable; default both)")
    bench.add_argument("--train", action="store_true", help="also time forward+backward")
    bench.add_argument("--out", default="benchmarks/results", help="results folder (a subfolder per GPU)")
    bench.add_argument("--peers", default="all",
                       help="'all', 'none' (evofuse and eager bf16, the baseline, alone) or comma-separated peer names "
                            "(peers: those benchmarks/bench.py gives)")
    bench.add_argument("--host", action="store_true",
                       help="also time each row's host cost: the median time to enqueue one call with the GPU idle")
    bench.add_argument("--grid", nargs="?", const="all", default=None, metavar="OPS",
                       help="also time a grid of awkward shapes against eager PyTorch in the same dtype (worst ratio):"
                            " 'all' (the default) or comma-separated operations (opm, att, pwa)")

    args = parser.parse_args(argv)
    if args.command == "check":
        import os
        import subprocess

        import torch

        from ._runtime import interpreting

        if args.impl == "triton" and not torch.cuda.is_available() and not interpreting():
            # the kernels in Triton's interpreter: Triton reads TRITON_INTERPRET when `import evofuse` defines them,
            # so the check runs in a fresh process that has it set
            command = [sys.executable, "-m", "evofuse", *(sys.argv[1:] if argv is None else argv)]
            return subprocess.call(command, env={**os.environ, "TRITON_INTERPRET": "1"})
        from .check import run_check

        return run_check(args.trials, args.dtype, args.case, args.impl, args.precision)
    from .bench import run_bench

    return run_bench(args.suite, args.dtype, args.train, args.out, args.peers, args.grid, args.host, peers)


if __name__ == "__main__":
    sys.exit(main())
