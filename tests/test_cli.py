"""`evofuse check` and `evofuse bench` as a user runs them."""

import subprocess
import sys

import pytest
import torch

from evofuse.cli import main


def test_check_passes_on_the_seed_shapes(capsys):
    assert main(["check", "--trials", "1"]) == 0
    out = capsys.readouterr().out
    assert "opm-seed" in out and "att-seed" in out and "2 passed, 0 failed" in out


def test_check_runs_the_kernels_in_the_interpreter(capsys):
    if torch.cuda.is_available():
        pytest.skip("the interpreter run is for machines without a GPU")
    assert main(["check", "--trials", "1", "--impl", "triton", "--case", "att-seed"]) == 0
    assert "triton" in capsys.readouterr().out


def test_check_rejects_unknown_case():
    with pytest.raises(SystemExit):
        main(["check", "--case", "opm-huge"])


def test_python_dash_m_and_bench_without_gpu():
    if torch.cuda.is_available():
        pytest.skip("without a GPU only")
    out = subprocess.run([sys.executable, "-m", "evofuse", "bench"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "no CUDA device" in out.stdout
