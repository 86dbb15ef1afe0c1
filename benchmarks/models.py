"""evofuse inside the models, on a CUDA machine: each installed family's MSA block and pair-stack block at the model's
default sizes, and the modules evofuse replaces in it, unpatched against patched (those it leaves: unpatched alone),
forward and training step, float32 and bfloat16 autocast (the models' mixed precision), in one run. Where a model has
kernels of its own (cuEquivariance's triangle kernels in Boltz-2, Protenix and OpenFold3), its unpatched block is timed
with them too.

    python benchmarks/models.py [--families boltz,boltz-pairformer,...] [--msa-rows 1024] [--residues 384]
        [--precisions fp32,bf16]
    python benchmarks/models.py --families boltz-pairformer-stack --residues 1024 --precisions bf16  # (and 2048)
    python benchmarks/models.py --families boltz-pairformer-stack --layers 1 --modes fwd --residues 2048,4096,6000 \
        --precisions bf16  # inference per layer at length, the model's own chunking in its eval path
    python benchmarks/models.py --never-slower  # each patched module's speedup; exit status 1 if one that ran the
        # fused kernels is below 1 (below its crossover a patched module runs the model's own: printed, not judged)
    python benchmarks/models.py --families boltz-pairformer,protenix-pairformer --precisions bf16 --graphs
        # each block's paths replayed from one CUDA graph a call too: the GPU's time without the host's

Median ms of `triton.testing.do_bench` and peak MiB beyond the inputs; a table on stdout and
<out>/<gpu>/models.csv. The model packages go in without their dependency stacks:
`pip install -e '.[models]' && pip install --no-deps boltz==2.2.1 protenix==2.0.0 openfold3==0.5.0`.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import csv
import importlib
import inspect
import os
import sys
from pathlib import Path

import torch

from evofuse._timing import graphed_step, measure
from evofuse.integrations._crossover import RunsOriginal


def _boltz(S, N):
    from boltz.model.modules.trunkv2 import MSALayer

    block = MSALayer(msa_s=64, token_z=128, msa_dropout=0.0, z_dropout=0.0, pairwise_head_width=32,
                     pairwise_num_heads=8)
    m, z = torch.randn(1, S, N, 64), torch.randn(1, N, N, 128)
    msa_mask, token_mask = (torch.rand(1, S, N) > 0.1).float(), torch.ones(1, N, N)

    def run(b, m, z, msa_mask, token_mask):
        z_out, m_out = b(z, m, token_mask, msa_mask, chunk_heads_pwa=False, chunk_size_outer_product=None)
        return z_out, m_out

    modules = {"pair_weighted_averaging": lambda b, m, z, msa_mask, token_mask: b(m, z, token_mask),
               "outer_product_mean": lambda b, m, z, msa_mask, token_mask: b(m, msa_mask),
               "msa_transition": lambda b, m, z, msa_mask, token_mask: b(m)}
    return block, (m, z, msa_mask, token_mask), run, modules, {}


def _tri_modules():
    """The pair stack's two triangle attentions, its outgoing triangle multiplication and its pair transition as a
    block calls them, z and its mask the block's inputs 1 and 2 (the ending node as the models' ending-node modules
    take it: their own transposition inside)."""
    def call(b, s, z, mask, *_):
        return b(z, mask=mask)

    return {"tri_att_start": call, "tri_att_end": call, "tri_mul_out": call}


def _pair_transition(path):
    """A Pairformer's pair transition, `path`, as its block calls it (z alone)."""
    return {path: lambda b, s, z, *_: b(z)}


def _boltz_pairformer(S, N):
    """Boltz-2's PairformerLayer (token_s 384, token_z 128, 4 pair heads x 32, v2); its cuEquivariance path is
    `use_kernels=True` (triangle multiplication and attention); patched, evofuse's modules ignore the switches."""
    from boltz.model.layers.pairformer import PairformerLayer

    block = PairformerLayer(384, 128, num_heads=16, dropout=0.0, pairwise_head_width=32, pairwise_num_heads=4, v2=True)
    s, z, mask = torch.randn(1, N, 384), torch.randn(1, N, N, 128), torch.ones(1, N)
    inputs = (s, z, mask[:, :, None] * mask[:, None, :], mask)

    def run(b, s, z, pair_mask, mask, **kernels):
        return b(s, z, mask, pair_mask, **kernels)

    modules = _tri_modules() | _pair_transition("transition_z") | {
        "attention": lambda b, s, z, pair_mask, mask: b(s=s, z=z, mask=mask, k_in=s),  # (AF3 Algorithm 24)
        "transition_s": lambda b, s, *_: b(s)}
    variants = {"unpatched cuEquivariance": ("unpatched", lambda b, *x: run(b, *x, use_kernels=True))}
    return block, inputs, run, modules, variants


def _boltz_pairformer_stack(S, N, layers=4, checkpointing=False):
    """`layers` of Boltz-2's PairformerLayers (its PairformerModule; `checkpointing`: the model's activation
    checkpointing of each layer in training, as its training configuration sets it; in eval mode its triangle
    attention chunked as the model's inference chunks it) at N residues: the whole stack's step time and peak memory,
    unpatched, with its cuEquivariance path and patched."""
    from boltz.model.layers.pairformer import PairformerModule

    block = PairformerModule(384, 128, num_blocks=layers, num_heads=16, dropout=0.0, pairwise_head_width=32,
                             pairwise_num_heads=4, v2=True, activation_checkpointing=checkpointing)
    s, z, mask = torch.randn(1, N, 384), torch.randn(1, N, N, 128), torch.ones(1, N)
    inputs = (s, z, mask[:, :, None] * mask[:, None, :], mask)

    def run(b, s, z, pair_mask, mask, **kernels):
        return b(s, z, mask, pair_mask, **kernels)

    variants = {"unpatched cuEquivariance": ("unpatched", lambda b, *x: run(b, *x, use_kernels=True))}
    return block, inputs, run, {}, variants


def _protenix_pairformer(S, N):
    """Protenix's PairformerBlock (c_s 384, c_z 128, 4 pair heads x 32); its cuEquivariance path is
    `triangle_attention=triangle_multiplicative="cuequivariance"`."""
    os.environ.setdefault("LAYERNORM_TYPE", "torch")
    from protenix.model.modules.pairformer import PairformerBlock

    block = PairformerBlock(n_heads=16, c_z=128, c_s=384, c_hidden_mul=128, c_hidden_pair_att=32, no_heads_pair=4,
                            dropout=0.0)
    inputs = (torch.randn(N, 384), torch.randn(N, N, 128), torch.ones(N, N))

    def run(b, s, z, pair_mask, kernels="torch"):
        return b(s, z, pair_mask, triangle_multiplicative=kernels, triangle_attention=kernels)

    modules = _tri_modules() | _pair_transition("pair_transition") | {
        "attention_pair_bias": lambda b, s, z, *_: b(a=s, s=None, z=z), "single_transition": lambda b, s, *_: b(s)}
    variants = {"unpatched cuEquivariance": ("unpatched", lambda b, *x: run(b, *x, kernels="cuequivariance"))}
    return block, inputs, run, modules, variants


def _protenix_pairformer_stack(S, N, layers=4, checkpointing=False):
    """`layers` of Protenix's PairformerBlocks (its PairformerStack; `checkpointing`: one block a checkpoint) at N
    residues, called as its model calls it: in inference (no gradients) with `inplace_safe` and chunk_size 128 (the
    model picks its chunk by N from its inference settings), in training with neither."""
    os.environ.setdefault("LAYERNORM_TYPE", "torch")
    from protenix.model.modules.pairformer import PairformerStack

    block = PairformerStack(n_blocks=layers, n_heads=16, c_z=128, c_s=384, dropout=0.0,
                            blocks_per_ckpt=1 if checkpointing else None)
    inputs = (torch.randn(N, 384), torch.randn(N, N, 128), torch.ones(N, N))

    def run(b, s, z, pair_mask, kernels="torch"):
        inference = not torch.is_grad_enabled()
        return b(s, z, pair_mask, triangle_multiplicative=kernels, triangle_attention=kernels, inplace_safe=inference,
                 chunk_size=128 if inference else None)

    variants = {"unpatched cuEquivariance": ("unpatched", lambda b, *x: run(b, *x, kernels="cuequivariance"))}
    return block, inputs, run, {}, variants


def _openfold3_pairformer_stack(S, N, layers=4, checkpointing=False):
    """`layers` of OpenFold3's PairFormerBlocks (its PairFormerStack at the model's widths: c_s 384, c_z 128, 16
    single heads x 24, 4 pair heads x 32, SwiGLU transitions; `checkpointing`: one block a checkpoint) at N residues,
    called as its model calls it: in inference (no gradients) with `inplace_safe` and its own Triton triangle kernels
    (its eval settings), in training with neither; its cuEquivariance path is `use_cueq_triangle_kernels=True`."""
    from openfold3.core.model.latent.pairformer import PairFormerStack

    block = PairFormerStack(c_s=384, c_z=128, c_hidden_pair_bias=24, no_heads_pair_bias=16, c_hidden_mul=128,
                            c_hidden_pair_att=32, no_heads_pair=4, no_blocks=layers, transition_type="swiglu",
                            transition_n=4, pair_dropout=0.0, fuse_projection_weights=False,
                            blocks_per_ckpt=1 if checkpointing else None, inf=1e9, use_reentrant=False)
    s, z, mask = torch.randn(1, N, 384), torch.randn(1, N, N, 128), torch.ones(1, N)
    inputs = (s, z, mask[:, :, None] * mask[:, None, :], mask)

    def run(b, s, z, pair_mask, mask, cueq=False):
        inference = not torch.is_grad_enabled()
        return b(s, z, mask, pair_mask, inplace_safe=inference, use_cueq_triangle_kernels=cueq,
                 use_triton_triangle_kernels=inference and not cueq)

    variants = {"unpatched cuEquivariance": ("unpatched", lambda b, *x: run(b, *x, cueq=True))}
    return block, inputs, run, {}, variants


def _openfold3_evoformer(S, N):
    """OpenFold3's AF2-style EvoformerBlock (S 512, c_m 256, c_z 128, 8 MSA heads x 32, 4 pair heads x 32, column
    attention); its cuEquivariance path is `use_cueq_triangle_kernels=True`."""
    from openfold3.core.model.latent.evoformer import EvoformerBlock

    block = EvoformerBlock(c_m=256, c_z=128, c_hidden_msa_att=32, c_hidden_opm=32, c_hidden_mul=128,
                           c_hidden_pair_att=32, no_heads_msa=8, no_heads_pair=4, transition_type="relu",
                           transition_n=4, msa_dropout=0.0, pair_dropout=0.0, no_column_attention=False,
                           opm_first=False, fuse_projection_weights=False, inf=1e9, eps=1e-8)
    S = min(S, 512)
    m, z = torch.randn(1, S, N, 256), torch.randn(1, N, N, 128)
    inputs = (m, z, (torch.rand(1, S, N) > 0.1).float(), torch.ones(1, N, N))

    def run(b, m, z, msa_mask, pair_mask, **kernels):
        return b(m, z, msa_mask, pair_mask, chunk_size=None, use_lma=False, inplace_safe=False, **kernels)

    modules = {"msa_att_row": lambda b, m, z, msa_mask, pair_mask: b(m, z=z, mask=msa_mask),
               "msa_att_col": lambda b, m, z, msa_mask, pair_mask: b(m, mask=msa_mask),
               "outer_product_mean": lambda b, m, z, msa_mask, pair_mask: b(m, mask=msa_mask),
               "pair_stack.tri_att_start": lambda b, m, z, msa_mask, pair_mask: b(z, mask=pair_mask),
               "pair_stack.tri_mul_out": lambda b, m, z, msa_mask, pair_mask: b(z, mask=pair_mask),
               "msa_transition": lambda b, m, z, msa_mask, pair_mask: b(m, mask=msa_mask),
               "pair_stack.pair_transition": lambda b, m, z, msa_mask, pair_mask: b(z, mask=pair_mask)}
    variants = {"unpatched cuEquivariance": ("unpatched",
                                             lambda b, *x: run(b, *x, use_cueq_triangle_kernels=True))}
    return block, inputs, run, modules, variants


def _protenix(S, N):
    os.environ.setdefault("LAYERNORM_TYPE", "torch")
    from protenix.model.modules.pairformer import MSABlock

    block = MSABlock(c_m=64, c_z=128, c_hidden=32, msa_dropout=0.0, pair_dropout=0.0, msa_chunk_size=S,
                     msa_max_size=S)
    m, z, pair_mask = torch.randn(S, N, 64), torch.randn(N, N, 128), torch.ones(N, N)
    modules = {"msa_stack.msa_pair_weighted_averaging": lambda b, m, z, mask: b(m, z),
               "outer_product_mean_msa": lambda b, m, z, mask: b(m), "msa_stack.transition_m": lambda b, m, z, mask: b(m)}
    return block, (m, z, pair_mask), lambda b, m, z, mask: b(m.clone(), z, mask), modules, {}


def _openfold3(S, N):
    from openfold3.core.model.latent.msa_module import MSAModuleBlock

    block = MSAModuleBlock(c_m=64, c_z=128, c_hidden_msa_att=8, c_hidden_opm=32, c_hidden_mul=128,
                           c_hidden_pair_att=32, no_heads_msa=8, no_heads_pair=4, transition_type="swiglu",
                           transition_n=4, msa_dropout=0.0, pair_dropout=0.0, opm_first=True,
                           fuse_projection_weights=False, inf=1e9, eps=1e-8)
    m, z = torch.randn(1, S, N, 64), torch.randn(1, N, N, 128)
    msa_mask, pair_mask = (torch.rand(1, S, N) > 0.1).float(), torch.ones(1, N, N)
    modules = {"msa_att_row": lambda b, m, z, msa_mask, pair_mask: b(m, z=z, mask=pair_mask),
               "outer_product_mean": lambda b, m, z, msa_mask, pair_mask: b(m, mask=msa_mask)}
    return block, (m, z, msa_mask, pair_mask), lambda b, *x: b(*x), modules, {}


def _openfold(S, N):
    """OpenFold (AlphaFold 2) is not on the package index in a usable form: its modules come from the small
    `openfold` package of the tests, which follows OpenFold's public module code; AF2's Evoformer sizes, the MSA half
    of a block (row and column attention, the MSA transition, the Outer Product Mean)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "openfold_modules"))
    from openfold.model.evoformer import MSATransition
    from openfold.model.msa import MSAColumnAttention, MSARowAttentionWithPairBias
    from openfold.model.outer_product_mean import OuterProductMean

    class EvoformerMSAPart(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.msa_att_row = MSARowAttentionWithPairBias(256, 128, c_hidden=32, no_heads=8)
            self.msa_att_col = MSAColumnAttention(256, c_hidden=32, no_heads=8)
            self.msa_transition = MSATransition(256, 4)
            self.outer_product_mean = OuterProductMean(256, 128, c_hidden=32)

        def forward(self, m, z, msa_mask):
            m = m + self.msa_att_row(m, z=z, mask=msa_mask)
            m = m + self.msa_att_col(m, mask=msa_mask)
            m = m + self.msa_transition(m, mask=msa_mask)
            return m, z + self.outer_product_mean(m, mask=msa_mask)

    m, z = torch.randn(1, S, N, 256), torch.randn(1, N, N, 128)
    msa_mask = (torch.rand(1, S, N) > 0.1).float()
    modules = {"msa_att_row": lambda b, m, z, msa_mask: b(m, z=z, mask=msa_mask),
               "msa_att_col": lambda b, m, z, msa_mask: b(m, mask=msa_mask),
               "msa_transition": lambda b, m, z, msa_mask: b(m, mask=msa_mask),
               "outer_product_mean": lambda b, m, z, msa_mask: b(m, mask=msa_mask)}
    return EvoformerMSAPart(), (m, z, msa_mask), lambda b, *x: b(*x), modules, {}


# name -> (the integration that patches it, the block's builder)
FAMILIES = {"boltz": ("boltz", _boltz), "protenix": ("protenix", _protenix), "openfold3": ("openfold3", _openfold3),
            "openfold": ("openfold", _openfold), "boltz-pairformer": ("boltz", _boltz_pairformer),
            "protenix-pairformer": ("protenix", _protenix_pairformer),
            "boltz-pairformer-stack": ("boltz", _boltz_pairformer_stack),
            "protenix-pairformer-stack": ("protenix", _protenix_pairformer_stack),
            "openfold3-pairformer-stack": ("openfold3", _openfold3_pairformer_stack),
            "openfold3-evoformer": ("openfold3", _openfold3_evoformer)}


def _scalar(out) -> torch.Tensor:
    """One number from a module's output(s), for the training step's backward."""
    outs = out if isinstance(out, tuple) else (out,)
    return sum(o.float().sum() for o in outs if o is not None)


FIELDS = ["family", "residues", "what", "precision", "mode", "impl", "ms", "peak_mib", "status", "runs"]


def _runs(fn) -> str:
    """"original" where a call of a patched module's `fn` hands it to the model's module (its crossover), else "fused"."""
    handed, original = [], RunsOriginal.original
    RunsOriginal.original = lambda self, *args, **kwargs: handed.append(self) or original(self, *args, **kwargs)
    try:
        fn()
    finally:
        RunsOriginal.original = original
    return "original" if handed else "fused"


def bench_family(name: str, S: int, N: int, precisions: list[str], modes=("fwd", "fwd+bwd"), modules_only=False,
                 sink=None, graphs=False, **options) -> list[dict]:
    """`options`: the stack families' `layers` and `checkpointing` (the others take none). `modules_only`: the
    patched modules alone, no block; `sink(row)` takes each row as it is measured (a time limit keeps those done);
    `graphs`: each block's paths also replayed from a CUDA graph ("<path> CUDA graph", no peak)."""
    package, builder = FAMILIES[name]
    integration = importlib.import_module(f"evofuse.integrations.{package}")
    torch.manual_seed(0)
    taken = inspect.signature(builder).parameters
    block, inputs, run, modules, variants = builder(S, N, **{k: v for k, v in options.items() if k in taken})
    block = block.cuda()
    patched = copy.deepcopy(block)
    replaced = integration.patch(patched)
    inputs = [t.cuda() for t in inputs]
    floats = inputs[:2]  # m and z
    rows = []
    print(f"  {name}: patched {', '.join(replaced)}", flush=True)
    block_impls = [("unpatched", block, run), ("evofuse", patched, run)] + [
        (label, block if which == "unpatched" else patched, call) for label, (which, call) in variants.items()]
    block_impls += [(f"{impl} CUDA graph", mod, call) for impl, mod, call in block_impls] if graphs else []
    targets = [] if modules_only else [("block", block_impls)]
    targets += [  # (a module evofuse does not replace: its share of the block, unpatched)
        (path, [("unpatched", block.get_submodule(path), call)]
         + ([("evofuse", patched.get_submodule(path), call)] if path in replaced else []))
        for path, call in modules.items() if path in replaced or not modules_only]
    for what, impls in targets:
        for precision in precisions:
            for train in [mode == "fwd+bwd" for mode in modes]:
                for impl, mod, call in impls:
                    mod.train(train)  # forward rows as inference runs them (the models' eval paths)
                    for t in floats:
                        t.requires_grad_(train)
                    grad_mode = contextlib.nullcontext() if train else torch.no_grad()
                    graph = impl.endswith("CUDA graph")
                    # (a graph's casts made in it: autocast's cache is freed when its region ends)
                    autocast = torch.autocast("cuda", dtype=torch.bfloat16, enabled=precision != "fp32",
                                              cache_enabled=not graph)

                    def fn(mod=mod, call=call, autocast=autocast, grad_mode=grad_mode):
                        with autocast, grad_mode:
                            return _scalar(call(mod, *inputs))
                    try:
                        ms, peak = measure(graphed_step(fn, train), False, []) if graph else measure(fn, train, floats)
                        peak = None if graph else peak
                        status = "ok"
                    except Exception as exc:  # out of memory, or a model's own kernels not installed: kept as a row
                        ms, peak, status = None, None, f"{type(exc).__name__}: {str(exc)[:60]}"
                    runs = _runs(fn) if impl == "evofuse" and what != "block" and ms is not None else ""
                    row = dict(family=name, residues=N, what=what, precision=precision, mode="fwd+bwd" if train else "fwd",
                               impl=impl, ms=ms, peak_mib=peak, status=status, runs=runs)
                    rows.append(row)
                    if sink is not None:
                        sink(row)
                    shown = status if ms is None else f"{ms:8.3f} ms" + ("" if peak is None else f" {peak:9.1f} MiB")
                    print(f"  {name:10s} N {N:<5d} {what:28s} {precision:14s} {row['mode']:8s} {impl:28s} {shown}",
                          flush=True)
                    torch.cuda.empty_cache()
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--families", default=",".join(FAMILIES))
    parser.add_argument("--msa-rows", type=int, default=1024)
    parser.add_argument("--residues", default="384", help="N, or several: 2048,4096")
    parser.add_argument("--layers", type=int, default=4, help="the stack families' layers")
    parser.add_argument("--checkpointing", action="store_true",
                        help="the stack families' activation checkpointing in training, as the models train")
    parser.add_argument("--modes", default="fwd,fwd+bwd", help="fwd (inference), fwd+bwd (training step) or both")
    parser.add_argument("--precisions", default="fp32,bf16", help="fp32, bf16 (autocast) or both")
    parser.add_argument("--out", default="benchmarks/results")
    parser.add_argument("--graphs", action="store_true", help="each block's paths replayed from a CUDA graph too")
    parser.add_argument("--never-slower", action="store_true",
                        help="the patched modules alone: each one's speedup; fail if one that ran fused is below 1")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("benchmarks/models.py needs a CUDA GPU", file=sys.stderr)
        return 2
    rows = []
    folder = Path(args.out) / torch.cuda.get_device_name().replace(" ", "-")
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "models.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=FIELDS)
        writer.writeheader()

        def sink(row):
            writer.writerow(row)
            f.flush()
        for name in args.families.split(","):
            try:
                precisions = [{"fp32": "fp32", "bf16": "bf16 autocast"}[p] for p in args.precisions.split(",")]
                for N in (int(n) for n in args.residues.split(",")):
                    rows += bench_family(name, args.msa_rows, N, precisions, args.modes.split(","),
                                         modules_only=args.never_slower, sink=sink, graphs=args.graphs,
                                         layers=args.layers, checkpointing=args.checkpointing)
            except ImportError as exc:
                print(f"  {name}: not installed ({exc})")
    print(f"written to {folder / 'models.csv'}")
    if args.never_slower:
        import tables  # (benchmarks/tables.py, beside this script)

        rows = [{k: "" if v is None else str(v) for k, v in row.items()} for row in rows]
        print(tables.modules(rows))
        slower = [r for r in tables.module_ratios(rows) if r[-2] < 1]
        for family, N, what, precision, mode, before, after, ratio, runs in slower:
            print(f"slower ({runs}): {family} N {N} {what} {precision} {mode}: {after:.3f} ms patched, {before:.3f}")
        return 1 if any(r[-1] == "fused" for r in slower) else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
