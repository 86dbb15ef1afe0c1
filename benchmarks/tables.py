"""The README's and docs/PERFORMANCE.md's tables, made from the benchmark scripts' CSVs (never typed by hand):

    python benchmarks/tables.py blocks benchmarks/results/NVIDIA-H200/models-pairformer.csv
    python benchmarks/tables.py trimul benchmarks/results/NVIDIA-H100-80GB-HBM3/trimul-peers.csv
    python benchmarks/tables.py modules benchmarks/results/NVIDIA-H200/models.csv
    python benchmarks/tables.py crossover benchmarks/results/NVIDIA-H100-80GB-HBM3/models-never-slower.csv
    python benchmarks/tables.py lengths benchmarks/results/NVIDIA-H100-80GB-HBM3/models-lengths.csv
    python benchmarks/tables.py predict benchmarks/results/NVIDIA-H100-80GB-HBM3/predict.csv
    python benchmarks/tables.py stages benchmarks/results/NVIDIA-H100-80GB-HBM3/predict.csv

`blocks`: a model-blocks CSV of `benchmarks/models.py` (family, what, precision, mode, impl, ms, peak_mib), one row
a family's block: forward / training step ms of each path and the training step's peak MiB. `modules`: the same
CSV, one row a patched module, precision and mode, with its speedup (below 1: the patch slows it); `crossover`: the
same over several lengths, one row a module and mode, one column a length; `lengths`: the same
CSV over several lengths, one row a block, length and mode, each path's ms and peak memory. `trimul`: a CSV of
`benchmarks/trimul_peers.py`, one row a length and direction. `predict`: a CSV of `benchmarks/predict.py`, one row a
length: each path's whole prediction in seconds (its trunk's) and peak GiB, and each evofuse path's speedup over the
unpatched and cuEquivariance paths; `stages`: the same CSV, one row a length and path, each stage's seconds. The
fastest time of a row is in bold.
"""

from __future__ import annotations

import argparse
import csv
import sys


def _ms(value: str | None) -> float | None:
    return float(value) if value not in (None, "") else None


def _cells(times: list[tuple[float | None, float | None]], memory: list[float | None]) -> list[str]:
    """Each path's "forward / training" with the fastest of each mode in bold, and its training MiB."""
    best = [min((t[k] for t in times if t[k] is not None), default=None) for k in (0, 1)]

    def shown(value, k):
        if value is None:
            return "-"
        text = f"{value:#.3g}" if value < 100 else f"{value:.0f}"
        return f"**{text}**" if value == best[k] else text

    return [f"{shown(f, 0)} / {shown(b, 1)}" + (f" ({m:.0f})" if m is not None else "")
            for (f, b), m in zip(times, memory)]


def blocks(rows: list[dict]) -> str:
    """One line a family's block: unpatched, evofuse and the model's cuEquivariance path."""
    paths = [("unpatched", "unpatched"), ("evofuse", "evofuse"), ("unpatched cuEquivariance", "cuEquivariance")]
    lines = ["| block | " + " | ".join(label for _, label in paths) + " |", "|---" * (len(paths) + 1) + "|"]
    for family in dict.fromkeys(r["family"] for r in rows if r["what"] == "block"):
        got = {(r["impl"], r["mode"]): r for r in rows if r["family"] == family and r["what"] == "block"}
        times = [tuple(_ms(got.get((impl, mode), {}).get("ms")) for mode in ("fwd", "fwd+bwd")) for impl, _ in paths]
        memory = [_ms(got.get((impl, "fwd+bwd"), {}).get("peak_mib")) for impl, _ in paths]
        lines.append(f"| {family} | " + " | ".join(_cells(times, memory)) + " |")
    return "\n".join(lines)


def trimul(rows: list[dict]) -> str:
    """One line a length and direction: each implementation's forward / training step (training MiB)."""
    impls = list(dict.fromkeys(r["impl"] for r in rows))
    lines = ["| N | direction | " + " | ".join(impls) + " |", "|---" * (len(impls) + 2) + "|"]
    for N, direction in dict.fromkeys((r["N"], r["direction"]) for r in rows):
        got = {(r["impl"], r["mode"]): r for r in rows if (r["N"], r["direction"]) == (N, direction)}
        times = [tuple(_ms(got.get((impl, mode), {}).get("ms")) for mode in ("fwd", "fwd+bwd")) for impl in impls]
        memory = [_ms(got.get((impl, "fwd+bwd"), {}).get("peak_mib")) for impl in impls]
        lines.append(f"| {N} | {direction} | " + " | ".join(_cells(times, memory)) + " |")
    return "\n".join(lines)


def lengths(rows: list[dict]) -> str:
    """One line a family's block, length and mode (a models CSV of several `--residues`): each path's ms and peak MiB,
    the fastest in bold, "out of memory" where the path ran out of it."""
    paths = [("unpatched", "unpatched"), ("evofuse", "evofuse"), ("unpatched cuEquivariance", "cuEquivariance")]
    lines = ["| block | N | mode | " + " | ".join(label for _, label in paths) + " |", "|---" * (len(paths) + 3) + "|"]
    blocks_rows = [r for r in rows if r["what"] == "block"]
    for family, N, mode in dict.fromkeys((r["family"], r["residues"], r["mode"]) for r in blocks_rows):
        got = {r["impl"]: r for r in blocks_rows if (r["family"], r["residues"], r["mode"]) == (family, N, mode)}
        times = [_ms(got.get(impl, {}).get("ms")) for impl, _ in paths]
        best = min((t for t in times if t is not None), default=None)
        cells = []
        for (impl, _), ms in zip(paths, times):
            if ms is None:
                status = got.get(impl, {}).get("status", "")
                cells.append("out of memory" if status.startswith("OutOfMemoryError") else "-")
                continue
            text = f"{ms:#.3g}" if ms < 100 else f"{ms:.0f}"
            cells.append(f"{f'**{text}**' if ms == best else text} ({_ms(got[impl]['peak_mib']) / 1024:.1f} GiB)")
        shown = {"fwd": "inference", "fwd+bwd": "training step"}.get(mode, mode)
        lines.append(f"| {family} | {N} | {shown} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def module_ratios(rows: list[dict]) -> list[tuple[str, str, str, str, str, float, float, float, str]]:
    """(family, N, module, precision, mode, unpatched ms, evofuse ms, unpatched / evofuse, what the patched module
    ran: "fused" or "original", its `runs`, blank in older CSVs) of every module that a models CSV times both
    unpatched and patched: the replacements' speedups, below 1 where a patch slows a module."""
    got = {(r["family"], r.get("residues", ""), r["what"], r["precision"], r["mode"], r["impl"]): r for r in rows
           if r["what"] != "block"}
    out = []
    for (family, N, what, precision, mode, impl), row in got.items():
        if impl != "evofuse":
            continue
        before = _ms(got.get((family, N, what, precision, mode, "unpatched"), {}).get("ms"))
        after = _ms(row.get("ms"))
        if before is not None and after is not None:
            out.append((family, N, what, precision, mode, before, after, before / after, row.get("runs") or ""))
    return out


def modules(rows: list[dict]) -> str:
    """One line a patched module, length, precision and mode: unpatched and patched ms and their ratio, in bold below
    1, and what the patched module ran (the fused kernels, or below its crossover the model's own module)."""
    lines = ["| family | N | module | precision | mode | unpatched ms | evofuse ms | speedup | runs |", "|---" * 9 + "|"]
    for family, N, what, precision, mode, before, after, ratio, runs in module_ratios(rows):
        shown = f"{ratio:.2f}x" if ratio >= 1 else f"**{ratio:.2f}x**"
        lines.append(f"| {family} | {N} | {what} | {precision} | {mode} | {before:#.3g} | {after:#.3g} | {shown} | "
                     f"{runs} |")
    return "\n".join(lines)


def crossover(rows: list[dict]) -> str:
    """One line a family's patched module and mode, one column a length: its speedup there (in bold below 1; "(own)"
    where the patched module ran the model's own below its crossover): where a rule should switch."""
    ratios = module_ratios(rows)
    lengths = list(dict.fromkeys(r[1] for r in ratios))
    got = {(family, what, mode, N): (ratio, runs) for family, N, what, _, mode, _, _, ratio, runs in ratios}
    lines = ["| family | module | mode | " + " | ".join(f"N {N}" for N in lengths) + " |",
             "|---" * (3 + len(lengths)) + "|"]
    for family, what, mode in dict.fromkeys((r[0], r[2], r[4]) for r in ratios):
        cells = []
        for N in lengths:
            ratio, runs = got.get((family, what, mode, N), (None, ""))
            shown = "-" if ratio is None else f"{ratio:.2f}x" if ratio >= 1 else f"**{ratio:.2f}x**"
            cells.append(shown + (" (own)" if runs == "original" else ""))
        lines.append(f"| {family} | {what} | {mode} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


# predict.py's paths, in the tables' order, and their labels
PREDICT_PATHS = {"unpatched": "unpatched", "cuequivariance": "cuEquivariance", "evofuse": "evofuse",
                 "evofuse-graphs": "evofuse, diffusion graphed"}


def predict(rows: list[dict]) -> str:
    """One line a length: each path's total seconds (the trunk's in brackets) and peak GiB, the fastest in bold, "out
    of memory" where a path ran out of it; then each evofuse path's speedup over the unpatched and cuEquivariance
    paths. Only the paths the CSV has get a column."""
    paths = [(path, label) for path, label in PREDICT_PATHS.items() if any(r["path"] == path for r in rows)]
    ours = [(path, label) for path, label in paths if path.startswith("evofuse")]
    lines = ["| N | " + " | ".join(label for _, label in paths) + " | "
             + " | ".join(f"{label}: speedup over unpatched / cuEquivariance" for _, label in ours) + " |",
             "|---" * (1 + len(paths) + len(ours)) + "|"]
    for N in dict.fromkeys(r["residues"] for r in rows):
        got = {r["path"]: r for r in rows if r["residues"] == N}
        totals = {path: _ms(got.get(path, {}).get("total_ms")) for path, _ in paths}
        best = min((t for t in totals.values() if t is not None), default=None)
        cells = []
        for path, _ in paths:
            total = totals[path]
            if total is None:
                status = got.get(path, {}).get("status", "")
                cells.append("out of memory" if status.startswith("OutOfMemoryError") else "-")
                continue
            text = f"{total / 1e3:.2f} s"
            cells.append(f"{f'**{text}**' if total == best else text} ({_ms(got[path]['trunk_ms']) / 1e3:.2f} s) "
                         f"{_ms(got[path]['peak_mib']) / 1024:.1f} GiB")
        for path, _ in ours:
            mine = totals[path]
            cells.append(" / ".join(f"{totals[other] / mine:.2f}x" if mine and totals.get(other) else "-"
                                    for other in ("unpatched", "cuequivariance")))
        lines.append(f"| {N} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def stages(rows: list[dict]) -> str:
    """A CSV of `benchmarks/predict.py`, one line a length and path: each stage's seconds and the peak GiB, or the
    failure's kind."""
    lines = ["| N | path | trunk | diffusion | confidence | total | peak GiB |", "|---" * 7 + "|"]
    for r in rows:
        path = PREDICT_PATHS.get(r["path"], r["path"])
        if _ms(r.get("total_ms")) is None:
            status = r.get("status", "")
            lines.append(f"| {r['residues']} | {path} | " + " | ".join(
                ["out of memory" if status.startswith("OutOfMemoryError") else "-"] * 5) + " |")
            continue
        seconds = [f"{_ms(r[f'{stage}_ms']) / 1e3:.{3 if stage == 'confidence' else 2}f}"
                   for stage in ("trunk", "diffusion", "confidence", "total")]
        lines.append(f"| {r['residues']} | {path} | " + " | ".join(seconds)
                     + f" | {_ms(r['peak_mib']) / 1024:.1f} |")
    return "\n".join(lines)


TABLES = {"blocks": blocks, "crossover": crossover, "lengths": lengths, "modules": modules, "predict": predict,
          "stages": stages, "trimul": trimul}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("table", choices=sorted(TABLES))
    parser.add_argument("csv", help="the benchmark script's CSV")
    args = parser.parse_args(argv)
    with open(args.csv, newline="") as f:
        rows = list(csv.DictReader(f))
    print(TABLES[args.table](rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
