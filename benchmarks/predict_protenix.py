"""A whole Protenix prediction, timed from features to structure and confidence, as `predict.py` times Boltz-2's: trunk
(`--recycles` + 1 cycles), 200 diffusion steps, 1 sample, the confidence head; unpatched eager (its triangle kernels
"torch"), the model's cuEquivariance path (its default: `triangle_multiplicative = triangle_attention =
"cuequivariance"`) and evofuse-patched, one after another in one run.

    python benchmarks/predict_protenix.py [--residues 256,512,1024,2048] [--paths unpatched,cuequivariance,evofuse]
        [--msa-rows 1024] [--recycles 3] [--steps 200] [--out benchmarks/results]
    python benchmarks/predict_protenix.py --tiny --residues 24 --steps 2 --recycles 0  # a CPU check (no times)

The model is Protenix 2.0.0's `protenix_base_default_v1.0.0` configuration (48 Pairformer blocks, c_s 384, c_z 128,
4 MSA blocks, 2 template blocks, 24 diffusion-transformer blocks) with its inference settings (bf16 autocast as its
runner sets it, the diffusion in float32 as its `skip_amp` says, its chunk sizes by N) and random weights. The input
is one synthetic protein chain of N tokens, `predict.ATOMS_PER_TOKEN` heavy atoms each, an MSA of `--msa-rows`
sequences and no templates (the inference featurizer's placeholders), every tensor shaped as
`protenix.data.utils.get_data_shape_dict` gives it (that module imports pandas: the shapes are written here), no
downloads. Wall time per stage by CUDA events around the
model's `sample_diffusion` and `run_confidence_head` calls (the rest is the trunk), peak memory of the prediction; a
table on stdout and <out>/<gpu>/predict-protenix.csv, each row written as it is measured.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Mapping

import torch
from predict import ATOMS_PER_TOKEN, StageTimer, arguments, timed, write_rows

os.environ.setdefault("LAYERNORM_TYPE", "torch")  # (before protenix's import: its fused LayerNorm builds from CUDA sources)
MODEL = "protenix_base_default_v1.0.0"
# the tiny model (a CPU check): one block a stack, a pair of 16 channels wherever the configuration names c_z, a
# single representation of 64 (4 heads; the diffusion's tokens 128)
TINY_BLOCKS = [("pairformer",), ("msa_module",), ("template_embedder",), ("diffusion_module", "transformer"),
               ("diffusion_module", "atom_encoder"), ("diffusion_module", "atom_decoder"), ("confidence_head",)]
TINY_PAIR = ("relative_position_encoding", "template_embedder", "msa_module", "pairformer", "diffusion_module",
             "confidence_head", "distogram_head")


def _deep_update(d: dict, u: Mapping) -> dict:
    for k, v in u.items():
        if isinstance(v, Mapping) and isinstance(d.get(k), Mapping):
            _deep_update(d[k], v)
        else:
            d[k] = v
    return d


def configuration(recycles: int, steps: int, kernels: str, tiny: bool = False):
    """The model's configuration as Protenix's inference runner builds it for MODEL, with recycles + 1 cycles,
    `steps` diffusion steps, 1 sample and its triangle kernels `kernels` ("torch" or "cuequivariance")."""
    from configs.configs_base import configs as base
    from configs.configs_data import data_configs
    from configs.configs_inference import inference_configs
    from configs.configs_model_type import model_configs
    from protenix.config.config import parse_configs

    merged = _deep_update({**base, "data": data_configs, **inference_configs}, model_configs[MODEL])
    merged = _deep_update(merged, {"model": {"N_cycle": recycles + 1}, "sample_diffusion": {"N_step": steps,
                                   "N_sample": 1}, "triangle_multiplicative": kernels, "triangle_attention": kernels})
    if tiny:
        for path in TINY_BLOCKS:
            node = merged["model"]
            for key in path:
                node = node[key]
            node["n_blocks"] = 1
        _deep_update(merged, {"c_z": 16, "c_s": 64, "model": {name: {"c_z": 16} for name in TINY_PAIR}})
        _deep_update(merged["model"], {"pairformer": {"c_s": 64, "n_heads": 4}, "confidence_head": {"c_s": 64},
                                       "diffusion_module": {"c_s": 64, "c_token": 128, "transformer": {"n_heads": 4}}})
    return parse_configs(configs=merged, arg_str="", fill_required_with_null=True)


def build_model(recycles: int, steps: int, kernels: str, tiny: bool = False):
    """Protenix in eval mode with random weights (`configuration`; `tiny`: one block a stack, c_z 16, c_s 64, for a
    check on a CPU)."""
    from protenix.model.protenix import Protenix

    return Protenix(configuration(recycles, steps, kernels, tiny)).eval()


def protein_features(N: int, S: int, seed: int = 0) -> dict[str, torch.Tensor]:
    """The inference featurizer's tensors for one protein chain of N residues (no batch dimension, as its data
    loader gives them), ATOMS_PER_TOKEN heavy atoms each, an MSA of S rows with deletions, and its placeholders for
    no templates."""
    g = torch.Generator().manual_seed(seed)
    A = N * ATOMS_PER_TOKEN
    restype = torch.randint(0, 20, (N,), generator=g)  # (the 20 amino acids, first in the residue vocabulary)
    msa = torch.where(torch.rand(S, N, generator=g) < 0.3, torch.randint(0, 20, (S, N), generator=g), restype)
    msa[0] = restype
    has_deletion = (torch.rand(S, N, generator=g) < 0.05).float()
    atom_token = torch.arange(A) // ATOMS_PER_TOKEN
    elements = torch.tensor([6, 5, 5, 7, 5, 5, 5, 7])[torch.arange(A) % ATOMS_PER_TOKEN]  # N CA C O CB ... (Z - 1)
    bonds = torch.zeros(N, N)
    bonds[torch.arange(N - 1), torch.arange(1, N)] = 1
    ids, ones = torch.zeros(N, dtype=torch.long), torch.ones(A)
    names = torch.zeros(A, 4, 64)
    names[torch.arange(A)[:, None], torch.arange(4), torch.randint(1, 64, (A, 4), generator=g)] = 1
    feats = {
        "residue_index": torch.arange(N), "token_index": torch.arange(N), "asym_id": ids, "entity_id": ids,
        "sym_id": ids, "restype": torch.nn.functional.one_hot(restype, 32).float(),
        "ref_pos": torch.randn(A, 3, generator=g) * 1.5, "ref_mask": ones, "ref_charge": torch.zeros(A),
        "ref_element": torch.nn.functional.one_hot(elements, 128).float(), "ref_atom_name_chars": names,
        "ref_space_uid": atom_token, "atom_to_token_idx": atom_token,
        "atom_to_tokatom_idx": torch.arange(A) % ATOMS_PER_TOKEN,
        "msa": msa, "has_deletion": has_deletion, "deletion_value": has_deletion * torch.rand(S, N, generator=g),
        "profile": torch.nn.functional.one_hot(msa, 32).float().mean(0), "deletion_mean": has_deletion.mean(0),
        # (the featurizer's placeholders for no templates: 4 of gaps)
        "template_restype": torch.full((4, N), 31, dtype=torch.long), "template_all_atom_mask": torch.zeros(4, N, 37),
        "template_all_atom_positions": torch.zeros(4, N, 37, 3),
        "token_bonds": bonds + bonds.t(), "is_protein": ones, "is_rna": 0 * ones, "is_dna": 0 * ones,
        "is_ligand": 0 * ones, "distogram_rep_atom_mask": (torch.arange(A) % ATOMS_PER_TOKEN == 1).float(),
        "pae_rep_atom_mask": (torch.arange(A) % ATOMS_PER_TOKEN == 1).float(),
        "plddt_m_rep_atom_mask": ones, "modified_res_mask": 0 * ones, "resolution": torch.ones(1),
        "has_frame": torch.ones(N, dtype=torch.long),
        "frame_atom_index": torch.arange(N)[:, None] * ATOMS_PER_TOKEN + torch.tensor([0, 1, 2]),
        "entity_mol_id": 0 * atom_token, "mol_id": 0 * atom_token, "mol_atom_index": torch.arange(A),
        "is_distillation": torch.zeros(1),
    }
    return feats


class ProtenixStages(StageTimer):
    """`predict.StageTimer` around Protenix's diffusion (its conditioning's and atom encoder's caches, then
    `sample_diffusion`) and its confidence head (`run_confidence_head`)."""

    def methods(self, model) -> list[tuple[str, object, str]]:
        diffusion = model.diffusion_module
        return [("diffusion", diffusion.diffusion_conditioning, "prepare_cache"),
                ("diffusion", diffusion.atom_attention_encoder, "prepare_cache"),
                ("diffusion", model, "sample_diffusion"), ("confidence", model, "run_confidence_head")]

    def modules(self, model) -> list:
        return []


def predict(model, feats, precision: str) -> dict[str, float]:
    """One prediction's ms by stage, its peak memory in MiB (0 on a CPU) and expected pLDDT, under bf16 autocast as
    Protenix's runner calls it (`precision` "bf16") or in float32 (`predict.timed`)."""
    out, got = timed(ProtenixStages, model, feats["restype"].is_cuda, precision, lambda: model(
        input_feature_dict=dict(feats), label_full_dict=None, label_dict=None, mode="inference",
        mc_dropout_apply_rate=0.0)[0])
    if not torch.isfinite(out["coordinate"]).all():
        raise FloatingPointError("the predicted coordinates are not finite")
    probs = out["plddt"].float().softmax(-1)  # (its bins' probabilities: the expected pLDDT in [0, 1])
    plddt = (probs * (torch.arange(probs.shape[-1], device=probs.device) + 0.5) / probs.shape[-1]).sum(-1).mean()
    return got | {"plddt": float(plddt)}


def prepared(path: str, recycles: int, steps: int, tiny: bool, device: str):
    """A fresh model for a path: unpatched (its triangle kernels "torch"), its cuEquivariance kernels (refused where
    cuequivariance_torch is missing: Protenix would fall back to its torch kernels silently), or evofuse-patched (the
    modules it does not replace on their "torch" kernels)."""
    if path == "cuequivariance" and importlib.util.find_spec("cuequivariance_torch") is None:
        raise ImportError("cuequivariance_torch is not installed (Protenix would run its torch kernels instead)")
    torch.manual_seed(0)
    model = build_model(recycles, steps, "cuequivariance" if path == "cuequivariance" else "torch", tiny).to(device)
    if path == "evofuse":
        from evofuse.integrations import protenix as integration

        integration.patch(model)
    return model


def main(argv: list[str] | None = None) -> int:
    args = arguments(argv, __doc__.split("\n\n")[0], "unpatched,cuequivariance,evofuse")
    device = "cuda" if torch.cuda.is_available() else "cpu"

    def measure(path: str, N: int, feats: dict) -> dict:
        model = prepared(path, 0, 2, args.tiny, device)
        predict(model, feats, args.precision)  # (compiles, autotunes)
        model.N_cycle = args.recycles + 1
        model.configs.sample_diffusion["N_step"] = args.steps
        return predict(model, feats, args.precision)

    return write_rows("protenix", "predict-protenix.csv", args, device,
                      lambda N: {k: v.to(device) for k, v in protein_features(N, args.msa_rows).items()}, measure)


if __name__ == "__main__":
    sys.exit(main())
