"""The package's layout rules: no source file over 400 lines, and no measurement (a card's name, a time) in a code
comment, where it would go stale: figures belong to docs/PERFORMANCE.md and the benchmark's CSVs."""

import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "evofuse"
SOURCES = sorted(PACKAGE.rglob("*.py"))
MEASUREMENT = re.compile(r"\b(H100|H200|A100)\b|\b\d+(\.\d+)? ?(ms|us|µs)\b")


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_source_files_are_short(path):
    assert len(path.read_text().splitlines()) <= 400, f"{path.name}: split it (one stage or concern a file)"


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_measurements_in_comments(path):
    comments = [(n, line) for n, line in enumerate(path.read_text().splitlines(), 1) if "#" in line]
    found = [(n, line.strip()) for n, line in comments if MEASUREMENT.search(line.split("#", 1)[1])]
    assert not found, f"{path.name}: a measurement in a comment, lines {found}"


def test_the_measurement_pattern_finds_measurements():
    for text in ("took 0.31 ms on an H200", "221 us with it", "an H100 80GB"):
        assert MEASUREMENT.search(text), text
    for text in ("BLOCK_M rows a step", "the H dimension", "msa rows"):
        assert not MEASUREMENT.search(text), text
