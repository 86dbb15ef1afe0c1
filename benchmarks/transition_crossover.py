"""The transition's crossover, on a CUDA machine: evofuse's against the models' eager module (LayerNorm, fc1 and
fc2, SwiGLU, fc3: Boltz-2's `Transition`, hidden 4c, no biases), float32 weights under bf16 autocast (the models'
setting), eager calls, by rows M and width c: median ms of `triton.testing.do_bench`, forward and training step.

    python benchmarks/transition_crossover.py [--widths 384,128] [--rows 256,512,...,147456] [--out DIR]

A CSV goes to DIR/<gpu-name>/transition-crossover.csv; the transitions' row in `integrations._crossover.CROSSOVERS`
(the integrations' rule) is read from it (docs/PERFORMANCE.md).
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

import torch

from evofuse import functional
from evofuse._timing import training_step

ROWS = "256,512,1024,2048,4096,8192,16384,65536,147456"


class Eager(torch.nn.Module):
    """The models' transition as their eager code runs it."""

    def __init__(self, c: int):
        super().__init__()
        self.norm = torch.nn.LayerNorm(c)
        self.fc1 = torch.nn.Linear(c, 4 * c, bias=False)
        self.fc2 = torch.nn.Linear(c, 4 * c, bias=False)
        self.fc3 = torch.nn.Linear(4 * c, c, bias=False)

    def forward(self, x):
        x = self.norm(x)
        return self.fc3(torch.nn.functional.silu(self.fc1(x)) * self.fc2(x))


def _fused(m: Eager, x: torch.Tensor) -> torch.Tensor:
    return functional.transition(x, None, m.norm.weight, m.norm.bias, m.fc1.weight, None, m.fc2.weight, None,
                                 m.fc3.weight, None)


def _times(m: Eager, x: torch.Tensor, call) -> tuple[float, float]:
    """(forward ms, training step ms) of call() under bf16 autocast."""
    import triton.testing

    def forward():
        with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
            return call()

    def body():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            return call().float()
    step = training_step(body, [x, *m.parameters()])
    f = triton.testing.do_bench(forward, warmup=25, rep=100, return_mode="median")
    x.requires_grad_(True)
    t = triton.testing.do_bench(step, warmup=25, rep=100, return_mode="median")
    x.requires_grad_(False)
    return f, t


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--widths", default="384,128")
    parser.add_argument("--rows", default=ROWS)
    parser.add_argument("--out", default="benchmarks/results")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("benchmarks/transition_crossover.py needs a CUDA GPU", file=sys.stderr)
        return 2
    rows = []
    for c in (int(w) for w in args.widths.split(",")):
        for M in (int(r) for r in args.rows.split(",")):
            m = Eager(c).cuda()
            x = torch.randn(M, c, device="cuda")
            (ef, et), (ff, ft) = _times(m, x, lambda: m(x)), _times(m, x, lambda: _fused(m, x))
            rows.append(dict(c=c, rows=M, eager_fwd=ef, eager_train=et, evofuse_fwd=ff, evofuse_train=ft))
            print(f"c {c} M {M}: eager {ef:.3f} / {et:.3f} ms, evofuse {ff:.3f} / {ft:.3f}; "
                  f"speedup {ef / ff:.2f}x / {et / ft:.2f}x", flush=True)
    folder = Path(args.out) / torch.cuda.get_device_name().replace(" ", "-")
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "transition-crossover.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
