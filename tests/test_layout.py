"""The package's layout rules: no source file over 400 lines, no measurement (a card's name, a time) in a code
comment of the package, its tests or its benchmarks, where it would go stale (figures belong to docs/PERFORMANCE.md and
the benchmark's CSVs), and no commit id in a comment or a document (history stays in git)."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "evofuse"
SOURCES = sorted(PACKAGE.rglob("*.py"))
# (the test suite's vendored model modules aside: they follow OpenFold's code as it is)
CODE = SOURCES + sorted(p for p in (ROOT / "tests").glob("*.py")) + sorted((ROOT / "benchmarks").glob("*.py")) + [
    ROOT / "benchmarks" / "gpu_run.sh"]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
MEASUREMENT = re.compile(r"\b(H100|H200|A100)\b|\b\d+(\.\d+)? ?(ms|us|µs)\b")
COMMIT = re.compile(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}\b")  # (a hex word of digits and letters)


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_source_files_are_short(path):
    assert len(path.read_text().splitlines()) <= 400, f"{path.name}: split it (one stage or concern a file)"


@pytest.mark.parametrize("path", CODE, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_measurements_or_commits_in_comments(path):
    comments = [(n, line) for n, line in enumerate(path.read_text().splitlines(), 1) if "#" in line]
    found = [(n, line.strip()) for n, line in comments
             if MEASUREMENT.search(line.split("#", 1)[1]) or COMMIT.search(line.split("#", 1)[1])]
    assert not found, f"{path.name}: a measurement or a commit id in a comment, lines {found}"


@pytest.mark.parametrize("path", CODE + DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_commit_ids(path):
    found = [(n, line.strip()) for n, line in enumerate(path.read_text().splitlines(), 1) if COMMIT.search(line)]
    assert not found, f"{path.name}: a commit id, lines {found}"


def test_the_measurement_pattern_finds_measurements():
    for text in ("took 0.31 ms on an H200", "221 us with it", "an H100 80GB"):
        assert MEASUREMENT.search(text), text
    for text in ("BLOCK_M rows a step", "the H dimension", "msa rows"):
        assert not MEASUREMENT.search(text), text
    for text in ("measured at " + "e754" + "c24", "since " + "7c51" + "c09d"):  # (split: this file is read too)
        assert COMMIT.search(text), text
    for text in ("a deadbeef value", "1234567 elements", "the decade"):
        assert not COMMIT.search(text), text


def test_every_source_folder_is_a_package():
    """A folder of the package's sources without an `__init__.py` is left out of a built wheel (setuptools' `find`
    takes packages only), though an editable install still imports it."""
    missing = sorted(str(f.relative_to(ROOT)) for f in {p.parent for p in SOURCES} if not (f / "__init__.py").exists())
    assert not missing, missing
