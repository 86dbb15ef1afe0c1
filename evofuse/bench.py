"""`evofuse bench`: evofuse against every importable peer, forward and forward+backward.

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
from functools import partial
from pathlib import Path

import torch

from ._timing import host_ms, kernel_launches, measure, training_step
from .numerics import rel_error
from .operations import OPERATIONS, operation
from .suite import SUITE, Case, make_inputs, make_module

# ---------------------------------------------------------------- peers: Outer Product Mean


def _opm_projections(mod, msa, mask):
    x = mod.layer_norm(msa)
    m = mask.to(x.dtype)[..., None]
    return mod.proj_a(x) * m, mod.proj_b(x) * m


def _opm_folded_einsum(mod, msa, mask):
    """einsum("bsic,bsjd,pcd->bijp") with out_proj's weight as the third operand (seed normalization)."""
    a, b = _opm_projections(mod, msa, mask)
    c = mod.hidden_dim
    w = mod.out_proj.weight.view(-1, c, c)
    den = mask.sum(1).clamp(min=1).to(a.dtype)
    return torch.einsum("bsic,bsjd,pcd->bijp", a, b, w) / den[:, :, None, None] + mod.out_proj.bias


def _opm_chunked_eager(mod, msa, mask, chunk=64):
    """Eager over blocks of 64 residues i (seed normalization)."""
    a, b = _opm_projections(mod, msa, mask)
    B, S, N, c = a.shape
    den = mask.sum(1).clamp(min=1).to(a.dtype)
    out = torch.empty(B, N, N, mod.out_proj.out_features, dtype=a.dtype, device=a.device)
    for i0 in range(0, N, chunk):
        outer = torch.einsum("bsip,bsjq->bijpq", a[:, :, i0:i0 + chunk], b).reshape(B, -1, N, c * c)
        out[:, i0:i0 + chunk] = mod.out_proj(outer / den[:, i0:i0 + chunk, None, None])
    return out


# ---------------------------------------------------------------- peers: row attention


def _flex_peer():
    from torch.nn.attention.flex_attention import flex_attention

    # a fresh static-shape compile per case: with automatic dynamic shapes a second suite shape would
    # recompile flex_attention for symbolic sizes, several times slower
    flex = torch.compile(flex_attention, dynamic=False)

    def run(mod, msa, pair, mask):
        B, S, N, D = msa.shape
        h, d = mod.num_heads, mod.head_dim
        x = mod.layer_norm(msa)

        def heads(t):
            return t.view(B * S, N, h, d).transpose(1, 2)

        q, k, v = heads(mod.query(x)), heads(mod.key(x)), heads(mod.value(x))
        bias = mod.pair_bias(pair).permute(0, 3, 1, 2).contiguous()  # (B, h, N, N)
        keep = mask.reshape(B * S, N) != 0

        def score_mod(score, bs, hh, qi, kj):
            return torch.where(keep[bs, kj], score + bias[bs // S, hh, qi, kj], -1e9)

        o = flex(q, k, v, score_mod=score_mod)  # (B*S, h, N, d)
        o = o.transpose(1, 2).reshape(B, S, N, D) * torch.sigmoid(mod.gate(x))
        return mod.out_proj(o)

    return run


def _cueq_peer():
    """cuEquivariance's attention_pair_bias: the whole module, the MSA rows as its multiplicity."""
    from cuequivariance_torch import attention_pair_bias

    def run(mod, msa, pair, mask):
        B, S, N, D = msa.shape
        out = attention_pair_bias(
            msa.reshape(B * S, N, D), pair, mask.reshape(B * S, N), mod.num_heads,
            mod.layer_norm.weight, mod.layer_norm.bias, mod.query.weight, mod.query.bias, mod.key.weight,
            mod.value.weight, mod.gate.weight, mod.out_proj.weight, w_proj_z=mod.pair_bias.weight,
            b_proj_o=mod.out_proj.bias, b_proj_z=mod.pair_bias.bias, inf=1e9, b_proj_k=mod.key.bias,
            b_proj_v=mod.value.bias, b_proj_g=mod.gate.bias)
        out = out[0] if isinstance(out, tuple) else out
        return out.reshape(B, S, N, D)

    return run


def _sdpa_column_peer(mod, msa, mask):
    """Column attention on `torch.nn.functional.scaled_dot_product_attention` with the additive mask (1e9 (mask - 1)),
    the projections in eager PyTorch (the peer column attention's training target is set against)."""
    parts, h, d = mod._msa_att, mod.no_heads, mod.c_hidden
    mha = parts.mha
    x = parts.layer_norm_m(msa.transpose(1, 2))  # (B, N, S, D)
    B, N, S, _ = x.shape

    def heads(t):  # (B, N, S, h*d) -> (B*N, h, S, d)
        return t.reshape(B * N, S, h, d).transpose(1, 2)

    bias = 1e9 * (mask.transpose(1, 2).reshape(B * N, 1, 1, S).to(x.dtype) - 1)
    o = torch.nn.functional.scaled_dot_product_attention(heads(mha.linear_q(x)), heads(mha.linear_k(x)),
                                                         heads(mha.linear_v(x)), attn_mask=bias)
    o = o.transpose(1, 2).reshape(B, N, S, h * d) * torch.sigmoid(mha.linear_g(x))
    return mha.linear_o(o).transpose(1, 2)


# ---------------------------------------------------------------- peers: triangle attention


def _triangle_peer(core):
    """Triangle attention with its core from a peer, the projections in eager PyTorch around it, as Boltz and
    Protenix call their kernels: core(q, k, v (B, I, h, J, d) views, bias (B, h, J, K), mask (B, I, K) float 0/1)
    returns the heads' outputs (B, I, h, J, d)."""

    def run(mod, z, mask):
        B, N, _, c = z.shape
        h, d, mha = mod.no_heads, mod.c_hidden, mod.mha
        x = mod.layer_norm(z)

        def heads(t):  # (B, I, J, h*d) -> (B, I, h, J, d)
            return t.view(B, N, N, h, d).transpose(2, 3)

        q, k, v = heads(mha.linear_q(x)), heads(mha.linear_k(x)), heads(mha.linear_v(x))
        o = core(q, k, v, mod.linear(x).permute(0, 3, 1, 2), mask)
        o = o.transpose(2, 3).reshape(B, N, N, h * d) * torch.sigmoid(mha.linear_g(x))
        return mha.linear_o(o)

    return run


def _cueq_triangle_peer():
    """cuEquivariance's triangle_attention (Boltz-2's `use_kernels=True` and Protenix's default path)."""
    from cuequivariance_torch import triangle_attention

    return _triangle_peer(lambda q, k, v, bias, mask: triangle_attention(
        q, k, v, bias[:, None], mask=mask.bool()[:, :, None, None, :], scale=q.shape[-1] ** -0.5))


def _trifast_peer():
    """trifast's triangle_attention (Triton; heads first, its mask True where a key is masked)."""
    from trifast import triangle_attention

    def core(q, k, v, bias, mask):
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # (B, h, I, J, d)
        return triangle_attention(q, k, v, bias, mask == 0).transpose(1, 2)

    return _triangle_peer(core)


def _cueq_trimul_peer():
    """cuEquivariance's triangle_multiplicative_update (Boltz-2's `use_kernels=True`, Protenix's default)."""
    from cuequivariance_torch import triangle_multiplicative_update

    def run(mod, z, mask):
        return triangle_multiplicative_update(
            z, direction="outgoing" if mod.outgoing else "incoming", mask=mask, norm_in_weight=mod.norm_in.weight,
            norm_in_bias=mod.norm_in.bias, p_in_weight=mod.p_in.weight, g_in_weight=mod.g_in.weight,
            norm_out_weight=mod.norm_out.weight, norm_out_bias=mod.norm_out.bias, p_out_weight=mod.p_out.weight,
            g_out_weight=mod.g_out.weight, eps=1e-5)

    return run


# ---------------------------------------------------------------- peers: pair-weighted averaging


def _boltz_peer(mod):
    """Boltz's own PairWeightedAveraging (boltz 2.2.1) holding the same weights, as Boltz runs it: float32
    parameters under bfloat16 autocast (its float32 mask term makes a bfloat16 module fail)."""
    from boltz.model.layers.pair_averaging import PairWeightedAveraging

    boltz = PairWeightedAveraging(mod.c_m, mod.c_z, mod.c_h, mod.num_heads, mod.inf)
    boltz.load_state_dict(mod.state_dict())
    return autocast_call(boltz.to(device=mod.norm_m.weight.device, dtype=torch.float32))


# ---------------------------------------------------------------- the implementations timed


def implementations(case: Case, dtypes: list[str]) -> list[tuple[str, str, object]]:
    """(name, dtype of the module, builder(mod) -> callable(*inputs)) for every implementation."""
    impls = []
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

    impls += [("eager fp32", "float32", eager), ("eager bf16", "bfloat16", eager),
              ("eager bf16 autocast", "float32", autocast), ("torch.compile fp32", "float32", compiled),
              ("torch.compile bf16", "bfloat16", compiled)]
    if case.op == "opm":
        impls += [("folded einsum bf16", "bfloat16", lambda mod: partial(_opm_folded_einsum, mod)),
                  ("chunked eager bf16", "bfloat16", lambda mod: partial(_opm_chunked_eager, mod))]
    elif case.op == "pwa":
        impls += [("Boltz module autocast bf16", "float32", _boltz_peer),
                  ("eager bf16 CUDA graph", "bfloat16", _graphed_reference),
                  ("torch.compile bf16 reduce-overhead", "bfloat16", _compiled_reduce_overhead),
                  ("torch.compile bf16 CUDA graph", "bfloat16", _graphed_compiled)]
    elif case.op == "trimul":
        impls += [("cuEquivariance bf16", "bfloat16", lambda mod: partial(_cueq_trimul_peer(), mod))]
    elif case.op == "col":
        impls += [("SDPA bf16", "bfloat16", lambda mod: partial(_sdpa_column_peer, mod))]
    elif case.op in ("trans", "gcol"):  # (the models' own modules compute the reference's function in eager PyTorch)
        impls += [("torch.compile bf16 reduce-overhead", "bfloat16", _compiled_reduce_overhead)]
    elif case.op == "tri":
        impls += [("cuEquivariance bf16", "bfloat16", lambda mod: partial(_cueq_triangle_peer(), mod)),
                  ("trifast bf16", "bfloat16", lambda mod: partial(_trifast_peer(), mod))]
    else:
        impls += [("FlexAttention bf16", "bfloat16", lambda mod: partial(_flex_peer(), mod)),
                  ("cuEquivariance bf16", "bfloat16", lambda mod: partial(_cueq_peer(), mod))]
    for dt in dtypes:
        short = {"float32": "fp32", "bfloat16": "bf16"}[dt]
        impls.append((f"evofuse {short}", dt, lambda mod: mod))
        impls.append((f"evofuse {short} CUDA graph", dt, _graphed))  # captured by hand: the GPU's time alone
        if case.name.endswith("-seed") or dt == "bfloat16":  # CUDA graphs through torch.compile, both modes
            impls.append((f"evofuse {short} reduce-overhead", dt, _reduce_overhead))
    # float32 parameters and inputs under bfloat16 autocast: how the models train
    impls.append(("evofuse bf16 autocast", "float32", autocast_call))
    return impls


def autocast_call(fn):
    """`fn` called under CUDA bfloat16 autocast."""
    def run(*inputs):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            return fn(*inputs)
    return run


def _reduce_overhead(mod):
    """The module under torch.compile(mode="reduce-overhead"): its forward and backward replayed as CUDA graphs."""
    torch.compiler.reset()  # a fresh compile per row, as for torch.compile's rows
    return torch.compile(mod, mode="reduce-overhead", dynamic=False)


def _graphed(mod):
    """The module captured once in CUDA graphs and replayed, its inputs the captured ones (as inside a captured
    model: no copies into the graph's buffers, which reduce-overhead's replays make). A forward row: the forward
    by `torch.cuda.graph` after a warm-up call (autotuning and compilation outside the capture); a training row
    (grad enabled at the first call): forward and backward by `torch.cuda.make_graphed_callables`."""
    state = {}

    def run(*inputs):
        if "graphed" in state:
            return state["graphed"](*inputs)
        if torch.is_grad_enabled():
            state["graphed"] = torch.cuda.make_graphed_callables(mod, inputs)
            return state["graphed"](*inputs)
        if "graph" not in state:
            mod(*inputs)
            torch.cuda.synchronize()
            state["graph"] = torch.cuda.CUDAGraph()
            with torch.cuda.graph(state["graph"]):
                state["out"] = mod(*inputs)
        state["graph"].replay()
        return state["out"]

    return run


def _graphed_reference(mod):
    """Eager PyTorch's reference (the module's `impl="torch"` path, the eager rows' function) captured as
    `_graphed` captures evofuse: the GPU's time of the peer without its host's."""
    mod.impl = "torch"
    return _graphed(mod)


def _compiled_reduce_overhead(mod):
    """torch.compile's row under `mode="reduce-overhead"`, as evofuse's reduce-overhead row runs: the reference
    (the module's `impl="torch"` path) compiled, its forward and backward replayed as CUDA graphs."""
    mod.impl = "torch"
    return _reduce_overhead(mod)


def _graphed_compiled(mod):
    """torch.compile's row captured as `_graphed` captures evofuse: the compiled reference's GPU time without its
    host's, beside evofuse's CUDA graph row."""
    mod.impl = "torch"
    torch.compiler.reset()
    return _graphed(torch.compile(mod, dynamic=False))


def _exact(case: Case, train: bool) -> tuple[torch.Tensor, torch.Tensor | None, list[torch.Tensor]] | None:
    """The float64 reference on the benchmark's inputs (the error column): its output and, for training rows, a
    seeded random output gradient and the gradients it gives the parameters and the differentiable inputs, in the
    order of a row's leaves; None where the reference does not fit (`Case.reference_fits`)."""
    if not case.reference_fits:
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


def bench_case(case: Case, dtypes: list[str], train: bool, peers: set[str] | None, host: bool = False) -> list[dict]:
    """Every implementation's row for one case (forward, or a training step where `train`); with `host`, each row's
    host time of a call with the GPU idle beside its median (`_timing.host_ms`)."""
    rows = []
    exact = _exact(case, train)
    for name, dt, build in implementations(case, dtypes):
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
            tflops = case.flops * (3 if train else 1) / ms / 1e9
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
        return list(SUITE)
    if suite in OPERATIONS:
        return [c for c in SUITE if c.op == suite]
    names = suite.split(",")
    by_name = {c.name: c for c in SUITE}
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
              host: bool = False) -> int:
    """Times the suite's cases (see the module's docstring), then with `grid` ('all' or comma-separated
    operations) the awkward shapes of `evofuse.grid` against eager PyTorch in the same dtype."""
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
        rows += bench_case(case, dtypes, False, peer_set, host)
        if train:
            rows += bench_case(case, dtypes, True, peer_set, host)
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
