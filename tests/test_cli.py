"""`evofuse check` and `evofuse bench` as a user runs them."""

import os
import subprocess
import sys

import pytest
import torch

from evofuse.cli import main


def test_check_passes_on_the_seed_shapes(capsys):
    assert main(["check", "--trials", "1", "--case", "opm-seed", "--case", "att-seed", "--dtype", "float32"]) == 0
    out = capsys.readouterr().out
    assert "opm-seed" in out and "att-seed" in out and "2 passed, 0 failed" in out


def test_check_runs_the_kernels_in_the_interpreter(capsys):
    if torch.cuda.is_available():
        pytest.skip("the interpreter run is for machines without a GPU")
    assert main(["check", "--trials", "1", "--impl", "triton", "--case", "att-seed"]) == 0
    assert "triton" in capsys.readouterr().out


def test_check_in_the_interpreter_from_a_shell():
    """`evofuse check --impl triton` without a GPU, from a shell that has not set TRITON_INTERPRET (Triton reads it
    when `import evofuse` defines the kernels, before the command line is read)."""
    if torch.cuda.is_available():
        pytest.skip("the interpreter run is for machines without a GPU")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run([sys.executable, "-m", "evofuse", "check", "--trials", "1", "--impl", "triton", "--case",
                           "tri-seed"], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "tri-seed" in done.stdout and "1 passed, 0 failed" in done.stdout


def test_check_rejects_unknown_case():
    with pytest.raises(SystemExit):
        main(["check", "--case", "opm-huge"])


def test_python_dash_m_and_bench_without_gpu():
    if torch.cuda.is_available():
        pytest.skip("without a GPU only")
    out = subprocess.run([sys.executable, "-m", "evofuse", "bench"], capture_output=True, text=True)
    assert out.returncode == 2, out.stderr
    assert "no CUDA device" in out.stdout


def test_bench_report_files(tmp_path):
    """The report a benchmark writes (JSON, CSV, markdown, chart), from rows of a run, failed peers included."""
    import csv
    import json

    from evofuse.bench import write_results

    rows = [
        {"case": "opm-af2-main", "impl": "eager bf16", "dtype": "bfloat16", "mode": "fwd", "ms": 5.4,
         "peak_mib": 1464.0, "tflops": 37.0, "rel_err": 5e-3, "status": "ok"},
        {"case": "opm-af2-main", "impl": "evofuse bf16", "dtype": "bfloat16", "mode": "fwd", "ms": 0.8,
         "peak_mib": 60.0, "tflops": 248.0, "rel_err": 3.7e-3, "status": "ok"},
        {"case": "opm-af2-main", "impl": "cuEquivariance bf16", "dtype": "bfloat16", "mode": "fwd", "ms": None,
         "peak_mib": None, "tflops": None, "rel_err": None, "status": "ModuleNotFoundError: no module"},
    ]
    meta = {"gpu": "Test GPU 1", "torch": "x", "triton": "y", "date": "today"}
    folder = write_results(rows, meta, tmp_path)
    assert folder.name == "Test-GPU-1"
    assert json.loads((folder / "results.json").read_text())["rows"] == rows
    assert len(list(csv.DictReader(open(folder / "results.csv")))) == 3
    md = (folder / "results.md").read_text()
    assert md.startswith("Test GPU 1, torch x, triton y, today")
    assert "| opm-af2-main | fwd | evofuse bf16 | bfloat16 | 0.800 | 60 | 248.0 | 6.75x | 3.7e-03 |" in md
    assert "ModuleNotFoundError" in md
    assert (folder / "speedup.png").stat().st_size > 1000


def test_bench_report_host_column(tmp_path):
    """With `--host` rows host-time and kernel-count columns, empty for a row without them (a failed peer)."""
    from evofuse.bench import markdown

    rows = [{"case": "pwa-seed", "impl": "eager bf16", "dtype": "bfloat16", "mode": "fwd", "ms": 0.2, "peak_mib": 1.0,
             "tflops": 1.0, "rel_err": 1e-3, "status": "ok", "host_ms": 0.15, "launches": 12},
            {"case": "pwa-seed", "impl": "trifast bf16", "dtype": "bfloat16", "mode": "fwd", "ms": None,
             "peak_mib": None, "tflops": None, "rel_err": None, "status": "ImportError: x"}]
    md = markdown(rows).splitlines()
    assert md[0].endswith("| host ms | kernels |") and md[2].endswith("| 0.150 | 12 |")
    assert md[3].count("|") == md[0].count("|")


def test_host_time_of_a_call():
    """`_timing.host_ms`: the median time of a call, the device synchronized before each (here a stand-in that
    counts), after one warm-up call."""
    import time

    from evofuse._timing import host_ms

    syncs = []
    ms = host_ms(lambda: time.sleep(0.002), lambda: syncs.append(1), calls=15)
    assert 2.0 <= ms < 20 and len(syncs) == 17


@pytest.mark.gpu
def test_bench_host_rows():
    """`evofuse bench --host`: every row that ran has its host time of a call and its kernel count, training rows
    too; evofuse's bf16 forward at pwa-seed launches no more kernels than eager PyTorch's."""
    from evofuse.bench import bench_case
    from evofuse.suite import find_case

    case = find_case("pwa-seed")
    for train in (False, True):
        rows = [r for r in bench_case(case, ["bfloat16"], train, {"none"}, host=True) if r["status"] == "ok"]
        assert {r["impl"] for r in rows} >= {"eager bf16", "evofuse bf16", "evofuse bf16 CUDA graph"}
        assert all(0 < r["host_ms"] < 100 and r["launches"] >= 0 for r in rows)
        assert all(r["launches"] > 0 for r in rows if "graph" not in r["impl"])  # (a replay may show as one launch)
        launches = {r["impl"]: r["launches"] for r in rows}
        assert train or launches["evofuse bf16"] <= launches["eager bf16"], launches


def test_grid_report(tmp_path, monkeypatch, capsys):
    """`evofuse bench --grid`'s table, worst ratios and CSV, with stand-in timings (the timings need a GPU)."""
    import csv

    from evofuse import grid
    from evofuse.operations import OPERATIONS

    shapes = {key: len(op.grid) for key, op in OPERATIONS.items()}
    times = {("evofuse", "float32"): 2.0, ("eager", "float32"): 1.0, ("evofuse", "bfloat16"): 0.5,
             ("eager", "bfloat16"): 1.0}
    monkeypatch.setattr(grid, "_time", lambda case, dtype, impl, train: times[impl, str(dtype)[6:]])
    rows = grid.run_grid(tmp_path)
    assert len(rows) == 2 * sum(shapes.values()) and shapes["opm"] and shapes["att"] and shapes["pwa"]
    assert all(r["fp32 ratio"] == 2.0 and r["bf16 ratio"] == 0.5 and r["bf16/fp32"] == 0.25 for r in rows)
    out = capsys.readouterr().out
    assert "worst fp32 ratio: 2.00" in out and "worst bf16/fp32: 0.25" in out
    assert len(list(csv.DictReader(open(tmp_path / "grid.csv")))) == len(rows)
    part = grid.run_grid(tmp_path, "pwa, att")
    assert len(part) == 2 * (shapes["pwa"] + shapes["att"]) and part[0]["shape"].startswith("pwa-")
    assert len(list(csv.DictReader(open(tmp_path / "grid-pwa-att.csv")))) == len(part)
    with pytest.raises(ValueError, match="unknown operation"):
        grid.run_grid(tmp_path, "opm,xyz")


def test_training_step_takes_each_steps_own_gradients():
    """The benchmark's training step sets its leaves' gradients to None first: repeated steps (do_bench's
    warm-up calls skip grad_to_none) leave one step's gradient, never a sum. Under CUDA graphs a gradient is a
    graph's output, which the next replay overwrites; an accumulation into it fails."""
    from evofuse._timing import training_step

    w = torch.randn(3, 4, requires_grad=True)
    x = torch.randn(2, 3)
    step = training_step(lambda: x @ w, [w])
    step()
    once = w.grad.clone()
    step()
    step()
    torch.testing.assert_close(w.grad, once, rtol=0, atol=0)
    assert torch.equal(once, x.sum(0)[:, None].expand(3, 4))


@pytest.mark.gpu
def test_reduce_overhead_training_row_runs():
    """A training row of `evofuse bench` under torch.compile(mode="reduce-overhead"): forward and backward
    replayed as CUDA graphs, timed as the benchmark times every row."""
    from evofuse._timing import measure, reduce_overhead
    from evofuse.suite import find_case, make_inputs, make_module

    case = find_case("pwa-seed")
    mod = make_module(case, seed=0).to(device="cuda", dtype=torch.bfloat16)
    inputs = make_inputs(case, "cuda", torch.bfloat16, seed=1, fully_masked=False)
    leaves = list(mod.parameters()) + [t.requires_grad_(True) for t in inputs[:-1]]
    fn = reduce_overhead(mod)
    ms, peak = measure(lambda: fn(*inputs), True, leaves)
    assert ms > 0 and peak >= 0


@pytest.mark.gpu
@pytest.mark.parametrize("op", ["pwa", "opm"])
def test_graphed_rows_match_eager_calls(op):
    """`evofuse bench`'s "CUDA graph" rows: the forward replayed from `torch.cuda.graph`, a training step from
    `torch.cuda.make_graphed_callables`, each giving the eager call's output and every gradient (the same
    kernels, so bit for bit), replay after replay; and the reference's graphed row its eager output."""
    from evofuse._timing import graphed, graphed_reference, training_step
    from evofuse.suite import find_case, make_inputs, make_module

    case = find_case(f"{op}-seed")

    def build(wrap):
        mod = make_module(case, seed=0).to(device="cuda", dtype=torch.bfloat16)
        inputs = make_inputs(case, "cuda", torch.bfloat16, seed=1)
        return mod, inputs, wrap(mod)

    mod, inputs, fn = build(lambda mod: mod)
    with torch.no_grad():
        want = fn(*inputs).clone()
    leaves = list(mod.parameters()) + [t.requires_grad_(True) for t in inputs[:-1]]
    training_step(lambda: fn(*inputs), leaves)()
    want_grads = [t.grad.clone() for t in leaves]

    mod, inputs, fn = build(graphed)
    with torch.no_grad():
        for _ in range(3):
            assert torch.equal(fn(*inputs), want)
    mod, inputs, fn = build(graphed)
    leaves = list(mod.parameters()) + [t.requires_grad_(True) for t in inputs[:-1]]
    step = training_step(lambda: fn(*inputs), leaves)
    for _ in range(3):
        step()
        for t, g in zip(leaves, want_grads):
            assert torch.equal(t.grad, g)

    mod, inputs, fn = build(graphed_reference)
    with torch.no_grad():
        got = fn(*inputs)
        torch.testing.assert_close(fn(*inputs), mod(*inputs))
        assert got.shape == want.shape


@pytest.mark.gpu
def test_a_graphed_step_replays_the_forward_and_the_backward():
    """`_timing.graphed_step` (`benchmarks/models.py --graphs`): a forward replayed writes what an eager call makes;
    a training step's gradients accumulate one step a replay (after the warm-up's), as eager steps would."""
    import evofuse
    from evofuse._timing import graphed_step

    torch.manual_seed(0)
    mod = evofuse.Transition(32, 64).cuda()
    x = torch.randn(2, 24, 32, device="cuda")
    sink = torch.empty(2, 24, 32, device="cuda")
    with torch.no_grad():
        want = mod(x)
        replay = graphed_step(lambda: sink.copy_(mod(x)).sum(), train=False)
        for _ in range(2):
            sink.zero_()
            replay()
            assert torch.equal(sink, want)
    mod(x).square().sum().backward()
    once = [p.grad.clone() for p in mod.parameters()]
    mod.zero_grad(set_to_none=True)
    replay = graphed_step(lambda: mod(x).square().sum(), train=True)
    replay()
    replay()  # (the warm-up's step, then two replays)
    for p, g in zip(mod.parameters(), once):
        torch.testing.assert_close(p.grad, 3 * g, rtol=1e-5, atol=1e-6)
