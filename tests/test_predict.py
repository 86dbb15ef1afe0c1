"""benchmarks/predict.py on the CPU: Boltz-2's whole model at one block per stack on the script's synthetic protein,
evofuse-patched against unpatched (trunk, diffusion with the same noise, confidence), and the stage timer's split."""

import copy
import importlib.util
import sys
from pathlib import Path

import pytest
import torch

from .conftest import DEVICE
from .helpers import rel_error

pytestmark = pytest.mark.skipif(
    any(importlib.util.find_spec(name) is None for name in ("boltz", "pytorch_lightning", "einx", "frozendict")),
    reason="Boltz-2's model needs boltz 2.2.1 (--no-deps) and the `models` extra")

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import predict  # noqa: E402  (benchmarks/predict.py)


def _run(model, feats, steps=2):
    sample = model.structure_module.sample

    def seeded(*args, **kwargs):  # the diffusion's noise and augmentation: the same draws for both models
        torch.manual_seed(3)
        return sample(*args, **kwargs)
    model.structure_module.sample = seeded
    with torch.no_grad():
        return model(dict(feats), recycling_steps=0, num_sampling_steps=steps, diffusion_samples=1,
                     run_confidence_sequentially=True)


@pytest.mark.parametrize("diffusion_graphs", [False, True])
def test_patched_prediction_matches_boltz(fused_kernels, diffusion_graphs):
    """On a GPU with diffusion_graphs, the diffusion network's third and fourth steps are replays of its CUDA
    graph."""
    from evofuse.integrations import boltz as integration

    torch.manual_seed(0)
    original = predict.build_model(tiny=True).to(DEVICE)
    patched = copy.deepcopy(original)
    replaced = integration.patch(patched, diffusion_graphs=diffusion_graphs)
    assert any("pairformer_module" in name for name in replaced)
    assert "structure_module.score_model.token_transformer.layers.0.pair_bias_attn" in replaced
    feats = {k: v.to(DEVICE) for k, v in predict.protein_features(9, 5).items()}
    steps = 4 if diffusion_graphs else 2
    got, want = _run(patched, feats, steps), _run(original, feats, steps)
    replayed = vars(patched.structure_module.score_model).get("forward")
    assert (replayed is not None) == diffusion_graphs
    if diffusion_graphs:
        assert not replayed.broken and bool(replayed.graphs) == (DEVICE == "cuda")
    for key in ("s", "z", "pdistogram"):
        assert rel_error(got[key], want[key]) <= 1e-5, key
    for key in ("sample_atom_coords", "plddt", "pae", "pde"):
        assert torch.isfinite(got[key]).all(), key
        assert rel_error(got[key], want[key]) <= 1e-4, key


def test_diffusion_graphs_keep_the_parameters_and_go_with_unpatch():
    from evofuse.integrations import boltz as integration
    from evofuse.integrations._replay import Replayed

    model = predict.build_model(tiny=True)
    names = list(model.state_dict())
    integration.patch(model, diffusion_graphs=True)
    assert isinstance(vars(model.structure_module.score_model)["forward"], Replayed)
    integration.unpatch(model)
    assert "forward" not in vars(model.structure_module.score_model) and list(model.state_dict()) == names


def test_stage_times_add_up():
    torch.manual_seed(0)
    model = predict.build_model(tiny=True)
    got = predict.predict(model, predict.protein_features(9, 3), recycles=0, steps=2, precision="fp32")
    assert all(got[stage] > 0 for stage in predict.STAGES)
    assert got["trunk"] + got["diffusion"] + got["confidence"] == pytest.approx(got["total"])
    assert got["diffusion"] < got["total"] and got["confidence"] < got["total"]
    assert "sample" not in vars(model.structure_module)  # (the timer's wrapper gone with it)


def test_script_writes_a_row_per_path(tmp_path):
    """The script end to end (its warm-up prediction, then the timed one): a row per path, each "ok" with every
    stage's time and a finite plDDT."""
    import csv

    assert predict.main(["--tiny", "--residues", "9", "--msa-rows", "3", "--recycles", "0", "--steps", "2",
                         "--paths", "unpatched", "--precision", "fp32", "--out", str(tmp_path)]) == 0
    rows = list(csv.DictReader(open(next(tmp_path.glob("*/predict.csv")))))
    assert [(r["path"], r["residues"], r["status"]) for r in rows] == [("unpatched", "9", "ok")]
    assert all(float(rows[0][f"{s}_ms"]) > 0 for s in predict.STAGES) and 0 <= float(rows[0]["plddt"]) <= 1
