"""benchmarks/tables.py: the README's tables made from the benchmark scripts' CSV rows."""

import importlib.util
from pathlib import Path

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "tables.py"


def _tables():
    spec = importlib.util.spec_from_file_location("tables", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_blocks_table_from_models_rows():
    """A family's line: each path's forward / training step with the fastest of each mode in bold, the training
    step's MiB; a path that did not run shows a dash; rows of single modules are left out."""
    rows = [dict(family="boltz", what="block", mode=mode, impl=impl, ms=ms, peak_mib=mib)
            for impl, mode, ms, mib in (("unpatched", "fwd", "11.9", "1118"), ("unpatched", "fwd+bwd", "25.26", "4111"),
                                        ("evofuse", "fwd", "4.027", "294"), ("evofuse", "fwd+bwd", "16.26", "1247"),
                                        ("unpatched cuEquivariance", "fwd", "", ""))]
    rows.append(dict(family="boltz", what="tri_mul_out", mode="fwd", impl="evofuse", ms="1.0", peak_mib="1"))
    table = _tables().blocks(rows).splitlines()
    assert table[0] == "| block | unpatched | evofuse | cuEquivariance |"
    assert table[2] == "| boltz | 11.9 / 25.3 (4111) | **4.03** / **16.3** (1247) | - / - |"
    assert len(table) == 3


def test_trimul_table_keeps_trailing_zeros():
    rows = [dict(N="768", direction="outgoing", impl=impl, mode=mode, ms=ms, peak_mib="10")
            for impl, mode, ms in (("a", "fwd", "0.5"), ("a", "fwd+bwd", "3.9"), ("b", "fwd", "1.25"),
                                   ("b", "fwd+bwd", "412.4"))]
    assert _tables().trimul(rows).splitlines()[2] == "| 768 | outgoing | **0.500** / **3.90** (10) | 1.25 / 412 (10) |"


def test_module_ratios_flag_a_slower_patch():
    """Every module timed both ways gets unpatched / evofuse for each length, precision and mode, with what the patched
    one ran; below 1 it is in bold, and the block's rows and a module timed unpatched alone are left out."""
    rows = [dict(family="boltz", residues=N, what=what, precision="bf16 autocast", mode=mode, impl=impl, ms=ms,
                 peak_mib="1", runs=runs)
            for N, what, mode, impl, ms, runs in (
                ("384", "block", "fwd", "unpatched", "9", ""), ("384", "block", "fwd", "evofuse", "3", ""),
                ("384", "transition_s", "fwd", "unpatched", "0.12", ""),
                ("384", "transition_s", "fwd", "evofuse", "0.26", "original"),
                ("384", "tri_mul_out", "fwd+bwd", "unpatched", "4.0", ""),
                ("384", "tri_mul_out", "fwd+bwd", "evofuse", "2.0", "fused"),
                ("768", "tri_mul_out", "fwd+bwd", "unpatched", "8.0", ""),
                ("768", "tri_mul_out", "fwd+bwd", "evofuse", "2.0", "fused"),
                ("384", "attention", "fwd", "unpatched", "0.66", ""))]
    tables = _tables()
    ratios = tables.module_ratios(rows)
    assert [(r[1], r[2], r[4], round(r[-2], 3), r[-1]) for r in ratios] == [
        ("384", "transition_s", "fwd", 0.462, "original"), ("384", "tri_mul_out", "fwd+bwd", 2.0, "fused"),
        ("768", "tri_mul_out", "fwd+bwd", 4.0, "fused")]
    table = tables.modules(rows).splitlines()
    assert table[2] == "| boltz | 384 | transition_s | bf16 autocast | fwd | 0.120 | 0.260 | **0.46x** | original |"
    assert table[3] == "| boltz | 384 | tri_mul_out | bf16 autocast | fwd+bwd | 4.00 | 2.00 | 2.00x | fused |"


def test_crossover_table_has_a_column_a_length():
    """One line a module and mode, its speedup at each length, "(own)" where it ran the model's module, "-" where
    the CSV has no such row."""
    rows = [dict(family="boltz", residues=N, what="tri_mul_out", precision="bf16 autocast", mode="fwd+bwd", impl=impl,
                 ms=ms, peak_mib="1", runs=runs)
            for N, impl, ms, runs in (("128", "unpatched", "1.0", ""), ("128", "evofuse", "1.1", "original"),
                                      ("384", "unpatched", "4.0", ""), ("384", "evofuse", "2.0", "fused"))]
    rows.append(dict(rows[0], what="tri_att_start", residues="384"))
    rows.append(dict(rows[1], what="tri_att_start", residues="384", ms="0.5"))
    lines = _tables().crossover(rows).splitlines()
    assert lines[0] == "| family | module | mode | N 128 | N 384 |"
    assert lines[2] == "| boltz | tri_mul_out | fwd+bwd | **0.91x** (own) | 2.00x |"
    assert lines[3] == "| boltz | tri_att_start | fwd+bwd | - | 2.00x (own) |"


def test_lengths_table_names_out_of_memory():
    """A line a block, length and mode: each path's ms and peak GiB, the fastest in bold; a path that ran out of
    memory says so, one that did not run shows a dash."""
    rows = [dict(family="boltz-pairformer-stack", residues="4096", what="block", mode="fwd", impl=impl, ms=ms,
                 peak_mib=mib, status=status)
            for impl, ms, mib, status in (("unpatched", "", "", "OutOfMemoryError: CUDA out of memory."),
                                          ("evofuse", "928.69", "35080.2", "ok"),
                                          ("unpatched cuEquivariance", "1513.1", "65536.5", "ok"))]
    rows.append(dict(family="boltz-pairformer-stack", residues="6000", what="block", mode="fwd", impl="evofuse",
                     ms="", peak_mib="", status="AcceleratorError: an illegal memory access"))
    table = _tables().lengths(rows).splitlines()
    assert table[0] == "| block | N | mode | unpatched | evofuse | cuEquivariance |"
    assert table[2] == ("| boltz-pairformer-stack | 4096 | inference | out of memory | **929** (34.3 GiB) | "
                        "1513 (64.0 GiB) |")
    assert table[3] == "| boltz-pairformer-stack | 6000 | inference | - | - | - |"


def test_predict_table_gives_each_path_and_the_speedups():
    """A length's line: each path's total seconds with its trunk's and peak GiB, the fastest in bold, a path that ran
    out of memory named; each evofuse path's speedup over the unpatched and cuEquivariance paths where they finished;
    a path the CSV lacks has no column."""
    rows = [dict(path=path, residues=N, trunk_ms=trunk, total_ms=total, peak_mib=mib, status=status)
            for path, N, trunk, total, mib, status in (
                ("unpatched", "512", "7488.4", "14583.9", "2136.4", "ok"),
                ("cuequivariance", "512", "2879.5", "10251.3", "2109.4", "ok"),
                ("evofuse", "512", "1596.1", "8727.1", "2091.6", "ok"),
                ("unpatched", "2048", "", "", "", "OutOfMemoryError: CUDA out of memory"),
                ("evofuse", "2048", "30000", "60000", "20480", "ok"))]
    table = _tables().predict(rows).splitlines()
    assert table[0] == ("| N | unpatched | cuEquivariance | evofuse | evofuse: speedup over unpatched / "
                        "cuEquivariance |")
    assert table[2] == ("| 512 | 14.58 s (7.49 s) 2.1 GiB | 10.25 s (2.88 s) 2.1 GiB | **8.73 s** (1.60 s) 2.0 GiB | "
                        "1.67x / 1.17x |")
    assert table[3] == "| 2048 | out of memory | - | **60.00 s** (30.00 s) 20.0 GiB | - / - |"
    rows.append(dict(path="evofuse-graphs", residues="512", trunk_ms="1500", total_ms="2500", peak_mib="2048",
                     status="ok"))
    table = _tables().predict(rows).splitlines()
    assert table[0].endswith("| evofuse, diffusion graphed: speedup over unpatched / cuEquivariance |")
    assert table[2].endswith("| **2.50 s** (1.50 s) 2.0 GiB | 1.67x / 1.17x | 5.83x / 4.10x |")


def test_stages_table_gives_each_stage_in_seconds():
    rows = [dict(path="evofuse-graphs", residues="256", trunk_ms="1006.4", diffusion_ms="7681.6", confidence_ms="20.5",
                 total_ms="8708.6", peak_mib="783.9", status="ok"),
            dict(path="unpatched", residues="4096", trunk_ms="", diffusion_ms="", confidence_ms="", total_ms="",
                 peak_mib="", status="OutOfMemoryError: CUDA out of memory")]
    table = _tables().stages(rows).splitlines()
    assert table[2] == "| 256 | evofuse, diffusion graphed | 1.01 | 7.68 | 0.021 | 8.71 | 0.8 |"
    assert table[3] == "| 4096 | unpatched | " + " | ".join(["out of memory"] * 5) + " |"
