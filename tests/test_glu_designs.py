"""benchmarks/glu_designs.py at small shapes (in Triton's interpreter on the CPU): the library's passes and every
candidate design (tensor descriptors, persistent programs) agree with the PyTorch reference, so that a GPU run times
designs that compute the same thing."""

import sys
from pathlib import Path

import pytest

from evofuse._runtime import interpreting

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))


@pytest.mark.no_poison
def test_every_design_computes_the_passes():
    import glu_designs  # (benchmarks/glu_designs.py)

    errors = glu_designs.main(["--tiny"])
    assert len(errors) == 3 * (1 + 2 * len(glu_designs.TINY)) - len(glu_designs.TINY)
    assert max(errors) < (5e-3 if interpreting() else 3e-2), errors  # (float16 there, bfloat16 on a GPU)
