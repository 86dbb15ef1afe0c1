"""The GPU tier's training checks: every operation's gradients at the models' own widths with autotuning on, and every
operation under torch.compile(fullgraph=True) and CUDA-graph replay through a training loop (weights updated in
place, new inputs each step). The cases past 2**31 elements: tests/test_gpu_big.py."""


import pytest
import torch

from evofuse import (
    AttentionPairBias,
    MSAColumnAttention,
    MSARowAttentionWithPairBias,
    OuterProductMean,
    PairWeightedAveraging,
    Transition,
    TriangleAttention,
    TriangleMultiplication,
)

from .contract import check_gradients, mask_form
from .helpers import grads, random_mask, randomize, rebuild_kernels

pytestmark = pytest.mark.gpu
DTYPES = [torch.float32, torch.bfloat16]


@pytest.fixture
def autotuned(monkeypatch):
    """Every kernel autotuned over its fitting configs (the kernels rebuilt so that none keeps an untuned choice)."""
    monkeypatch.setenv("EVOFUSE_AUTOTUNE", "1")
    rebuild_kernels()
    yield
    rebuild_kernels()


# The models' own widths (S and N cut to 33 and 97: past one block of every kernel, not a multiple of any)
MODEL_CASES = {
    "opm-af2": lambda: OuterProductMean(256, 128, 32, normalization="count_ij_after"),  # AF2 / OpenFold
    "opm-boltz": lambda: OuterProductMean(64, 128, 32, normalization="count_ij", projection_bias=False),
    "opm-of3": lambda: OuterProductMean(64, 128, 32, normalization="count_ij_after", count_eps=1e-8,
                                        projection_bias=False),  # OpenFold3 / AF3 / Protenix
    "att-af2": lambda: MSARowAttentionWithPairBias(256, 128, 8, head_dim=32, qkv_bias=False, pair_layer_norm=True,
                                                   mask_mode="add"),  # OpenFold, OpenFold3's AF2-style block
    "pwa-boltz": lambda: PairWeightedAveraging(64, 128, 32, 8),
    "pwa-af3": lambda: PairWeightedAveraging(64, 128, 8, 8, inf=1e9, mask_mode="add"),  # AF3, Protenix, OpenFold3
    "tri-af2": lambda: TriangleAttention(128, 32, 4),  # OpenFold
    "tri-boltz": lambda: TriangleAttention(128, 32, 4, starting=False, gate_and_output_bias=False),  # Boltz, AF3
    "trimul-af2": lambda: TriangleMultiplication(128, 128, bias=True),  # OpenFold
    "trimul-boltz": lambda: TriangleMultiplication(128, outgoing=False),  # Boltz-2, AF3
    # Protenix's MSA block's pair stack: a narrow pair, a wide product and wide heads
    "trimul-protenix-msa": lambda: TriangleMultiplication(16, 128, bias=True),
    "tri-protenix-msa": lambda: TriangleAttention(16, 32, 4),
    # the template pair stacks: Boltz-2's (64 channels, heads of 32) and AF2's (heads of 16, transition x2)
    "trimul-template": lambda: TriangleMultiplication(64),
    "tri-template-boltz": lambda: TriangleAttention(64, 32, 4, starting=False, gate_and_output_bias=False),
    "tri-template-af2": lambda: TriangleAttention(64, 16, 4),
    "trans-template-boltz": lambda: Transition(64, 256),
    "trans-template-af2": lambda: Transition(64, 128, activation="relu", bias=True),
    "col-af2": lambda: MSAColumnAttention(256, 32, 8),  # OpenFold
    "col-of3": lambda: MSAColumnAttention(256, 32, 8, gate_and_output_bias=False),  # OpenFold3's AF2-style block
    "trans-af2": lambda: Transition(256, 1024, activation="relu", bias=True),  # OpenFold's MSA transition
    "trans-boltz": lambda: Transition(128, 512),  # Boltz, AF3, Protenix, OpenFold3: the pair transition
    "trans-af3-single": lambda: Transition(384, 1536),  # AF3's single transition (rows past one 256-channel chunk)
    "apb-boltz": lambda: AttentionPairBias(384, 128, 16),  # Boltz-2's Pairformer single track (16 heads x 24)
    "apb-diffusion": lambda: AttentionPairBias(768, None, 16, compute_pair_bias=False),  # its token transformer
}


def _model_inputs(name, S=33, N=97, seed=1):
    mod = MODEL_CASES[name]()
    if name.startswith("apb"):  # the single representation (1, N, c_s), the pair or the bias, a padding token
        g = torch.Generator().manual_seed(seed)
        mask = torch.rand(1, N, generator=g) > 0.1
        mask[:, -1] = False
        channels = 128 if mod.compute_pair_bias else mod.num_heads
        return randomize(mod, seed), (torch.randn(1, N, mod.c_s, generator=g),
                                      torch.randn(1, N, N, channels, generator=g), mask)
    norm = (mod.norm_m if name.startswith("pwa") else mod.norm_in if name.startswith("trimul")
            else mod.norm if name.startswith("trans")
            else mod._msa_att.layer_norm_m if name.startswith("col") else mod.layer_norm)
    D = norm.normalized_shape[0]
    g = torch.Generator().manual_seed(seed)
    if name.startswith("tri") and not name.startswith("trans"):
        # the pair (1, N, N, 128) and its mask, a padding residue's pairs all masked
        mask = torch.rand(1, N, N, generator=g) > 0.1
        mask[:, -1] = mask[:, :, -1] = False
        return randomize(mod, seed), (torch.randn(1, N, N, D, generator=g), mask)
    x = torch.randn(1, S, N, D, generator=g)
    if name.startswith(("opm", "col", "trans")):
        return randomize(mod, seed), (x, random_mask(1, S, N, "rows", seed))
    z = torch.randn(1, N, N, 128, generator=g)
    mask = random_mask(1, S, N, "rows", seed) if name.startswith("att") else (torch.rand(1, N, N, generator=g) > 0.1)
    return randomize(mod, seed), (x, z, mask)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", list(MODEL_CASES))
def test_gradients_at_the_models_widths(name, dtype, autotuned):
    """Output and every gradient against float64 at each model's widths, autotuned, float32 and bf16."""
    mod, inputs = _model_inputs(name)
    check_gradients(mod, inputs, dtype, "cuda", differentiable=len(inputs) - 1)


# the model case each operation's training loop runs
LOOP_CASES = {"opm": "opm-boltz", "att": "att-af2", "pwa": "pwa-boltz", "tri": "tri-boltz", "trimul": "trimul-boltz",
              "col": "col-of3", "trans": "trans-boltz", "apb": "apb-boltz"}


def _small_case(op, seed):
    """A module and inputs of `op` small enough for many steps."""
    mod, inputs = _model_inputs(LOOP_CASES[op], S=6, N=19, seed=seed)
    return mod, tuple(mask_form(t, "bool") if k == len(inputs) - 1 else t for k, t in enumerate(inputs))


def _cuda_graphed(mod, sample):
    """The module's training step through torch.cuda.make_graphed_callables (forward and backward captured once; a
    wrapper's forward replaced, the module's own left as it is)."""
    graphed = torch.cuda.make_graphed_callables(
        _Called(mod, lambda *inputs: mod(*inputs, impl="triton")),
        tuple(t.detach().clone().requires_grad_(t.is_floating_point() and t.dim() == 4) for t in sample))
    return lambda *inputs: graphed(*inputs)


@pytest.mark.no_poison
@pytest.mark.parametrize("mode", ["fullgraph", "reduce-overhead", "cuda-graph"])
@pytest.mark.parametrize("op", list(LOOP_CASES))
def test_training_loop_under_compile_and_graphs(op, mode):
    """Three training steps of each operation under torch.compile(fullgraph=True), mode="reduce-overhead" and a
    captured CUDA graph, the weights updated in place and new inputs each step: outputs and every gradient as the
    eager module's at the same weights."""
    torch.compiler.reset()
    mod, first = _small_case(op, seed=1)
    mod = mod.cuda()
    on = tuple(t.cuda() for t in first)
    if mode == "cuda-graph":
        fn = _cuda_graphed(mod, on)
    else:
        compiled = torch.compile(mod, fullgraph=True) if mode == "fullgraph" else torch.compile(mod, mode=mode)
        fn = compiled
    for step in range(3):
        _, inputs = _small_case(op, seed=10 + step)
        inputs = tuple(t.cuda() for t in inputs)
        torch.compiler.cudagraph_mark_step_begin()
        out, got = grads(_Called(mod, fn), inputs, None)
        out = out.detach().clone()
        got = {k.removeprefix("mod."): v.clone() for k, v in got.items()}
        expected_out, expected = grads(mod, inputs, "triton")
        torch.testing.assert_close(out, expected_out, rtol=1e-5, atol=1e-5)
        assert got.keys() == expected.keys()
        for k in expected:
            torch.testing.assert_close(got[k], expected[k], rtol=1e-5, atol=1e-5, msg=f"step {step}: {k}")
        with torch.no_grad():  # an optimizer's step: every weight changed in place
            for p in mod.parameters():
                p.add_(0.05 * torch.randn_like(p))


class _Called(torch.nn.Module):
    """`fn` called as the module `mod` (its parameters, for `grads`), the impl argument dropped."""

    def __init__(self, mod, fn):
        super().__init__()
        self.mod, self.fn = mod, fn

    def forward(self, *inputs, impl=None):
        return self.fn(*inputs)
