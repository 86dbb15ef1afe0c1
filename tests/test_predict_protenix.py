"""benchmarks/predict_protenix.py on the CPU: Protenix's whole model at one block per stack on the script's synthetic
protein, evofuse-patched against unpatched (trunk, diffusion with the same noise, confidence), the stage timer's split
and the script end to end."""

import copy
import importlib.util
import os
import sys
from pathlib import Path

import numpy
import pytest
import torch

from .conftest import DEVICE
from .helpers import rel_error

pytestmark = pytest.mark.skipif(
    any(importlib.util.find_spec(name) is None for name in ("protenix", "optree", "rdkit", "scipy", "ml_collections")),
    reason="Protenix's model needs protenix 2.0.0 (--no-deps) and the `models` extra")

os.environ.setdefault("LAYERNORM_TYPE", "torch")  # Protenix's own LayerNorm builds a CUDA extension otherwise
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import predict_protenix  # noqa: E402  (benchmarks/predict_protenix.py)


def _run(model, feats):
    """The model's prediction, its diffusion's noise and random rotations (scipy's, from NumPy's global generator)
    drawn the same for every model; (coordinates, pLDDT logits, PAE logits)."""
    sample = model.sample_diffusion

    def seeded(**kwargs):
        torch.manual_seed(3)
        numpy.random.seed(3)
        return sample(**kwargs)
    model.sample_diffusion = seeded
    with torch.no_grad():
        out, _, _ = model(input_feature_dict=dict(feats), label_full_dict=None, label_dict=None, mode="inference",
                          mc_dropout_apply_rate=0.0)
    del model.sample_diffusion
    return out["coordinate"], out["plddt"], out["pae"]


def test_patched_prediction_matches_protenix(fused_kernels):
    """Every family module the integration replaces, the diffusion transformer's attention (its efficient-fusion
    bias) among them, inside the whole model: the same structure and confidence as the unpatched model's."""
    from evofuse.integrations import protenix as integration

    original = predict_protenix.prepared("unpatched", 0, 2, True, DEVICE)
    patched = copy.deepcopy(original)
    with pytest.warns(RuntimeWarning, match="cross attention"):  # (the atom transformer's, left as it is)
        replaced = integration.patch(patched)
    assert any(name.startswith("pairformer_stack") for name in replaced)
    assert "diffusion_module.diffusion_transformer.blocks.0.attention_pair_bias" in replaced
    feats = {k: v.to(DEVICE) for k, v in predict_protenix.protein_features(9, 5).items()}
    for got, want, name in zip(_run(patched, feats), _run(original, feats), ("coordinate", "plddt", "pae")):
        assert torch.isfinite(got).all(), name
        assert rel_error(got, want) <= 1e-4, name


def test_stage_times_add_up():
    torch.manual_seed(0)
    model = predict_protenix.build_model(0, 2, "torch", tiny=True)
    got = predict_protenix.predict(model, predict_protenix.protein_features(9, 3), precision="fp32")
    assert all(got[stage] > 0 for stage in ("trunk", "diffusion", "confidence", "total"))
    assert got["trunk"] + got["diffusion"] + got["confidence"] == pytest.approx(got["total"])
    assert 0 <= got["plddt"] <= 1
    assert "sample_diffusion" not in vars(model)  # (the timer's wrappers gone with it)
    assert "prepare_cache" not in vars(model.diffusion_module.diffusion_conditioning)


def test_script_writes_a_row_per_path(tmp_path):
    """The script end to end (its warm-up prediction, then the timed one at the asked cycles and steps): a row per
    path, "ok" where its kernels are installed, the cuEquivariance path's reason where they are not."""
    import csv

    assert predict_protenix.main(["--tiny", "--residues", "9", "--msa-rows", "3", "--recycles", "1", "--steps", "3",
                                  "--paths", "unpatched,cuequivariance", "--precision", "fp32",
                                  "--out", str(tmp_path)]) == 0
    rows = list(csv.DictReader(open(next(tmp_path.glob("*/predict-protenix.csv")))))
    assert [(r["path"], r["residues"]) for r in rows] == [("unpatched", "9"), ("cuequivariance", "9")]
    assert rows[0]["status"] == "ok" and float(rows[0]["total_ms"]) > 0
    cueq = importlib.util.find_spec("cuequivariance_torch") is not None and DEVICE == "cuda"
    assert (rows[1]["status"] == "ok") == cueq, rows[1]["status"]
