"""The forward floors that no change may lose (SPEC section 6), on a CUDA machine, for whichever evofuse Python
imports first: each case's module forward, median ms and peak MiB beyond its inputs and parameters, as `evofuse
bench` times a forward (`_timing.measure`, gradients off, seeded inputs), against its floor (5% for noise).

    python benchmarks/floors.py --label after [--out DIR]
    PYTHONPATH=/path/to/an/older/checkout python benchmarks/floors.py --label before  # the same run, before a change

Rows go to stdout and DIR/<gpu-name>/floors.csv (appended, so that a before and an after share one file); the exit
status is 1 when a floor is lost. Only the suite's cases and `_timing.measure` are read from evofuse, so an older
checkout times the same way.
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

import torch

# (case, dtype, what is bounded: "ms" or "mib", the floor), SPEC section 6
FLOORS = (("opm-af2-main", "bfloat16", "ms", 0.55), ("att-af2-main", "bfloat16", "ms", 1.2),
          ("pwa-boltz", "bfloat16", "ms", 0.46), ("col-af2", "bfloat16", "ms", 1.65),
          ("opm-long", "float32", "mib", 704.0), ("att-long", "bfloat16", "mib", 340.0))
NOISE = 1.05


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--label", required=True, help="the rows' name for this checkout (before, after, ...)")
    parser.add_argument("--out", default="benchmarks/results")
    args = parser.parse_args(argv)
    import evofuse
    from evofuse import suite
    from evofuse._timing import measure

    cases = {c.name: c for c in (suite.SUITE if hasattr(suite, "SUITE") else suite.suite_cases())}
    folder = Path(args.out) / torch.cuda.get_device_name().replace(" ", "-")
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "floors.csv"
    fields = ["label", "case", "dtype", "ms", "peak_mib", "bounded", "floor", "kept"]
    print(f"evofuse from {Path(evofuse.__file__).parent}", flush=True)
    lost = 0
    with open(path, "a", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        if f.tell() == 0:
            writer.writeheader()
        for name, dt, bounded, floor in FLOORS:
            case, dtype = cases[name], getattr(torch, dt)
            mod = suite.make_module(case, seed=0).to("cuda", dtype)
            inputs = suite.make_inputs(case, "cuda", dtype, seed=1, fully_masked=False)
            with torch.no_grad():
                ms, mib = measure(lambda: mod(*inputs), False, [])
            kept = (ms if bounded == "ms" else mib) <= floor * NOISE
            lost += not kept
            writer.writerow({"label": args.label, "case": name, "dtype": dt, "ms": round(ms, 4),
                             "peak_mib": round(mib, 1), "bounded": bounded, "floor": floor, "kept": kept})
            print(f"  {args.label:<8} {name:<14} {dt:<9} {ms:8.4f} ms {mib:8.1f} MiB   floor {floor} {bounded}: "
                  + ("kept" if kept else "LOST"), flush=True)
            mod = inputs = None
            torch.cuda.empty_cache()
    return 1 if lost else 0


if __name__ == "__main__":
    sys.exit(main())
