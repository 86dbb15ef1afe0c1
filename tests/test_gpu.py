"""What needs a real GPU: every kernel config, the suite's shapes against float64, memory, CUDA graphs and
torch.compile; skipped elsewhere. The sweeps over every config and the suite's shapes are in the full tier
(EVOFUSE_FULL_TESTS=1, as benchmarks/gpu_run.sh runs them): each compiles its own kernels."""

import os
import subprocess
import sys

import pytest
import torch
import triton

from evofuse import MSARowAttentionWithPairBias, OuterProductMean
from evofuse.numerics import FP32_FAST_BOUND, bound, rel_error
from evofuse.operations import reference_fits
from evofuse.ops.outer_product_mean import configs as opm_configs
from evofuse.ops.pair_weighted_averaging import configs as pwa_configs
from evofuse.stages import layer_norm_glu, layer_norm_linear
from evofuse.stages import matmul as matmul_module
from evofuse.stages.attention import configs as att_configs
from evofuse.suite import find_case, make_inputs, make_module, suite_cases

from .contract import check_gradients
from .helpers import att_module, compare, grads, opm_module, random_mask, rebuild_kernels

pytestmark = pytest.mark.gpu
DTYPES = [torch.float32, torch.bfloat16]


@pytest.fixture
def one_config(monkeypatch):
    """Makes each kernel take the given config alone (the cached autotuned kernels rebuilt around it)."""
    def use(opm=None, forward=None, backward=None, linear=None, dx=None, pwa=None, project=None, gated=None, dw=None,
            trans=None, matmul=None):
        if opm is not None:
            terms, config = opm
            monkeypatch.setattr(opm_configs, "CONFIGS", {terms: [config]})
            monkeypatch.setattr(opm_configs, "ALL_CONFIGS", [config])
        for module, name, config in ((att_configs, "FORWARD_CONFIGS", forward), (att_configs, "BACKWARD_CONFIGS", backward),
                                     (layer_norm_linear, "CONFIGS", linear),
                                     (layer_norm_linear, "FLOAT32_CONFIGS", linear), (opm_configs, "DX_CONFIGS", dx),
                                     (opm_configs, "DW_CONFIGS", dw),
                                     (opm_configs, "PROJECT_CONFIGS", project), (pwa_configs, "CONFIGS", pwa),
                                     (pwa_configs, "PROJECTION_CONFIGS", gated), (layer_norm_glu, "CONFIGS", trans),
                                     (layer_norm_glu, "FLOAT32_CONFIGS", trans), (matmul_module, "CONFIGS", matmul)):
            if config is not None:
                monkeypatch.setattr(module, name, [config])
        rebuild_kernels()
    yield use
    rebuild_kernels()


def _opm_check(dtype, c=32, N=97, S=37, normalization="count_i"):
    mod = opm_module(48, 24, c, seed=1, normalization=normalization)
    x = torch.randn(2, S, N, 48)
    mask = random_mask(2, S, N, "rows", 2)
    _, exact = grads(mod.double(), (x.double(), mask.double()), "torch")
    out, got = grads(mod.cuda().to(dtype), (x.cuda().to(dtype), mask.cuda()), "triton")
    lowp = None
    if dtype != torch.float32:
        _, lowp = grads(mod.cuda().to(dtype), (x.cuda().to(dtype), mask.cuda()), "torch")
    compare({k: v.cpu() for k, v in got.items()}, exact, dtype,
            None if lowp is None else {k: v.cpu() for k, v in lowp.items()})


@pytest.mark.full  # a sweep: compiles a kernel for each config (or autotunes at the suite's shapes)
@pytest.mark.parametrize("terms, index", [(terms, index) for terms in (3, 1)
                                          for index in range(len(opm_configs.CONFIGS[terms]))])
@pytest.mark.parametrize("c", [16, 32, 64])
def test_every_opm_config(terms, index, c, one_config):
    """The float32 route's fused contraction: 3 products a contraction at the default precision (outputs and
    gradients against float64), 1 at "fast" (the output, rel <= FP32_FAST_BOUND)."""
    cfg = opm_configs.CONFIGS[terms][index]
    if not opm_configs.fits(cfg, c, terms):
        pytest.skip("the predicate drops this config here")
    one_config(opm=(terms, cfg))
    if terms == 3:
        _opm_check(torch.float32, c)
        return
    mod = opm_module(48, 24, c, seed=1, precision="fast")
    x, mask = torch.randn(2, 37, 97, 48), random_mask(2, 37, 97, "rows", 2)
    exact = mod.double()(x.double(), mask.double(), impl="torch")
    out = mod.cuda()(x.cuda(), mask.cuda(), impl="triton")
    assert rel_error(out.cpu(), exact) <= FP32_FAST_BOUND


@pytest.mark.full  # a sweep: compiles a kernel for each config (or autotunes at the suite's shapes)
@pytest.mark.parametrize("index", range(len(opm_configs.PROJECT_CONFIGS)))
@pytest.mark.parametrize("c", [16, 32, 64])
def test_every_opm_project_config(index, c, one_config):
    """The 16-bit route's product with out_proj's weight, each config alone: outputs and gradients (bf16)."""
    one_config(project=opm_configs.PROJECT_CONFIGS[index])
    _opm_check(torch.bfloat16, c)


@pytest.mark.full  # a sweep: compiles a kernel for each config (or autotunes at the suite's shapes)
@pytest.mark.parametrize("index", range(len(opm_configs.DX_CONFIGS)))
@pytest.mark.parametrize("dtype", DTYPES)
def test_every_opm_backward_config(index, dtype, one_config):
    one_config(dx=opm_configs.DX_CONFIGS[index])
    _opm_check(dtype, 16)


@pytest.mark.full  # a sweep: compiles a kernel for each config (or autotunes at the suite's shapes)
@pytest.mark.parametrize("index", range(len(att_configs.FORWARD_CONFIGS)))
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("d", [8, 32, 64])
def test_every_attention_config(index, dtype, d, one_config):
    forward = att_configs.FORWARD_CONFIGS[index]
    if not att_configs.fits(forward, max(16, d), 97, dtype.itemsize):
        pytest.skip("the predicate drops this config here")
    one_config(forward=att_configs.FORWARD_CONFIGS[index],
               backward=att_configs.BACKWARD_CONFIGS[index % len(att_configs.BACKWARD_CONFIGS)])
    h = 2
    mod = att_module(h * d, 12, h, seed=3)
    x, z = torch.randn(2, 5, 97, h * d), torch.randn(2, 97, 97, 12)
    mask = random_mask(2, 5, 97, "rows", 4)
    check_gradients(mod, (x, z, mask), dtype, "cuda")


@pytest.mark.full  # a sweep: compiles a kernel for each config (or autotunes at the suite's shapes)
@pytest.mark.parametrize("index", range(len(pwa_configs.CONFIGS)))
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("c", [8, 32])
def test_every_pair_weighted_averaging_config(index, dtype, c, one_config):
    from evofuse import PairWeightedAveraging

    from .helpers import randomize

    cfg = pwa_configs.CONFIGS[index]
    if not pwa_configs.fits(cfg, max(16, c), dtype.itemsize):
        pytest.skip("the predicate drops this config here")
    one_config(pwa=cfg)
    mod = randomize(PairWeightedAveraging(32, 16, c, 3), 7)
    m, z = torch.randn(2, 37, 97, 32), torch.randn(2, 97, 97, 16)
    mask = (torch.rand(2, 97, 97) > 0.2).float()
    mask[:, 48] = 0
    check_gradients(mod, (m, z, mask), dtype, "cuda")


@pytest.mark.full  # a sweep: compiles a kernel for each config
@pytest.mark.parametrize("index", range(len(pwa_configs.PROJECTION_CONFIGS)))
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("c_m, c, h", [(64, 32, 8), (64, 8, 8), (96, 8, 8)], ids=["boltz", "af3", "c_m-96"])
def test_every_gated_projection_backward_config(index, dtype, c_m, c, h, one_config):
    """The gated projection's backward with each of its configs alone at Boltz's widths (c_m 64, 8 heads of 32) and
    AF3's (8 of 8), and 96 output channels padded to 128 (a short last block of MSA rows, columns across heads):
    every gradient against float64. Each config that fits a width runs there."""
    from evofuse import PairWeightedAveraging

    from .helpers import randomize

    cfg = pwa_configs.PROJECTION_CONFIGS[index]
    if not pwa_configs.projection_fits(cfg, h * c, max(16, triton.next_power_of_2(c_m)), dtype.itemsize):
        pytest.skip("the predicate drops this config here")
    one_config(gated=cfg)
    mod = randomize(PairWeightedAveraging(c_m, 16, c, h), 8)
    m, z = torch.randn(1, 37, 33, c_m), torch.randn(1, 33, 33, 16)
    mask = (torch.rand(1, 33, 33) > 0.2).float()
    check_gradients(mod, (m, z, mask), dtype, "cuda")


@pytest.mark.full  # a sweep: compiles a kernel for each config
@pytest.mark.parametrize("index", range(len(opm_configs.DW_CONFIGS)))
@pytest.mark.parametrize("dtype", DTYPES)
def test_every_opm_weight_gradient_config(index, dtype, one_config, monkeypatch):
    """The backward's out_proj weight gradient kernel with each of its configs alone (c 32, the models')."""
    monkeypatch.setenv("EVOFUSE_AUTOTUNE", "1")  # (the candidates that fit, not only the first)
    cfg = opm_configs.DW_CONFIGS[index]
    if cfg not in opm_configs.dw_candidates(32, dtype.itemsize):
        pytest.skip("the predicate drops this config here")
    one_config(dw=cfg)
    _opm_check(dtype, 32, N=33, S=9)


@pytest.mark.full  # a sweep: compiles a kernel for each config (or autotunes at the suite's shapes)
@pytest.mark.parametrize("dtype, index", [(torch.bfloat16, i) for i in range(len(layer_norm_linear.CONFIGS))]
                         + [(torch.float32, i) for i in range(len(layer_norm_linear.FLOAT32_CONFIGS))])
def test_every_layer_norm_linear_config(dtype, index, one_config):
    terms = 0 if dtype == torch.bfloat16 else 3
    cfg = (layer_norm_linear.CONFIGS if terms == 0 else layer_norm_linear.FLOAT32_CONFIGS)[index]
    if not layer_norm_linear._keep(cfg, 64, 64, terms, True):
        pytest.skip("the predicate drops this config here")
    one_config(linear=cfg)
    _opm_check(dtype, 32, N=33, S=9)


@pytest.mark.full  # a sweep: compiles a kernel for each config
@pytest.mark.parametrize("index", range(len(matmul_module.CONFIGS)))
def test_every_matmul_config(index, one_config):
    """The float32 paths' products with each config alone: a batched product at awkward sizes against float64
    (within 1e-6 of its largest value: three TF32 products keep ~1e-7), then the Outer Product Mean's float32
    gradients (its backward's three batched products)."""
    cfg = matmul_module.CONFIGS[index]
    if not matmul_module.fits(cfg, 97, 200, 333):
        pytest.skip("the predicate drops this config here")
    one_config(matmul=cfg)
    a, b = torch.randn(3, 97, 333, device="cuda"), torch.randn(3, 333, 200, device="cuda").mT.contiguous().mT
    exact = a.double() @ b.double()
    assert (matmul_module.matmul(a, b).double() - exact).abs().max() <= 1e-6 * exact.abs().max()
    _opm_check(torch.float32, 16, N=33, S=9)


@pytest.mark.full  # a sweep: compiles a kernel for each config
@pytest.mark.parametrize("dtype, index", [(torch.bfloat16, i) for i in range(len(layer_norm_glu.CONFIGS))]
                         + [(torch.float32, i) for i in range(len(layer_norm_glu.FLOAT32_CONFIGS))])
@pytest.mark.parametrize("activation", ["swiglu", "relu"])
def test_every_transition_config(dtype, index, activation, one_config):
    """The transition's kernels (`layer_norm_glu` and its backward) with each of their configs alone: 97 x 37 rows of
    160 channels (past a 128-wide chunk), hidden 200 (past one block of 128): the output and every gradient against
    float64. (Triangle multiplication's gate takes `layer_norm_glu` too: its tests run at the default tile.)"""
    from evofuse import Transition

    from .helpers import randomize

    cfg = (layer_norm_glu.CONFIGS if dtype == torch.bfloat16 else layer_norm_glu.FLOAT32_CONFIGS)[index]
    if not layer_norm_glu.fits(cfg, 97 * 37, 160, 200, 2 if activation == "swiglu" else 1, dtype.itemsize):
        pytest.skip("the predicate drops this config here")
    one_config(trans=cfg)
    mod = randomize(Transition(160, 200, activation=activation, bias=activation == "relu"), 9)
    x, mask = torch.randn(1, 37, 97, 160), random_mask(1, 37, 97, "rows", 10)
    check_gradients(mod, (x, mask), dtype, "cuda")


@pytest.mark.full  # a sweep: compiles a kernel for each config
@pytest.mark.parametrize("dtype, index", [(torch.bfloat16, i) for i in range(len(layer_norm_glu.ROW_CONFIGS))]
                         + [(torch.float32, i) for i in range(len(layer_norm_glu.FLOAT32_ROW_CONFIGS))])
def test_every_whole_row_tile(dtype, index, monkeypatch):
    """`layer_norm_glu`'s whole-row tiles alone: a SwiGLU transition of 97 x 37 rows of 100 channels (one chunk of
    128, or of 256), hidden 300 (past every tile's steps), the output and every gradient against float64."""
    from evofuse import Transition

    from .helpers import randomize

    tile = (layer_norm_glu.ROW_CONFIGS if dtype == torch.bfloat16 else layer_norm_glu.FLOAT32_ROW_CONFIGS)[index]
    D = 100 if tile.kwargs["BLOCK_D"] >= 128 else 60
    monkeypatch.setattr(layer_norm_glu, "_prune", lambda configs, named_args, **kwargs: [tile])
    rebuild_kernels()
    try:
        mod = randomize(Transition(D, 300), 9)
        x, mask = torch.randn(1, 37, 97, D), random_mask(1, 37, 97, "rows", 10)
        check_gradients(mod, (x, mask), dtype, "cuda")
    finally:
        rebuild_kernels()


@pytest.mark.full  # a sweep: compiles a kernel for each config
@pytest.mark.parametrize("dtype, index", [(torch.bfloat16, i) for i in range(len(layer_norm_glu.ROW_CONFIGS))]
                         + [(torch.float32, i) for i in range(len(layer_norm_glu.FLOAT32_ROW_CONFIGS))])
def test_every_whole_row_output_tile(dtype, index, monkeypatch):
    """Triangle multiplication's output kernel at each whole-row tile alone (forward, and with GRAD in the backward):
    c_z 100, c 72 (one chunk of 128), or c_z 60, c 40 (of 64), N 37, the output and every gradient against float64."""
    from evofuse import TriangleMultiplication
    from evofuse.ops.triangle_multiplication import configs as trimul_configs

    from .helpers import randomize

    tile = (layer_norm_glu.ROW_CONFIGS if dtype == torch.bfloat16 else layer_norm_glu.FLOAT32_ROW_CONFIGS)[index]
    cz, c = (100, 72) if tile.kwargs["BLOCK_D"] >= 128 else (60, 40)
    monkeypatch.setattr(trimul_configs, "prune_output", lambda configs, named_args, **kwargs: [tile])
    rebuild_kernels()
    try:
        mod = randomize(TriangleMultiplication(cz, c, bias=True), 9)
        z, mask = torch.randn(1, 37, 37, cz), random_mask(1, 37, 37, "rows", 10)
        check_gradients(mod, (z, mask), dtype, "cuda")
    finally:
        rebuild_kernels()


@pytest.mark.full  # a sweep: compiles a kernel for each config (or autotunes at the suite's shapes)
@pytest.mark.parametrize("case", [c for c in suite_cases() if not c.name.endswith("-seed") and reference_fits(c)],
                         ids=lambda c: c.name)
@pytest.mark.parametrize("dtype", DTYPES)
def test_suite_shapes_forward(case, dtype, monkeypatch):
    monkeypatch.setenv("EVOFUSE_AUTOTUNE", "1")
    mod = make_module(case, seed=0)
    inputs = make_inputs(case, "cuda", torch.float64, seed=1)
    with torch.no_grad():
        exact = mod.cuda().double()(*inputs, impl="torch").float()
        low = tuple(t.to(dtype) if t.dim() == 4 else t for t in inputs)
        out = mod.to(dtype)(*low, impl="triton")
        lowp = None if dtype == torch.float32 else rel_error(mod(*low, impl="torch"), exact)
    del mod
    assert rel_error(out, exact) <= bound(dtype, "default", lowp)


def test_memory_bounds():
    """Peak memory beyond the inputs (forward): opm-long float32 <= 704 MiB, att-long bfloat16 <= 400 MiB, and
    pwa-long bfloat16 within 5% of what it must hold: the projections v, g (2 x S N h c) and the weighted
    sums u (S N h c) in bf16, with the weights (h N N, bf16: no float32 copy without a backward) while the sums are
    taken, then the output (S N c_m) - no float32 (S, N, h, c) tensor (512 MiB there) and no (h, S, N, N) one
    (its size at this case)."""
    pwa = find_case("pwa-long")
    unit = pwa.B * pwa.S * pwa.N * pwa.width * pwa.head * 2
    last = max(pwa.B * pwa.S * pwa.N * pwa.D, pwa.B * pwa.width * pwa.N ** 2) * 2
    pwa_limit = 1.05 * (3 * unit + last) / 2**20
    for name, dtype, limit in (("opm-long", torch.float32, 704), ("att-long", torch.bfloat16, 400),
                               ("pwa-long", torch.bfloat16, pwa_limit)):
        case = find_case(name)
        mod = make_module(case).cuda().to(dtype)
        inputs = make_inputs(case, "cuda", dtype)
        with torch.no_grad():
            mod(*inputs)
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            base = torch.cuda.memory_allocated()
            mod(*inputs)
            peak = (torch.cuda.max_memory_allocated() - base) / 2**20
        assert peak <= limit, f"{name}: {peak:.0f} MiB"


class Block(torch.nn.Module):
    """An Evoformer-like block holding both modules."""

    def __init__(self):
        super().__init__()
        self.att = MSARowAttentionWithPairBias(32, 16, 4)
        self.opm = OuterProductMean(32, 16, 8, normalization="count_ij_after")

    def forward(self, m, z, mask):
        return z + self.opm(m + self.att(m, z, mask), mask)


def _block_inputs(dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    m, z = torch.randn(2, 6, 19, 32, generator=g), torch.randn(2, 19, 19, 16, generator=g)
    mask = random_mask(2, 6, 19, "rows", seed + 1)
    return m.cuda().to(dtype).requires_grad_(), z.cuda().to(dtype).requires_grad_(), mask.cuda()


@pytest.mark.no_poison
@pytest.mark.parametrize("mode", ["fullgraph", "reduce-overhead"])
def test_compile_training_matches_eager(mode):
    block = Block().cuda()
    compiled = torch.compile(block, fullgraph=True) if mode == "fullgraph" else torch.compile(block, mode=mode)
    outs = []
    for fn in (block, compiled, compiled, compiled):
        m, z, mask = _block_inputs(torch.float32)
        block.zero_grad()
        torch.compiler.cudagraph_mark_step_begin()
        zo = fn(m, z, mask)
        zo.square().sum().backward()
        outs.append((zo.detach().clone(), m.grad.clone(), z.grad.clone(), [p.grad.clone() for p in block.parameters()]))
    for got in outs[1:]:
        for a, b in zip(got[:3], outs[0][:3]):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
        for a, b in zip(got[3], outs[0][3]):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


@pytest.mark.no_poison
@pytest.mark.parametrize("dtype", DTYPES)
def test_cuda_graph_forward(dtype):
    block = Block().cuda().to(dtype)
    static = _block_inputs(dtype, seed=0)
    with torch.no_grad():
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):  # warm-up (autotuning, compilation) outside the capture
            block(*static)
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            zo = block(*static)
        first = zo.clone()
        new = _block_inputs(dtype, seed=1)
        for s, t in zip(static, new):
            s.copy_(t)
        graph.replay()
        ref = block(*new)
    torch.testing.assert_close(zo, ref)
    assert not torch.equal(zo, first)  # the replay read the new inputs


def test_kernel_profile_script():
    """benchmarks/kernel_profile.py (the kernel sums and host times that docs/PERFORMANCE.md quotes) runs."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p))
    run = subprocess.run([sys.executable, os.path.join(root, "benchmarks", "kernel_profile.py"), "--case",
                          "pwa-seed,att-seed", "--train"], capture_output=True, text=True, env=env, timeout=900)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    assert run.stdout.count("ms a call at its operation's seed shape") == 2, run.stdout
