"""Every kernel's default launch compiles for sm_90 and fits the H200's shared memory (no GPU needed)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]


# A folder holding the device machine's triton (.ci/run installs it there with --target): its compiler
# can fail where the installed one does not (session 9: triton 3.6's software pipeliner rejected a kernel
# that 3.9 compiled), so CI compiles with both.
DEVICE_TRITON = os.environ.get("EVOFUSE_SM90_TRITON")


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU compiles and runs these kernels in test_gpu.py")
@pytest.mark.parametrize("triton_path", [None, pytest.param(DEVICE_TRITON, marks=pytest.mark.skipif(
    not DEVICE_TRITON, reason="EVOFUSE_SM90_TRITON (set by .ci/run) names no folder with the device's triton"))],
    ids=["installed-triton", "device-triton"])
def test_default_launches_compile_for_sm90(triton_path):
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join([*([triton_path] if triton_path else []), str(ROOT), env.get("PYTHONPATH", "")])
    env.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    run = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "compile_sm90.py")], env=env, cwd=ROOT,
                         capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    if triton_path:  # the compiler that ran is the folder's
        version = next(Path(triton_path).glob("triton-*.dist-info")).name.split("-")[1].removesuffix(".dist")
        assert run.stdout.startswith(f"triton {version}\n"), run.stdout[:200]
