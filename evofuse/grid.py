"""`evofuse bench --grid`: awkward shapes of the operations that declare them (`Operation.grid`: the Outer Product
Mean's, row attention's and pair-weighted averaging's, B 1-3, S 1-2048, N 1-4096, c 8-32, heads 1-8, head_dim 3-64),
each timed forward and forward + backward for evofuse and for eager PyTorch in the same dtype (float32 and bfloat16).
A ratio is evofuse's median time over the other's: evofuse against eager in its dtype, and evofuse bfloat16 against
evofuse float32; the worst of each is printed last and written to grid.csv."""

from __future__ import annotations

import csv
from functools import partial
from pathlib import Path

import torch

from ._timing import measure
from .operations import OPERATIONS, operation
from .suite import Case, make_inputs, make_module


def _cases(ops: str = "all") -> list[Case]:
    """The grid's cases of the operations `ops` ('all': every registered operation that declares a grid, or
    comma-separated keys of those, `Operation.grid`)."""
    gridded = [key for key, op in OPERATIONS.items() if op.grid]
    names = gridded if ops == "all" else [op.strip() for op in ops.split(",")]
    unknown = [op for op in names if op not in gridded]
    if unknown:
        raise ValueError(f"grid: unknown operation(s) {unknown}; expected 'all' or some of {gridded}")
    return [Case(f"{op}-" + "x".join(map(str, s)), op, *s) for op in names for s in OPERATIONS[op].grid]


def _time(case: Case, dtype: torch.dtype, impl: str, train: bool) -> float:
    mod = make_module(case, seed=0).to(device="cuda", dtype=dtype)
    inputs = make_inputs(case, "cuda", dtype, seed=1, fully_masked=False)
    tensors = list(mod.parameters()) if train else []
    if train:
        for t in inputs[:-1]:
            tensors.append(t.requires_grad_(True))
    if impl == "evofuse":
        fn = partial(mod, *inputs)
    else:
        fn = partial(operation(case).reference_call(case), *inputs, *operation(case).module_params(mod))
    with torch.set_grad_enabled(train):
        ms, _ = measure(fn, train, tensors)
    return ms


def run_grid(folder: Path, ops: str = "all") -> list[dict]:
    """Times the grid's shapes of `ops` (see `_cases`), prints the table and the worst ratios, and writes them to
    grid.csv (grid-<ops>.csv for a part of the grid)."""
    cases = _cases(ops)
    rows = []
    print(f"{'shape':<26} {'mode':<8} {'evo fp32':>9} {'eager fp32':>10} {'evo bf16':>9} {'eager bf16':>10} "
          f"{'fp32 ratio':>10} {'bf16 ratio':>10} {'bf16/fp32':>9}", flush=True)
    for case in cases:
        for train in (False, True):
            t = {(impl, dt): _time(case, getattr(torch, dt), impl, train)
                 for impl in ("evofuse", "eager") for dt in ("float32", "bfloat16")}
            row = {"shape": case.name, "mode": "fwd+bwd" if train else "fwd",
                   **{f"{i} {d}": ms for (i, d), ms in t.items()},
                   "fp32 ratio": t["evofuse", "float32"] / t["eager", "float32"],
                   "bf16 ratio": t["evofuse", "bfloat16"] / t["eager", "bfloat16"],
                   "bf16/fp32": t["evofuse", "bfloat16"] / t["evofuse", "float32"]}
            rows.append(row)
            print(f"{row['shape']:<26} {row['mode']:<8} {t['evofuse', 'float32']:9.3f} {t['eager', 'float32']:10.3f} "
                  f"{t['evofuse', 'bfloat16']:9.3f} {t['eager', 'bfloat16']:10.3f} {row['fp32 ratio']:10.2f} "
                  f"{row['bf16 ratio']:10.2f} {row['bf16/fp32']:9.2f}", flush=True)
            torch.cuda.empty_cache()
    for key in ("fp32 ratio", "bf16 ratio", "bf16/fp32"):
        worst = max(rows, key=lambda r: r[key])
        print(f"worst {key}: {worst[key]:.2f} ({worst['shape']}, {worst['mode']})")
    name = "grid.csv" if ops == "all" else f"grid-{'-'.join(dict.fromkeys(c.op for c in cases))}.csv"
    with open(folder / name, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return rows
