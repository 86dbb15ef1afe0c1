"""`evofuse check`: evofuse against the reference at the suite shapes, under the numerics contract."""

from __future__ import annotations

import torch

from .numerics import FP32_ALLCLOSE, bound, rel_error
from .operations import reference_fits
from .suite import Case, make_inputs, make_module, seed_cases, suite_cases

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def median_ms(fn) -> float:
    """Median forward time on the GPU (triton.testing.do_bench)."""
    import triton.testing

    return triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")


def _cast_inputs(inputs, dtype):
    """Every input but the mask (the last) in `dtype`."""
    return tuple(t.to(dtype) if k < len(inputs) - 1 and t.is_floating_point() else t for k, t in enumerate(inputs))


def check_case(case: Case, dtype: torch.dtype, trials: int, device: torch.device, impl: str | None,
               precision: str = "default") -> dict:
    """Runs `trials` random trials of one case and dtype; returns a row of the table."""
    worst = 0.0
    worst_bound = float("inf")
    ok = True
    path = None
    mod = ref_mod = None
    for trial in range(trials):
        mod = make_module(case, seed=trial, impl=impl, precision=precision).to(device=device, dtype=dtype).eval()
        ref_mod = make_module(case, seed=trial, impl="torch").to(device=device, dtype=dtype).eval()
        ref64 = make_module(case, seed=trial, impl="torch").to(device=device, dtype=torch.float64).eval()
        inputs = make_inputs(case, device, dtype, seed=1000 + trial, fully_masked=trial % 2 == 0)
        with torch.no_grad():
            out = mod(*inputs)
            ref = ref_mod(*inputs)
            exact = ref64(*_cast_inputs(inputs, torch.float64))
        del ref64
        err = rel_error(out, exact)
        if dtype == torch.float32:
            limit = bound(dtype, precision)
            passed = err <= limit and (precision != "default" or torch.allclose(out, ref, **FP32_ALLCLOSE))
        else:
            limit = bound(dtype, precision, rel_error(ref, exact))
            passed = err <= limit
        ok &= passed
        worst = max(worst, err)
        worst_bound = min(worst_bound, limit)
        path = _path_name(mod, inputs)
    ref_ms = ours_ms = float("nan")
    if device.type == "cuda":  # timings mean something only on the GPU
        with torch.no_grad():
            ref_ms = median_ms(lambda: ref_mod(*inputs))
            ours_ms = median_ms(lambda: mod(*inputs))
    return {"case": case.name, "dtype": str(dtype).replace("torch.", ""), "path": path, "trials": trials,
            "rel_err": worst, "bound": worst_bound, "ok": ok, "ref_ms": ref_ms, "evofuse_ms": ours_ms,
            "speedup": ref_ms / ours_ms if ours_ms > 0 else float("nan")}


def _path_name(mod, inputs) -> str:
    from ._dispatch import resolve_impl

    return resolve_impl(mod.impl, *inputs[:-1])


def cases_for(device: torch.device, names: list[str] | None) -> list[Case]:
    if names:
        by_name = {c.name: c for c in suite_cases()}
        unknown = [n for n in names if n not in by_name]
        if unknown:
            raise SystemExit(f"unknown case(s) {unknown}; known: {sorted(by_name)}")
        return [by_name[n] for n in names]
    return [c for c in suite_cases() if reference_fits(c)] if device.type == "cuda" else list(seed_cases())


def format_table(rows: list[dict], timings: bool) -> str:
    head = f"{'case':<14} {'dtype':<9} {'path':<6} {'trials':>6} {'rel err':>9} {'bound':>9} {'result':>6}"
    if timings:
        head += f" {'ref ms':>9} {'evofuse ms':>10} {'speedup':>7}"
    lines = [head, "-" * len(head)]
    for r in rows:
        line = (f"{r['case']:<14} {r['dtype']:<9} {r['path']:<6} {r['trials']:>6} {r['rel_err']:>9.2e} "
                f"{r['bound']:>9.2e} {'pass' if r['ok'] else 'FAIL':>6}")
        if timings:
            line += f" {r['ref_ms']:>9.3f} {r['evofuse_ms']:>10.3f} {r['speedup']:>7.2f}"
        lines.append(line)
    return "\n".join(lines)


def _what(device: torch.device, impl: str | None) -> str:
    from ._dispatch import resolve_impl

    path = resolve_impl(impl, torch.zeros(1, device=device))
    if path == "torch":
        return "the PyTorch path (no GPU here: the fused kernels are not run; --impl triton runs them in Triton's interpreter)"
    if device.type == "cpu":
        return "the fused kernels in Triton's interpreter (correctness only; no timings)"
    return f"the fused kernels on {torch.cuda.get_device_name(device)}, timed against the PyTorch reference"


def run_check(trials: int, dtypes: list[str] | None, names: list[str] | None, impl: str | None,
              precision: str) -> int:
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dtype_names = dtypes or (["float32", "bfloat16"] if device.type == "cuda" else ["float32"])
    cases = cases_for(device, names)
    print(f"evofuse check: {_what(device, impl)}; against float64, {trials} trial(s) per row, "
          f"precision={precision}", flush=True)
    rows = []
    total = len(cases) * len(dtype_names)
    for case in cases:
        for name in dtype_names:
            rows.append(check_case(case, DTYPES[name], trials, device, impl, precision))
            print(f"  [{len(rows)}/{total}] {case.name} {name}: rel err {rows[-1]['rel_err']:.2e} "
                  f"{'pass' if rows[-1]['ok'] else 'FAIL'}", flush=True)
    print(format_table(rows, timings=device.type == "cuda"))
    failed = [r for r in rows if not r["ok"]]
    print(f"{len(rows) - len(failed)} passed, {len(failed)} failed")
    return 1 if failed else 0
