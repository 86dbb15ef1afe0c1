"""`evofuse bench`: evofuse against eager PyTorch and torch.compile of each operation's reference, and against the
peers a caller registers (`benchmarks/bench.py`: the models' kernel libraries and modules), forward and
forward+backward.

Each (case, implementation) row gets the median time of `triton.testing.do_bench` and the peak
memory allocated beyond the inputs and parameters. A peer that fails or runs out of memory is kept
as a row with the reason. Results go to <out>/<gpu-name>/: JSON, CSV, a markdown table and a PNG of
the speedup over eager PyTorch in bfloat16 (log scale), the peer every run holds.
"""

from __future__ import annotations

import csv
import json
import platform
import re
import time
from pathlib import Path

import torch

from ._timing import autocast_call, graphed, host_ms, kernel_launches, measure, reduce_overhead, training_step
from .numerics import rel_error
from .operations import OPERATIONS, flops, operation, reference_fits
from .suite import Case, make_inputs, make_module, suite_cases

# ---------------------------------------------------------------- the implementations timed


def implementations(case: Case, dtypes: list[str], peers: dict | None = None) -> list[tuple[str, str, object]]:
    """(name, dtype of the module, builder(mod) -> callable(*inputs)) for every implementation: eager PyTorch and
    torch.compile of the operation's reference, its peers (`peers`: each operation's key to its (name, dtype,
    builder) list), and evofuse's rows."""
    op = operation(case)
    reference_fn = op.reference_call(case)
    params = op.module_params

    def eager(mod):
        return lambda *x: reference_fn(*x, *params(mod))

    def autocast(mod):
        return autocast_call(lambda *x: reference_fn(*x, *params(mod)))

    def compiled(mod):
        torch.compiler.reset()  # a fresh compile per row: the same function's recompiles would hit dynamo's limit
        fn = torch.compile(reference_fn, dynamic=False)
        return lambda *x: fn(*x, *params(mod))

    impls = [("eager fp32", "float32", eager), ("eager bf16", "bfloat16", eager),
             ("eager bf16 autocast", "float32", autocast), ("torch.compile fp32", "float32", compiled),
             ("torch.compile bf16", "bfloat16", compiled), *(peers or {}).get(case.op, [])]
    for dt in dtypes:
        short = {"float32": "fp32", "bfloat16": "bf16"}[dt]
        impls.append((f"evofuse {short}", dt, lambda mod: mod))
        impls.append((f"evofuse {short} CUDA graph", dt, graphed))  # captured by hand: the GPU's time alone
        if case.name.endswith("-seed") or dt == "bfloat16":  # CUDA graphs through torch.compile, both modes
            impls.append((f"evofuse {short} reduce-overhead", dt, reduce_overhead))
    # float32 parameters and inputs under bfloat16 autocast: how the models train
    impls.append(("evofuse bf16 autocast", "float32", autocast_call))
    return impls


def _exact(case: Case, train: bool) -> tuple[torch.Tensor, torch.Tensor | None, list[torch.Tensor]] | None:
    """The float64 reference on the benchmark's inputs (the error column): its output and, for training rows, a
    seeded random output gradient and the gradients it gives the parameters and the differentiable inputs, in the
    order of a row's leaves; None where the reference does not fit (`operations.reference_fits`)."""
    if not reference_fits(case):
        return None
    mod = make_module(case, seed=0, impl="torch").to(device="cuda", dtype=torch.float64)
    inputs = make_inputs(case, "cuda", torch.float64, seed=1, fully_masked=False)
    leaves = [*mod.parameters(), *inputs[:-1]] if train else []
    for t in inputs[:-1]:
        t.requires_grad_(train)
    with torch.set_grad_enabled(train):
        out = mod(*inputs)
        if not train:
            return out.float(), None, []
        grad = torch.randn(out.shape, generator=torch.Generator("cuda").manual_seed(2), device="cuda",
                           dtype=torch.float64)
        out.backward(grad)
    return out.detach().float(), grad, [t.grad.float() for t in leaves]


def _worst_error(fn, inputs, leaves, exact) -> float | None:
    """The largest rel_error of a row's output and, for a training row, of each gradient its leaves get for the
    reference's output gradient (those whose float64 value is not ~0: a softmax's shift-invariant biases are
    exactly 0; a peer that keeps its own copy of the parameters leaves theirs None)."""
    if exact is None:
        return None
    out_exact, grad, grads_exact = exact
    if grad is None:
        return rel_error(fn(*inputs), out_exact)
    for t in leaves:
        t.grad = None
    out = fn(*inputs)
    out.backward(grad.to(out.dtype))
    largest = max(g.norm() for g in grads_exact)
    errors = [rel_error(t.grad, g) for t, g in zip(leaves, grads_exact) if t.grad is not None and g.norm() > 1e-6 * largest]
    return max([rel_error(out, out_exact), *errors])


def bench_case(case: Case, dtypes: list[str], train: bool, peers: set[str] | None, host: bool = False,
               peer_table: dict | None = None) -> list[dict]:
    """Every implementation's row for one case (forward, or a training step where `train`), the peers of
    `peer_table` named in `peers` (None: all); with `host`, each row's host time of a call with the GPU idle beside
    its median (`_timing.host_ms`)."""
    rows = []
    exact = _exact(case, train)
    for name, dt, build in implementations(case, dtypes, peer_table):
        if peers is not None and not name.startswith("evofuse") and name != BASELINE and name not in peers:
            continue
        row = {"case": case.name, "impl": name, "dtype": dt, "mode": "fwd+bwd" if train else "fwd"}
        t0 = time.time()
        try:
            dtype = getattr(torch, dt)
            mod = make_module(case, seed=0).to(device="cuda", dtype=dtype)
            inputs = make_inputs(case, "cuda", dtype, seed=1, fully_masked=False)
            tensors = list(mod.parameters()) if train else []
            if train:
                for t in inputs[:-1]:
                    t.requires_grad_(True)
                    tensors.append(t)
            fn = build(mod)
            with torch.set_grad_enabled(train):
                ms, peak = measure(lambda: fn(*inputs), train, tensors)
                err = _worst_error(fn, inputs, tensors, exact)
            tflops = flops(case) * (3 if train else 1) / ms / 1e9
            row.update(ms=ms, peak_mib=peak, tflops=tflops, rel_err=err, status="ok")
            if host:
                with torch.set_grad_enabled(train):
                    call = training_step(lambda: fn(*inputs), tensors) if train else lambda: fn(*inputs)
                    row["host_ms"] = host_ms(call, torch.cuda.synchronize)
                    row["launches"] = kernel_launches(call)
        except Exception as exc:  # a peer that fails keeps its row, with the reason
            kind = "out of memory" if isinstance(exc, torch.cuda.OutOfMemoryError) else type(exc).__name__
            reason = str(exc).splitlines()[0][:160] if str(exc) else ""
            row.update(ms=None, peak_mib=None, tflops=None, rel_err=None, status=f"{kind}: {reason}")
        finally:
            mod = inputs = fn = None
            torch.cuda.empty_cache()
        print(f"  {case.name:<14} {row['mode']:<7} {name:<22} "
              + (f"{row['ms']:9.3f} ms {row['peak_mib']:9.1f} MiB" if row["ms"] is not None else row["status"])
              + (f" host {row['host_ms']:.3f} ms, {row['launches']} kernels" if row.get("host_ms") is not None
                 else "")
              + f"   ({time.time() - t0:.0f}s)", flush=True)
        rows.append(row)
    return rows


def _select(suite: str) -> list[Case]:
    if suite == "none":
        return []
    if suite == "all":
        return list(suite_cases())
    if suite in OPERATIONS:
        return [c for c in suite_cases() if c.op == suite]
    names = suite.split(",")
    by_name = {c.name: c for c in suite_cases()}
    missing = [n for n in names if n not in by_name]
    if missing:
        raise SystemExit(f"unknown case(s) {missing}; known: {sorted(by_name)}")
    return [by_name[n] for n in names]


BASELINE = "eager bf16"  # the implementation that speedups are measured against


def _baseline(rows: list[dict]) -> dict:
    """(case, mode) -> the baseline's median ms, where it ran."""
    return {(r["case"], r["mode"]): r["ms"] for r in rows if r["impl"] == BASELINE and r["ms"]}


def markdown(rows: list[dict]) -> str:
    """The rows as a markdown table; host-time and kernel-count columns where a row has them (`--host`)."""
    host = any(r.get("host_ms") is not None for r in rows)
    lines = ["| case | mode | implementation | dtype | median ms | peak MiB | TFLOP/s | speedup vs eager bf16 "
             "| rel err vs fp64 |" + (" host ms | kernels |" if host else ""),
             "|---|---|---|---|---|---|---|---|---|" + ("---|---|" if host else "")]
    base = _baseline(rows)
    for r in rows:
        if r["ms"] is None:
            lines.append(f"| {r['case']} | {r['mode']} | {r['impl']} | {r['dtype']} | {r['status']} | | | | |"
                         + (" | |" if host else ""))
            continue
        b = base.get((r["case"], r["mode"]))
        speedup = f"{b / r['ms']:.2f}x" if b else ""
        err = f"{r['rel_err']:.1e}" if r.get("rel_err") is not None else ""
        lines.append(f"| {r['case']} | {r['mode']} | {r['impl']} | {r['dtype']} | {r['ms']:.3f} | "
                     f"{r['peak_mib']:.0f} | {r['tflops']:.1f} | {speedup} | {err} |"
                     + (f" {r['host_ms']:.3f} | {r['launches']} |" if r.get("host_ms") is not None
                        else " | |" if host else ""))
    return "\n".join(lines)


def plot(rows: list[dict], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = sorted({(r["case"], r["mode"]) for r in rows}, key=lambda k: (k[1], k[0]))
    impls = list(dict.fromkeys(r["impl"] for r in rows))
    base = _baseline(rows)
    fig, ax = plt.subplots(figsize=(max(8, 1.6 * len(keys)), 5))
    width = 0.8 / max(len(impls), 1)
    colors = plt.get_cmap("tab20").colors
    for k, impl in enumerate(impls):
        xs, ys = [], []
        for x, key in enumerate(keys):
            r = next((r for r in rows if (r["case"], r["mode"]) == key and r["impl"] == impl), None)
            if r and r["ms"] and key in base:
                xs.append(x + (k - len(impls) / 2 + 0.5) * width)
                ys.append(base[key] / r["ms"])
        ax.bar(xs, ys, width, label=impl, color=colors[k % len(colors)])
    ax.set_yscale("log")
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks(range(len(keys)), [f"{c}\n{m}" for c, m in keys], fontsize=8)
    ax.set_ylabel(f"speedup over {BASELINE} (log scale)")
    ax.legend(fontsize=7, ncol=2)
    ax.set_title(title)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def run_bench(suite: str, dtypes: list[str] | None, train: bool, out: str, peers: str, grid: str | None = None,
              host: bool = False, peer_table: dict | None = None) -> int:
    """Times the suite's cases (see the module's docstring) with the peers of `peer_table` that `peers` names
    ('all', 'none' or comma-separated), then with `grid` ('all' or comma-separated operations) the awkward shapes of
    `evofuse.grid` against eager PyTorch in the same dtype."""
    if not torch.cuda.is_available():
        print("evofuse bench: no CUDA device here; the benchmark times the fused kernels on a GPU "
              "(`evofuse check` runs on a CPU)")
        return 2
    dtypes = dtypes or ["float32", "bfloat16"]
    peer_set = None if peers == "all" else set(p.strip() for p in peers.split(","))
    gpu = torch.cuda.get_device_name()
    import triton

    meta = {"gpu": gpu, "torch": torch.__version__, "triton": triton.__version__, "python": platform.python_version(),
            "date": time.strftime("%Y-%m-%d %H:%M:%S %Z")}
    print(f"evofuse bench on {gpu}, torch {meta['torch']}, triton {meta['triton']}", flush=True)
    rows = []
    folder = _gpu_folder(Path(out), gpu)
    for case in _select(suite):
        rows += bench_case(case, dtypes, False, peer_set, host, peer_table)
        if train:
            rows += bench_case(case, dtypes, True, peer_set, host, peer_table)
        # the rows so far, so that a run stopped by a time limit keeps them
        (folder / "results.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    folder = write_results(rows, meta, Path(out)) if rows else _gpu_folder(Path(out), gpu)
    print(markdown(rows))
    if grid:
        from .grid import run_grid

        run_grid(folder, grid)
    print(f"written to {folder}")
    return 0


def _gpu_folder(out: Path, gpu: str) -> Path:
    """out/<gpu-name>/, created."""
    folder = out / re.sub(r"[^A-Za-z0-9_.-]+", "-", gpu)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def write_results(rows: list[dict], meta: dict, out: Path) -> Path:
    """JSON, CSV, markdown and the speedup chart under out/<gpu-name>/."""
    folder = _gpu_folder(out, meta["gpu"])
    (folder / "results.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    with open(folder / "results.csv", "w", newline="") as f:
        fields = ["case", "mode", "impl", "dtype", "ms", "peak_mib", "tflops", "rel_err", "status"]
        extra = ["host_ms", "launches"] if any("host_ms" in r for r in rows) else []
        writer = csv.DictWriter(f, fieldnames=fields + extra)
        writer.writeheader()
        writer.writerows(rows)
    (folder / "results.md").write_text(
        f"{meta['gpu']}, torch {meta['torch']}, triton {meta['triton']}, {meta['date']}\n\n{markdown(rows)}\n")
    plot(rows, folder / "speedup.png", f"evofuse on {meta['gpu']} (median ms, do_bench)")
    return folder
