"""benchmarks/families.py on the CPU: every installed family's block builds at a small size, runs as the model calls
it, and each module `benchmarks/models.py` times is one the integration replaces and runs with the call it is given."""

import copy
import importlib
import importlib.util
import inspect
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import families  # noqa: E402  (benchmarks/families.py)

PACKAGES = {"boltz": ("boltz", "einops"), "protenix": ("protenix", "optree", "rdkit"),
            "openfold3": ("openfold3", "gemmi", "ml_collections", "biotite"), "openfold": ()}


@pytest.mark.parametrize("name", list(families.FAMILIES))
def test_family_builds_and_runs(name):
    package, builder = families.FAMILIES[name]
    missing = [m for m in PACKAGES[package] if importlib.util.find_spec(m) is None]
    if missing:
        pytest.skip(f"{missing} not installed")
    torch.manual_seed(0)
    options = {"layers": 1} if "layers" in inspect.signature(builder).parameters else {}
    block, inputs, run, modules, variants = builder(3, 8, **options)
    with torch.no_grad():
        run(block, *inputs)
        for path, call in modules.items():
            call(block.get_submodule(path), *inputs)
    integration = importlib.import_module(f"evofuse.integrations.{package}")
    replaced = integration.patch(copy.deepcopy(block))
    assert set(modules) <= set(replaced), set(modules) - set(replaced)
    assert all(which in ("unpatched", "evofuse") for which, _ in variants.values())
