"""evofuse inside the models, on a CUDA machine: each installed family's MSA block and pair-stack block at the model's
default sizes, and the modules evofuse replaces in it, unpatched against patched (those it leaves: unpatched alone),
forward and training step, float32 and bfloat16 autocast (the models' mixed precision), in one run. Where a model has
kernels of its own (cuEquivariance's triangle kernels in Boltz-2, Protenix and OpenFold3), its unpatched block is timed
with them too.

    python benchmarks/models.py [--families boltz,boltz-pairformer,...] [--msa-rows 1024] [--residues 384]
        [--precisions fp32,bf16]
    python benchmarks/models.py --families boltz-pairformer-stack --residues 1024 --precisions bf16  # (and 2048)
    python benchmarks/models.py --families boltz-pairformer-stack --layers 1 --modes fwd --residues 2048,4096,6000 \
        --precisions bf16  # inference per layer at length, the model's own chunking in its eval path
    python benchmarks/models.py --never-slower  # each patched module's speedup; exit status 1 if one that ran the
        # fused kernels is below 1 (below its crossover a patched module runs the model's own: printed, not judged)
    python benchmarks/models.py --families boltz-pairformer,protenix-pairformer --precisions bf16 --graphs
        # each block's paths replayed from one CUDA graph a call too: the GPU's time without the host's

Median ms of `triton.testing.do_bench` and peak MiB beyond the inputs; a table on stdout and
<out>/<gpu>/models.csv. The model packages go in without their dependency stacks:
`pip install -e '.[models]' && pip install --no-deps boltz==2.2.1 protenix==2.0.0 openfold3==0.5.0`.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import csv
import importlib
import inspect
import statistics
import sys
from pathlib import Path

import torch
from families import FAMILIES  # (benchmarks/families.py, beside this script)

from evofuse._timing import graphed_step, measure
from evofuse.integrations._crossover import RunsOriginal


def _scalar(out) -> torch.Tensor:
    """One number from a module's output(s), for the training step's backward."""
    outs = out if isinstance(out, tuple) else (out,)
    return sum(o.float().sum() for o in outs if o is not None)


FIELDS = ["family", "residues", "what", "precision", "mode", "impl", "ms", "peak_mib", "status", "runs"]


# `--never-slower` times each module's paths this many times, interleaved, and keeps each one's median: one timing of a
# host-bound call moves by tens of percent with the host's load
ROUNDS = 3


def _runs(fn) -> str:
    """"original" where a call of a patched module's `fn` hands it to the model's module (its crossover), else "fused"."""
    handed, original = [], RunsOriginal.original
    RunsOriginal.original = lambda self, *args, **kwargs: handed.append(self) or original(self, *args, **kwargs)
    try:
        fn()
    finally:
        RunsOriginal.original = original
    return "original" if handed else "fused"


def bench_family(name: str, S: int, N: int, precisions: list[str], modes=("fwd", "fwd+bwd"), modules_only=False,
                 sink=None, graphs=False, **options) -> list[dict]:
    """`options`: the stack families' `layers` and `checkpointing` (the others take none). `modules_only`: the
    patched modules alone, no block, each path's median of `ROUNDS` interleaved timings; `sink(row)` takes each row as
    it is measured (a time limit keeps those done); `graphs`: each block's paths also replayed from a CUDA graph
    ("<path> CUDA graph", no peak)."""
    package, builder = FAMILIES[name]
    integration = importlib.import_module(f"evofuse.integrations.{package}")
    torch.manual_seed(0)
    taken = inspect.signature(builder).parameters
    block, inputs, run, modules, variants = builder(S, N, **{k: v for k, v in options.items() if k in taken})
    block = block.cuda()
    patched = copy.deepcopy(block)
    replaced = integration.patch(patched)
    inputs = [t.cuda() for t in inputs]
    floats = inputs[:2]  # m and z
    rows = []
    print(f"  {name}: patched {', '.join(replaced)}", flush=True)
    block_impls = [("unpatched", block, run), ("evofuse", patched, run)] + [
        (label, block if which == "unpatched" else patched, call) for label, (which, call) in variants.items()]
    block_impls += [(f"{impl} CUDA graph", mod, call) for impl, mod, call in block_impls] if graphs else []
    targets = [] if modules_only else [("block", block_impls)]
    targets += [  # (a module evofuse does not replace: its share of the block, unpatched)
        (path, [("unpatched", block.get_submodule(path), call)]
         + ([("evofuse", patched.get_submodule(path), call)] if path in replaced else []))
        for path, call in modules.items() if path in replaced or not modules_only]
    rounds = ROUNDS if modules_only else 1
    for what, impls in targets:
        for precision in precisions:
            for train in [mode == "fwd+bwd" for mode in modes]:
                times: dict[str, list] = {}
                for impl, mod, call in impls * rounds:  # (rounds interleaved: drift of the host falls on both)
                    mod.train(train)  # forward rows as inference runs them (the models' eval paths)
                    for t in floats:
                        t.requires_grad_(train)
                    grad_mode = contextlib.nullcontext() if train else torch.no_grad()
                    graph = impl.endswith("CUDA graph")
                    # (a graph's casts made in it: autocast's cache is freed when its region ends)
                    autocast = torch.autocast("cuda", dtype=torch.bfloat16, enabled=precision != "fp32",
                                              cache_enabled=not graph)

                    def fn(mod=mod, call=call, autocast=autocast, grad_mode=grad_mode):
                        with autocast, grad_mode:
                            return _scalar(call(mod, *inputs))
                    try:
                        ms, peak = measure(graphed_step(fn, train), False, []) if graph else measure(fn, train, floats)
                        peak = None if graph else peak
                        status = "ok"
                    except Exception as exc:  # out of memory, or a model's own kernels not installed: kept as a row
                        ms, peak, status = None, None, f"{type(exc).__name__}: {str(exc)[:60]}"
                    times.setdefault(impl, []).append(ms)
                    if len(times[impl]) < rounds:
                        continue
                    ms = None if None in times[impl] else statistics.median(times[impl])
                    runs = _runs(fn) if impl == "evofuse" and what != "block" and ms is not None else ""
                    row = dict(family=name, residues=N, what=what, precision=precision, mode="fwd+bwd" if train else "fwd",
                               impl=impl, ms=ms, peak_mib=peak, status=status, runs=runs)
                    rows.append(row)
                    if sink is not None:
                        sink(row)
                    shown = status if ms is None else f"{ms:8.3f} ms" + ("" if peak is None else f" {peak:9.1f} MiB")
                    print(f"  {name:10s} N {N:<5d} {what:28s} {precision:14s} {row['mode']:8s} {impl:28s} {shown}",
                          flush=True)
                    torch.cuda.empty_cache()
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--families", default=",".join(FAMILIES))
    parser.add_argument("--msa-rows", type=int, default=1024)
    parser.add_argument("--residues", default="384", help="N, or several: 2048,4096")
    parser.add_argument("--layers", type=int, default=4, help="the stack families' layers")
    parser.add_argument("--checkpointing", action="store_true",
                        help="the stack families' activation checkpointing in training, as the models train")
    parser.add_argument("--modes", default="fwd,fwd+bwd", help="fwd (inference), fwd+bwd (training step) or both")
    parser.add_argument("--precisions", default="fp32,bf16", help="fp32, bf16 (autocast) or both")
    parser.add_argument("--out", default="benchmarks/results")
    parser.add_argument("--graphs", action="store_true", help="each block's paths replayed from a CUDA graph too")
    parser.add_argument("--never-slower", action="store_true",
                        help="the patched modules alone: each one's speedup; fail if one that ran fused is below 1")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("benchmarks/models.py needs a CUDA GPU", file=sys.stderr)
        return 2
    rows = []
    folder = Path(args.out) / torch.cuda.get_device_name().replace(" ", "-")
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "models.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=FIELDS)
        writer.writeheader()

        def sink(row):
            writer.writerow(row)
            f.flush()
        for name in args.families.split(","):
            try:
                precisions = [{"fp32": "fp32", "bf16": "bf16 autocast"}[p] for p in args.precisions.split(",")]
                for N in (int(n) for n in args.residues.split(",")):
                    rows += bench_family(name, args.msa_rows, N, precisions, args.modes.split(","),
                                         modules_only=args.never_slower, sink=sink, graphs=args.graphs,
                                         layers=args.layers, checkpointing=args.checkpointing)
            except ImportError as exc:
                print(f"  {name}: not installed ({exc})")
    print(f"written to {folder / 'models.csv'}")
    if args.never_slower:
        import tables  # (benchmarks/tables.py, beside this script)

        rows = [{k: "" if v is None else str(v) for k, v in row.items()} for row in rows]
        print(tables.modules(rows))
        slower = [r for r in tables.module_ratios(rows) if r[-2] < 1]
        for family, N, what, precision, mode, before, after, ratio, runs in slower:
            print(f"slower ({runs}): {family} N {N} {what} {precision} {mode}: {after:.3f} ms patched, {before:.3f}")
        return 1 if any(r[-1] == "fused" for r in slower) else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
