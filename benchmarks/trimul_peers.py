"""Triangle multiplication beside cuEquivariance at the lengths issue targets name, on a CUDA machine: forward and
training step, outgoing and incoming, bf16 module weights and float32 weights under bf16 autocast (the models'
training setting), each row's median ms (`triton.testing.do_bench`) and peak MiB beyond the inputs.

    python benchmarks/trimul_peers.py --residues 384,768,1024,2048 [--out DIR]

Rows that run out of memory or fail keep their reason. A CSV goes to DIR/<gpu-name>/trimul-peers.csv.
"""

from __future__ import annotations

import argparse
import csv
import re
import sys
from functools import partial
from pathlib import Path

import torch
from peers import cueq_trimul_peer

from evofuse._timing import autocast_call, measure
from evofuse.suite import Case, make_inputs, make_module

# (name, module dtype, builder(mod) -> callable(z, mask)) of each implementation
IMPLEMENTATIONS = [("evofuse bf16", torch.bfloat16, lambda mod: mod),
                   ("evofuse fp32 weights, bf16 autocast", torch.float32, autocast_call),
                   ("cuEquivariance bf16", torch.bfloat16, lambda mod: partial(cueq_trimul_peer(), mod)),
                   ("cuEquivariance fp32 weights, bf16 autocast", torch.float32,
                    lambda mod: autocast_call(partial(cueq_trimul_peer(), mod)))]


def run_row(N: int, outgoing: bool, train: bool, name: str, dtype: torch.dtype, build) -> dict:
    case = Case(f"trimul-{N}", "trimul", 1, N, N, 128, 128, 128)
    row = {"N": N, "direction": "outgoing" if outgoing else "incoming", "mode": "fwd+bwd" if train else "fwd",
           "impl": name}
    mod = inputs = fn = None
    try:
        mod = make_module(case, seed=0, outgoing=outgoing).to(device="cuda", dtype=dtype)
        inputs = make_inputs(case, "cuda", dtype, seed=1, fully_masked=False)
        tensors = list(mod.parameters()) if train else []
        if train:
            inputs[0].requires_grad_(True)
            tensors.append(inputs[0])
        fn = build(mod)
        with torch.set_grad_enabled(train):
            ms, peak = measure(lambda: fn(*inputs), train, tensors)
        row.update(ms=round(ms, 4), peak_mib=round(peak, 1), status="ok")
    except Exception as exc:  # a row that fails keeps its reason
        kind = "out of memory" if isinstance(exc, torch.cuda.OutOfMemoryError) else type(exc).__name__
        row.update(ms=None, peak_mib=None, status=f"{kind}: {str(exc).splitlines()[0][:120] if str(exc) else ''}")
    finally:
        mod = inputs = fn = None
        torch.cuda.empty_cache()
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--residues", default="384,768,1024,2048", help="comma-separated N")
    parser.add_argument("--directions", default="outgoing,incoming")
    parser.add_argument("--out", default="benchmarks/results")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("benchmarks/trimul_peers.py needs a CUDA GPU", file=sys.stderr)
        return 2
    gpu = torch.cuda.get_device_name()
    folder = Path(args.out) / re.sub(r"[^A-Za-z0-9_.-]+", "-", gpu)
    folder.mkdir(parents=True, exist_ok=True)
    print(f"triangle multiplication on {gpu}, torch {torch.__version__}", flush=True)
    rows = []
    for N in (int(n) for n in args.residues.split(",")):
        for outgoing in (d == "outgoing" for d in args.directions.split(",")):
            for train in (False, True):
                for name, dtype, build in IMPLEMENTATIONS:
                    row = run_row(N, outgoing, train, name, dtype, build)
                    rows.append(row)
                    shown = f"{row['ms']:9.3f} ms {row['peak_mib']:9.1f} MiB" if row["ms"] is not None else row["status"]
                    print(f"  N {N:<5} {row['direction']:<8} {row['mode']:<7} {name:<44} {shown}", flush=True)
                with open(folder / "trimul-peers.csv", "w", newline="") as f:  # (kept as it goes: a time limit)
                    writer = csv.DictWriter(f, fieldnames=["N", "direction", "mode", "impl", "ms", "peak_mib",
                                                           "status"])
                    writer.writeheader()
                    writer.writerows(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
