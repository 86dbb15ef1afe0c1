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
