"""evofuse inside Boltz (boltz 2.2.1, installed without its dependencies: `pip install --no-deps boltz==2.2.1`
with scipy and einops): Boltz's own MSA layer, patched, against the unpatched one."""

import importlib.util

import pytest
import torch

from .conftest import DEVICE
from .helpers import (
    assert_autocast_like_original,
    assert_left_unpatched,
    assert_patched_block_matches,
    assert_small_calls_run_the_original,
    randomize,
    rel_error,
)

pytestmark = [pytest.mark.usefixtures("fused_kernels"), pytest.mark.skipif(
    importlib.util.find_spec("boltz") is None or importlib.util.find_spec("einops") is None,
    reason="boltz 2.2.1 (pip install --no-deps boltz==2.2.1 scipy einops==0.8.0) is not installed")]


def _layer():
    from boltz.model.modules.trunkv2 import MSALayer

    torch.manual_seed(0)
    return randomize(MSALayer(msa_s=16, token_z=16, msa_dropout=0.0, z_dropout=0.0, pairwise_head_width=8,
                              pairwise_num_heads=2), 1).to(DEVICE)


def _inputs():
    g = torch.Generator().manual_seed(2)
    z, m = torch.randn(1, 7, 7, 16, generator=g), torch.randn(1, 3, 7, 16, generator=g)
    token_mask = (torch.rand(1, 7, 7, generator=g) > 0.2).float()
    token_mask[:, 6] = 0  # a padding token: Boltz's float32 logit - 1e6 rounds its logits to 1/16
    msa_mask = (torch.rand(1, 3, 7, generator=g) > 0.2).float()
    return [t.to(DEVICE) for t in (z, m, token_mask, msa_mask)]


def _call(layer, z, m, token_mask, msa_mask):
    return layer(z, m, token_mask, msa_mask, chunk_heads_pwa=False, chunk_size_outer_product=None)


def test_patched_msa_layer_matches_boltz():
    from evofuse.integrations import boltz as integration

    assert_patched_block_matches(integration, _layer(), _inputs(), [
        "msa_transition", "outer_product_mean", "pair_weighted_averaging", "pairformer_layer.transition_z",
        "pairformer_layer.tri_att_end", "pairformer_layer.tri_att_start", "pairformer_layer.tri_mul_in",
        "pairformer_layer.tri_mul_out"],
        _call)


def test_unsupported_module_is_left_with_a_warning():
    from boltz.model.layers.outer_product_mean import OuterProductMean

    from evofuse.integrations import boltz as integration

    assert_left_unpatched(integration, OuterProductMean(8, 5, 4), "0 (OuterProductMean) left unpatched: c_hidden 5")


def test_patched_modules_under_autocast():
    """Under autocast the patched modules compute in the autocast dtype, as Boltz's linear layers do (the whole
    layer's other parts take no CPU float16 autocast, so the two modules are compared alone)."""
    from evofuse.integrations import boltz as integration

    z, m, token_mask, msa_mask = _inputs()
    assert_autocast_like_original(integration, _layer(), {"pair_weighted_averaging": (m, z, token_mask),
                                                          "outer_product_mean": (m, msa_mask), "msa_transition": (m,)},
                                  DEVICE)


def _pairformer_layer():
    """Boltz-2's PairformerLayer, its inputs (a padding token masked) and its call with Boltz's chunk and kernel
    switches. (Boltz 2.2.1's Boltz-1 form, v2=False, fails in Boltz's own attention.)"""
    from boltz.model.layers.pairformer import PairformerLayer

    torch.manual_seed(0)
    layer = randomize(PairformerLayer(16, 16, num_heads=2, dropout=0.0, pairwise_head_width=8, pairwise_num_heads=2,
                                      v2=True), 3).to(DEVICE)
    g = torch.Generator().manual_seed(4)
    s, z = torch.randn(1, 7, 16, generator=g), torch.randn(1, 7, 7, 16, generator=g)
    mask = torch.ones(1, 7)
    mask[:, -1] = 0
    pair_mask = mask[:, :, None] * mask[:, None, :]
    return (layer, [t.to(DEVICE) for t in (s, z, mask, pair_mask)],
            lambda block, *x: block(*x, chunk_size_tri_attn=4, use_kernels=False))


def test_patched_pairformer_layer_matches_boltz():
    """Boltz-2's PairformerLayer with its two triangle attentions, two triangle multiplications, two transitions and
    its single track's attention with pair bias patched: a training step as the original's."""
    from evofuse.integrations import boltz as integration

    layer, inputs, call = _pairformer_layer()
    assert_patched_block_matches(integration, layer, inputs,
                                 ["attention", "transition_s", "transition_z", "tri_att_end", "tri_att_start",
                                  "tri_mul_in", "tri_mul_out"], call)


def test_small_pairformer_layer_runs_boltz_modules():
    """Below the crossovers the patched PairformerLayer's modules are Boltz's own, with and without gradients."""
    from evofuse.integrations import boltz as integration

    assert_small_calls_run_the_original(integration, *_pairformer_layer())


@pytest.mark.parametrize("windowed", [False, True])
def test_patched_diffusion_transformer_layer_matches_boltz(windowed):
    """Boltz-2's DiffusionTransformerLayer: its attention takes the bias projected once (B, N, N, h) for two samples
    a structure (multiplicity 2), after the adaptive LayerNorm and before the output gate: a training step as the
    original's. With keys in windows (the atom transformer's `to_keys`: k_in not s) the original's forward runs."""
    from boltz.model.modules.transformersv2 import DiffusionTransformerLayer

    from evofuse.integrations import boltz as integration

    torch.manual_seed(0)
    layer = randomize(DiffusionTransformerLayer(heads=2, dim=16, dim_single_cond=8), 5).to(DEVICE)
    g = torch.Generator().manual_seed(6)
    a, s = torch.randn(4, 7, 16, generator=g), torch.randn(4, 7, 8, generator=g)
    bias, mask = torch.randn(2, 7, 7, 2, generator=g), torch.ones(4, 7)
    mask[:, -1] = 0
    to_keys = (lambda x: x.flip(1)) if windowed else None  # (keys in another order: not the queries' tensor)
    assert_patched_block_matches(integration, layer, [t.to(DEVICE) for t in (a, s, bias, mask)], ["pair_bias_attn"],
                                 lambda block, *x: block(*x, to_keys=to_keys, multiplicity=2))


def test_patched_pairformer_inference_updates_one_copy_of_the_pair():
    """Boltz-2's PairformerModule (two layers), patched, in inference (eval, no gradients): the layers add their pair
    updates into one copy of z, with the original's outputs and the caller's z left as it was; a deep copy's layers
    run on the copy's modules; `unpatch` gives the layers their own forward back."""
    import copy

    from boltz.model.layers.pairformer import PairformerModule

    from evofuse.integrations import boltz as integration

    torch.manual_seed(0)
    stack = randomize(PairformerModule(16, 16, num_blocks=2, num_heads=2, dropout=0.25, pairwise_head_width=8,
                                       pairwise_num_heads=2, v2=True), 3).to(DEVICE).eval()
    g = torch.Generator().manual_seed(4)
    s, z = torch.randn(1, 7, 16, generator=g).to(DEVICE), torch.randn(1, 7, 7, 16, generator=g).to(DEVICE)
    mask = torch.ones(1, 7, device=DEVICE)
    mask[:, -1] = 0
    pair_mask = mask[:, :, None] * mask[:, None, :]
    patched = copy.deepcopy(stack)
    integration.patch(patched)
    z_before = z.clone()
    with torch.no_grad():
        expected = stack(s, z, mask, pair_mask)
        got = copy.deepcopy(patched)(s, z, mask, pair_mask)
    assert torch.equal(z, z_before)
    for a, b in zip(got, expected):
        assert rel_error(a, b) <= 1e-5
    assert all(layer.forward.__self__ is layer for layer in copy.deepcopy(patched).layers)
    integration.unpatch(patched)
    assert all("forward" not in vars(layer) for layer in patched.layers)


def test_transition_of_few_rows_runs_the_original(monkeypatch):
    """A patched transition called with fewer rows than its crossover runs Boltz's own module (its
    output to the bit, no fused call), also in a deep copy of the patched model, whose original shares the copy's
    weights; with as many rows, the fused one."""
    import copy
    import functools

    from boltz.model.layers.transition import Transition

    from evofuse.integrations import _adapters, _crossover
    from evofuse.integrations import boltz as integration

    torch.manual_seed(0)
    holder = torch.nn.Sequential(randomize(Transition(16, 32), 3)).to(DEVICE)
    original = copy.deepcopy(holder)
    assert integration.patch(holder) == ["0"]
    calls = []
    fused = _adapters.transition

    @functools.wraps(fused)  # (its `form` too)
    def counted(*args, **kwargs):
        calls.append(1)
        return fused(*args, **kwargs)
    monkeypatch.setattr(_adapters, "transition", counted)
    monkeypatch.setitem(_crossover.CROSSOVERS, "transition", (8, 8))
    few, enough = torch.randn(1, 7, 16, device=DEVICE), torch.randn(1, 8, 16, device=DEVICE)
    with torch.no_grad():
        assert torch.equal(holder(few), original(few)) and not calls
        twin = copy.deepcopy(holder)
        twin[0].fc3.weight.mul_(2)
        original[0].fc3.weight.mul_(2)
        assert torch.equal(twin(few), original(few)) and not calls
        holder(enough)
    assert calls == [1]


def test_never_slower_mode_names_what_a_patched_module_ran(monkeypatch):
    """`benchmarks/models.py --never-slower` judges a patched module only where it ran the fused kernels: its probe
    says "original" for a call below the crossover, "fused" for one at it."""
    from pathlib import Path

    from boltz.model.layers.transition import Transition

    from evofuse.integrations import _crossover
    from evofuse.integrations import boltz as integration

    scripts = Path(__file__).resolve().parents[1] / "benchmarks"
    monkeypatch.syspath_prepend(str(scripts))  # (its `families`, beside it)
    spec = importlib.util.spec_from_file_location("models", scripts / "models.py")
    models = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(models)
    holder = torch.nn.Sequential(randomize(Transition(16, 32), 3)).to(DEVICE)
    integration.patch(holder)
    monkeypatch.setitem(_crossover.CROSSOVERS, "transition", (8, 8))
    with torch.no_grad():
        assert models._runs(lambda: holder(torch.randn(1, 7, 16, device=DEVICE))) == "original"
        assert models._runs(lambda: holder(torch.randn(1, 8, 16, device=DEVICE))) == "fused"


@pytest.mark.gpu
def test_a_captured_call_below_the_crossover_runs_fused(monkeypatch):
    """Below its crossover a patched triangle multiplication hands an eager call to Boltz's module, and runs fused
    when the call is captured into a CUDA graph (no host time is paid per replay there): the replay gives the fused
    call's output."""
    from boltz.model.layers.triangular_mult import TriangleMultiplicationOutgoing

    from evofuse._runtime import cuda_graph
    from evofuse.integrations import _crossover
    from evofuse.integrations import boltz as integration

    torch.manual_seed(0)
    holder = torch.nn.Sequential(randomize(TriangleMultiplicationOutgoing(16), 3)).cuda()
    integration.patch(holder)
    z, mask = torch.randn(1, 24, 24, 16, device="cuda"), torch.ones(1, 24, 24, device="cuda")
    handed, original = [], _crossover.RunsOriginal.original
    monkeypatch.setattr(_crossover.RunsOriginal, "original",
                        lambda self, *args, **kwargs: handed.append(1) or original(self, *args, **kwargs))
    with torch.no_grad():
        fused = holder[0](z, mask)  # (the crossovers at 0: compiled and tuned here, outside the capture)
        assert not handed
        monkeypatch.setitem(_crossover.CROSSOVERS, "triangle_multiplication", (1 << 40, 1 << 40))
        eager = holder[0](z, mask)
        assert handed == [1]
        graph, replayed = cuda_graph(lambda: holder[0](z, mask))
        assert handed == [1, 1]  # (the warm-up on a side stream is eager; the capture is not)
        graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(replayed, fused) and not torch.equal(eager, fused)
