"""A whole Boltz-2 prediction, timed from features to structure and confidence: trunk (3 recycles), 200 diffusion
steps, 1 sample, the confidence head; unpatched eager, the model's cuEquivariance path (`use_kernels`),
evofuse-patched, and evofuse-patched with the diffusion network's steps replayed from a CUDA graph
(`patch(model, diffusion_graphs=True)`), one after another in one run.

    python benchmarks/predict.py [--residues 256,512,1024,2048]
        [--paths unpatched,cuequivariance,evofuse,evofuse-graphs] [--msa-rows 1024] [--recycles 3] [--steps 200]
        [--precision bf16] [--out benchmarks/results]
    python benchmarks/predict.py --tiny --residues 24 --steps 2 --recycles 0  # a CPU check of the script (no times)

The model is Boltz-2 at its published training configuration (boltz's `scripts/train/configs/structurev2.yaml`: 64
Pairformer blocks as its predict path builds them, 4 MSA blocks, 24 token-transformer blocks) with the predict-time
diffusion parameters of `boltz.main.Boltz2DiffusionParams` (DIFFUSION) and random weights; its confidence head's Pairformer has 4
blocks (AF3's; the checkpoint's own arguments are not in the package). The input is one synthetic protein chain of N
tokens, each residue with 8 heavy atoms (ALA to TRP average), an MSA of `--msa-rows` sequences, built here from the
featurizer's specification (`boltz.data.feature.featurizerv2`): no downloads. Wall time per stage (trunk with the
embedders and distogram, diffusion with its conditioning, confidence) by CUDA events around the model's own calls,
peak memory of the prediction; a table on stdout and <out>/<gpu>/predict.csv, each row written as it is measured.
"""

from __future__ import annotations

import argparse
import csv
import sys
import time
from pathlib import Path

import torch

ATOMS_PER_TOKEN = 8
STAGES = ("trunk", "diffusion", "confidence", "total")
# boltz.main's Boltz2DiffusionParams and BoltzSteeringParams (boltz 2.2.1), what its predict command passes; copied,
# as boltz.main imports its command line's dependencies
DIFFUSION = {"gamma_0": 0.8, "gamma_min": 1.0, "noise_scale": 1.003, "rho": 7, "step_scale": 1.5, "sigma_min": 0.0001,
             "sigma_max": 160.0, "sigma_data": 16.0, "P_mean": -1.2, "P_std": 1.5, "coordinate_augmentation": True,
             "alignment_reverse_diff": True, "synchronize_sigmas": True}
STEERING = {"fk_steering": False, "num_particles": 3, "fk_lambda": 4.0, "fk_resampling_interval": 3,
            "physical_guidance_update": False, "contact_guidance_update": True, "num_gd_steps": 20}


def build_model(tiny: bool = False):
    """Boltz-2 in eval mode with random weights (see the module's docstring); `tiny`: 1 block per stack and narrow
    widths (c_s 64, c_z 16, 4 heads; 2 of 16 in the pair's attentions), for a check on a CPU."""
    from boltz.model.models.boltz2 import Boltz2

    def blocks(n):
        return 1 if tiny else n
    token_s, token_z, atom_s, atom_z, heads = (64, 16, 32, 8, 4) if tiny else (384, 128, 128, 16, 16)
    pair_heads = {"pairwise_head_width": 16, "pairwise_num_heads": 2} if tiny else {"pairwise_head_width": 32,
                                                                                    "pairwise_num_heads": 4}
    pairformer = {"num_blocks": blocks(64), "num_heads": heads, "dropout": 0.0, "activation_checkpointing": False,
                  "offload_to_cpu": False, "v2": True, **pair_heads}
    model = Boltz2(
        atom_s=atom_s, atom_z=atom_z, token_s=token_s, token_z=token_z, num_bins=64, atom_feature_dim=388,
        training_args={"recycling_steps": 3, "sampling_steps": 200, "diffusion_multiplicity": 1,
                       "diffusion_samples": 1},
        validation_args={"recycling_steps": 3, "sampling_steps": 200, "diffusion_samples": 1,
                         "symmetry_correction": False},
        embedder_args={"atom_encoder_depth": blocks(3), "atom_encoder_heads": 4, "add_mol_type_feat": True,
                       "add_method_conditioning": True, "add_modified_flag": True, "add_cyclic_flag": True},
        msa_args={"msa_s": 16 if tiny else 64, "msa_blocks": blocks(4), "msa_dropout": 0.0, "z_dropout": 0.0,
                  **pair_heads, "use_paired_feature": True,
                  "activation_checkpointing": False},
        pairformer_args=pairformer,
        score_model_args={"sigma_data": 16, "dim_fourier": 256, "atom_encoder_depth": blocks(3),
                          "atom_encoder_heads": 4, "token_transformer_depth": blocks(24),
                          "token_transformer_heads": heads, "atom_decoder_depth": blocks(3), "atom_decoder_heads": 4,
                          "conditioning_transition_layers": 2, "transformer_post_ln": False,
                          "activation_checkpointing": False},
        diffusion_process_args=DIFFUSION,
        diffusion_loss_args={"add_smooth_lddt_loss": True, "nucleotide_loss_weight": 5.0, "ligand_loss_weight": 10.0},
        confidence_model_args={"num_dist_bins": 64, "max_dist": 22, "add_s_to_z_prod": True,
                               "add_s_input_to_s": True, "add_z_input_to_z": True,
                               "pairformer_args": {**pairformer, "num_blocks": blocks(4)},
                               "confidence_args": {"use_separate_heads": True}},
        confidence_prediction=True, ema=False, exclude_ions_from_lddt=True, fix_sym_check=True, cyclic_pos_enc=True,
        bond_type_feature=True, predict_bfactor=True, use_templates=False, steering_args=STEERING,
    )
    return model.eval()


def protein_features(N: int, S: int, seed: int = 0) -> dict[str, torch.Tensor]:
    """The featurizer's tensors for one protein chain of N residues (B 1), ATOMS_PER_TOKEN heavy atoms each (the
    atoms padded to a multiple of the 32-atom windows), an MSA of S rows with deletions, no templates."""
    from boltz.data import const

    g = torch.Generator().manual_seed(seed)
    A = -(-N * ATOMS_PER_TOKEN // 32) * 32
    real = N * ATOMS_PER_TOKEN
    restype = torch.randint(2, 22, (N,), generator=g)  # (the 20 amino acids in the token vocabulary)
    msa = torch.where(torch.rand(S, N, generator=g) < 0.3, torch.randint(2, 22, (S, N), generator=g), restype)
    msa[0] = restype
    has_deletion = (torch.rand(S, N, generator=g) < 0.05).float()
    deletion = has_deletion * torch.rand(S, N, generator=g)
    atom_token = torch.arange(real) // ATOMS_PER_TOKEN
    atom_to_token = torch.zeros(A, N)
    atom_to_token[torch.arange(real), atom_token] = 1
    rep = torch.zeros(N, A)
    rep[torch.arange(N), torch.arange(N) * ATOMS_PER_TOKEN + 1] = 1  # (CA)
    elements = torch.tensor([7, 6, 6, 8, 6, 6, 6, 8])[torch.arange(real) % ATOMS_PER_TOKEN]  # N CA C O CB ...
    pad = torch.zeros(A)
    pad[:real] = 1
    ref_pos = torch.zeros(A, 3)
    ref_pos[:real] = torch.randn(real, 3, generator=g) * 1.5
    names = torch.zeros(A, 4, 64)
    names[torch.arange(real)[:, None], torch.arange(4), torch.randint(1, 64, (real, 4), generator=g)] = 1
    bonds = torch.zeros(N, N)
    bonds[torch.arange(N - 1), torch.arange(1, N)] = 1
    bonds = bonds + bonds.t()
    backbone = torch.zeros(A, 1 + len(const.protein_backbone_atom_index) + len(const.nucleic_backbone_atom_index))
    backbone[torch.arange(A), 0] = 1
    conditioning = torch.zeros(N, N, len(const.contact_conditioning_info))
    conditioning[..., 0] = 1
    ids = torch.zeros(N, dtype=torch.long)
    feats = {
        "token_index": torch.arange(N), "residue_index": torch.arange(N), "asym_id": ids, "entity_id": ids,
        "sym_id": ids, "mol_type": ids + const.chain_type_ids["PROTEIN"],
        "res_type": torch.nn.functional.one_hot(restype, const.num_tokens).float(),
        "disto_center": torch.randn(N, 3, generator=g), "token_bonds": bonds[..., None], "type_bonds":
        bonds.long(), "token_pad_mask": torch.ones(N), "token_resolved_mask": torch.ones(N),
        "token_disto_mask": torch.ones(N), "contact_conditioning": conditioning, "contact_threshold": torch.zeros(N, N),
        "method_feature": ids + const.method_types_ids["x-ray diffraction"], "modified": ids,
        "cyclic_period": torch.zeros(N), "affinity_token_mask": torch.zeros(N),
        "ref_pos": ref_pos, "atom_resolved_mask": pad.clone(), "ref_atom_name_chars": names,
        "ref_element": torch.nn.functional.one_hot(
            torch.where(pad.bool(), torch.nn.functional.pad(elements, (0, A - real)), 0), const.num_elements).float(),
        "ref_charge": torch.zeros(A), "ref_chirality": torch.zeros(A, dtype=torch.long),
        "atom_backbone_feat": backbone, "ref_space_uid": torch.nn.functional.pad(atom_token, (0, A - real)),
        "coords": ref_pos[None].clone(), "atom_pad_mask": pad, "atom_to_token": atom_to_token,
        "token_to_rep_atom": rep, "r_set_to_rep_atom": rep.clone(), "token_to_center_atom": rep.clone(),
        "frames_idx": (torch.arange(N)[:, None] * ATOMS_PER_TOKEN + torch.tensor([0, 1, 2])),
        "frame_resolved_mask": torch.ones(N, dtype=torch.bool),
        "msa": msa, "msa_paired": torch.zeros(S, N), "deletion_value": deletion, "has_deletion": has_deletion,
        "deletion_mean": deletion.mean(0), "profile": torch.nn.functional.one_hot(msa, const.num_tokens).float().mean(0),
        "msa_mask": torch.ones(S, N), "deletion_mean_affinity": deletion.mean(0),
        "profile_affinity": torch.nn.functional.one_hot(msa, const.num_tokens).float().mean(0),
        # no contact constraints: the featurizer's empty ones, which the diffusion's contact guidance reads
        "contact_pair_index": torch.empty(2, 0, dtype=torch.long), "contact_union_index": torch.empty(0, dtype=torch.long),
        "contact_negation_mask": torch.empty(0, dtype=torch.bool), "contact_thresholds": torch.empty(0),
    }
    return {k: v[None] for k, v in feats.items()}


class StageTimer:
    """CUDA events (or wall clock on a CPU) around a model's stage calls: each of `methods` (a method wrapped on its
    owner, by name) and `modules` (forward hooks); their ms by stage name, the rest of a prediction being the trunk.
    Boltz-2's: its diffusion (`structure_module.sample`, with its conditioning) and its confidence head. A context:
    the hooks and the wrappers go when it closes."""

    def __init__(self, model):
        self.marks: dict[str, list] = {}
        self.cuda = next(model.parameters()).is_cuda
        self.owners, self.undo = [], []
        for name, owner, attr in self.methods(model):
            def timed(*args, name=name, call=getattr(owner, attr), **kwargs):
                start = self.now()
                out = call(*args, **kwargs)
                self.marks.setdefault(name, []).append((start, self.now()))
                return out
            setattr(owner, attr, timed)
            self.owners.append((owner, attr))
        for name, module in self.modules(model):
            self.undo.append(module.register_forward_pre_hook(
                lambda mod, args, name=name: self.marks.setdefault(name + "<", []).append(self.now())))
            self.undo.append(module.register_forward_hook(
                lambda mod, args, out, name=name: self.marks.setdefault(name, []).append(
                    (self.marks[name + "<"].pop(), self.now()))))

    def methods(self, model) -> list[tuple[str, object, str]]:
        return [("diffusion", model.structure_module, "sample")]

    def modules(self, model) -> list[tuple[str, torch.nn.Module]]:
        return [("conditioning", model.diffusion_conditioning), ("confidence", model.confidence_module)]

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        for owner, attr in self.owners:
            delattr(owner, attr)  # (the instance attribute: the class's method again)
        for handle in self.undo:
            handle.remove()

    def now(self):
        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            return event
        return time.perf_counter()

    def ms(self, name: str) -> float:
        def span(a, b):
            return a.elapsed_time(b) if self.cuda else (b - a) * 1e3
        return sum(span(a, b) for a, b in self.marks.get(name, []))


def timed(timer_type, model, cuda: bool, precision: str, call) -> tuple[object, dict[str, float]]:
    """call()'s output and its ms by stage (trunk, diffusion with its conditioning, confidence, total: a `timer_type`
    around the model) and its peak memory in MiB (0 on a CPU), called without gradients under bf16 autocast (on a GPU
    where precision is "bf16", as the models' predict commands call them) or in float32."""
    autocast = torch.autocast("cuda", dtype=torch.bfloat16, enabled=cuda and precision == "bf16")
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    with timer_type(model) as timer, torch.no_grad(), autocast:
        start = timer.now()
        out = call()
        end = timer.now()
    if cuda:
        torch.cuda.synchronize()
    total = start.elapsed_time(end) if cuda else (end - start) * 1e3
    diffusion = timer.ms("diffusion") + timer.ms("conditioning")
    confidence = timer.ms("confidence")
    peak = (torch.cuda.max_memory_allocated() - base) / 2**20 if cuda else 0.0
    return out, {"trunk": total - diffusion - confidence, "diffusion": diffusion, "confidence": confidence,
                 "total": total, "peak_mib": peak}


def predict(model, feats, recycles: int, steps: int, precision: str) -> dict[str, float]:
    """One prediction's ms by stage (see StageTimer), its peak memory in MiB (0 on a CPU) and mean pLDDT."""
    out, got = timed(StageTimer, model, feats["res_type"].is_cuda, precision, lambda: model(
        dict(feats), recycling_steps=recycles, num_sampling_steps=steps, diffusion_samples=1,
        run_confidence_sequentially=True))
    if not torch.isfinite(out["sample_atom_coords"]).all():
        raise FloatingPointError("the predicted coordinates are not finite")
    return got | {"plddt": float(out["plddt"].float().mean())}


def prepared(path: str, tiny: bool, device: str):
    """A fresh model for a path: unpatched, its cuEquivariance kernels switched on, evofuse-patched, or
    evofuse-patched with the diffusion network's steps replayed from a CUDA graph ("evofuse-graphs")."""
    torch.manual_seed(0)
    model = build_model(tiny).to(device)
    if path == "cuequivariance":
        model.use_kernels = True
    elif path in ("evofuse", "evofuse-graphs"):
        from evofuse.integrations import boltz as integration

        integration.patch(model, diffusion_graphs=path == "evofuse-graphs")
    return model


def arguments(argv: list[str] | None, description: str, paths: str) -> argparse.Namespace:
    """The prediction scripts' command line (this one's and `predict_protenix.py`'s), `paths` the default paths."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--residues", default="256,512,1024,2048")
    parser.add_argument("--paths", default=paths)
    parser.add_argument("--msa-rows", type=int, default=1024)
    parser.add_argument("--recycles", type=int, default=3)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--precision", default="bf16", choices=("bf16", "fp32"))
    parser.add_argument("--tiny", action="store_true", help="1 block per stack: a check of the script, not a time")
    parser.add_argument("--out", default="benchmarks/results")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = arguments(argv, __doc__.split("\n\n")[0], "unpatched,cuequivariance,evofuse,evofuse-graphs")
    device = "cuda" if torch.cuda.is_available() else "cpu"

    def measure(path: str, N: int, feats: dict) -> dict:
        model = prepared(path, args.tiny, device)
        predict(model, feats, 0, 2, args.precision)  # (compiles, autotunes; Boltz's schedule needs 2 steps)
        return predict(model, feats, args.recycles, args.steps, args.precision)

    return write_rows("boltz2", "predict.csv", args, device,
                      lambda N: {k: v.to(device) for k, v in protein_features(N, args.msa_rows).items()}, measure)


def write_rows(model_name: str, filename: str, args, device: str, features, measure) -> int:
    """For each N of args.residues and each path of args.paths, measure(path, N, features(N)) (a prediction's ms by
    stage, peak MiB and mean pLDDT), a row of <args.out>/<gpu>/<filename> written as it comes and a line on stdout;
    a path that fails (out of memory, its kernels not installed) keeps its reason as its row."""
    name = torch.cuda.get_device_name().replace(" ", "-") if device == "cuda" else "cpu"
    folder = Path(args.out) / name
    folder.mkdir(parents=True, exist_ok=True)
    fields = ["path", "residues", "msa_rows", *(f"{s}_ms" for s in STAGES), "peak_mib", "plddt", "status"]
    with open(folder / filename, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        for N in (int(n) for n in args.residues.split(",")):
            feats = features(N)
            for path in args.paths.split(","):
                row = {"path": path, "residues": N, "msa_rows": args.msa_rows}
                try:
                    got = measure(path, N, feats)
                    row.update({f"{s}_ms": round(got[s], 1) for s in STAGES}, peak_mib=round(got["peak_mib"], 1),
                               plddt=round(got["plddt"], 4), status="ok")
                    shown = " ".join(f"{s} {got[s]:9.1f}" for s in STAGES) + f" ms  {got['peak_mib']:9.1f} MiB"
                except Exception as exc:  # out of memory, or the model's own kernels not installed: kept as a row
                    row["status"] = f"{type(exc).__name__}: {str(exc)[:80]}"
                    shown = row["status"]
                if device == "cuda":
                    torch.cuda.empty_cache()
                writer.writerow(row)
                f.flush()
                print(f"  {model_name} N {N:<5d} {path:15s} {shown}", flush=True)
    print(f"written to {folder / filename}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
