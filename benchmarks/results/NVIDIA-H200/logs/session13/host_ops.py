"""Host microseconds of the single operations and launchers an opm-af2-main bf16 training step is made of (each
the median of 200 calls after a synchronize, nothing queued ahead): what to cut where the host bounds the step.
python3 host_ops.py"""
import statistics
import time

import torch

import evofuse.ops.layer_norm_linear as lnl
import evofuse.ops.outer_product_mean as opm
from evofuse.ops._common import add_product, interpreting


def host_us(fn, calls=200):
    fn()
    times = []
    for _ in range(calls):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    torch.cuda.synchronize()
    return statistics.median(times) * 1e6


torch.manual_seed(0)
dev, bf = "cuda", torch.bfloat16
B, S, N, D, c, R, n = 1, 512, 384, 256, 32, 128, 192
wa, wb = torch.randn(c, D, device=dev, dtype=bf), torch.randn(c, D, device=dev, dtype=bf)
ba, bb = torch.randn(c, device=dev, dtype=bf), torch.randn(c, device=dev, dtype=bf)
x1 = torch.zeros(1, device=dev)
ws = torch.randn(33, R, c * c, device=dev)
a_rows = torch.randn(B, S, n * c, device=dev, dtype=bf)
b_flat = torch.randn(B, S, N * c, device=dev, dtype=bf)
dx = torch.randn(B, n * c, N * c, device=dev, dtype=bf)
db = torch.zeros(B, S, N * c, device=dev)
msa = torch.randn(B, S, N, D, device=dev, dtype=bf)
mask = torch.ones(B, S, N, device=dev)
lnw, lnb = torch.ones(D, device=dev, dtype=bf), torch.zeros(D, device=dev, dtype=bf)
g = torch.randn(B, n, N, R, device=dev, dtype=bf)
scale = torch.rand(B, n, N, device=dev)
w = torch.randn(R, c * c, device=dev, dtype=bf)
da = torch.randn(B, S, N, c, device=dev, dtype=bf)
dbf = torch.randn(B, S, N * c, device=dev)
w_ab = torch.cat([wa, wb])
gs, _ = opm.normalized_grad(g, scale, True)
x = torch.bmm(a_rows.transpose(1, 2), b_flat)


def empty_copies():
    t = torch.empty(2 * c, D, device=dev, dtype=bf)
    t[:c].copy_(wa)
    t[c:].copy_(wb)


rows = [
    ("x.add_(1) (PyTorch's launch path)", lambda: x1.add_(1)),
    ("torch.empty (64, 256) bf16", lambda: torch.empty(2 * c, D, device=dev, dtype=bf)),
    ("torch.cat two (32, 256) weights", lambda: torch.cat([wa, wb])),
    ("torch.cat two (32,) biases", lambda: torch.cat([ba, bb])),
    ("empty + two slice copy_", empty_copies),
    ("t.to(its own dtype)", lambda: wa.to(bf)),
    ("t.to(float32) of (128,)", lambda: ba.to(torch.float32)),
    ("sum(0) of (33, 128, 1024) float32", lambda: ws.sum(0)),
    ("torch.zeros (1, 512, 12288) float32", lambda: torch.zeros(B, S, N * c, device=dev)),
    ("bmm X = a_rows^T b", lambda: torch.bmm(a_rows.transpose(1, 2), b_flat)),
    ("add_product db += a_rows dX", lambda: add_product(db, a_rows, dx)),
    ("interpreting()", interpreting),
    ("opm.project (LayerNorm + projections)", lambda: opm.project(msa, mask, lnw, lnb, wa, ba, wb, bb)),
    ("opm.pair_scale", lambda: opm.pair_scale(mask, B, S, N, "seed", msa)),
    ("opm.normalized_grad", lambda: opm.normalized_grad(g, scale, True)),
    ("opm.outer_product_grad (dX)", lambda: opm.outer_product_grad(gs, w, c)),
    ("opm.outer_product_weight_grad (dW)", lambda: opm.outer_product_weight_grad(gs, x, c)),
    ("lnl.ln_linear_backward", lambda: lnl.ln_linear_backward(msa, lnw, lnb, w_ab, mask, da, dbf, 1e-5)),
]
print(f"host us a call (median of 200, each after a synchronize), {torch.cuda.get_device_name()}")
for name, fn in rows:
    print(f"  {host_us(fn):8.1f}  {name}")
