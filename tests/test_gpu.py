"""On the GPU (H200): the suite shapes and awkward ones in every dtype, memory, and sizes past 2**31."""

import copy

import pytest
import torch
import triton

from evofuse.ops import outer_product_mean, outer_product_mean_wgmma
from evofuse.ops._common import cached_launch
from evofuse.suite import SUITE, make_inputs, make_module

from .helpers import assert_contract, att_module, compare, grads, opm_module, random_mask

pytestmark = pytest.mark.gpu
DTYPES = [torch.float32, torch.bfloat16, torch.float16]


def contract(mod, inputs, dtype):
    """The fused output of `mod` in `dtype` against the reference in float64, dtype and float32."""
    def cast(t, dt):
        return t.to(dt) if t is not None and t.is_floating_point() and t.dim() == 4 else t

    with torch.no_grad():
        out = mod.to(dtype)(*[cast(t, dtype) for t in inputs], impl="triton")
        ref = mod(*[cast(t, dtype) for t in inputs], impl="torch")
        exact = mod.double()(*[cast(t, torch.float64) for t in inputs], impl="torch")
        ref32 = mod.float()(*[cast(t, torch.float32) for t in inputs], impl="torch") if dtype == torch.float32 else None
    return assert_contract(out, exact, dtype, lowp_ref=None if dtype == torch.float32 else ref, ref_fp32=ref32)


@pytest.mark.parametrize("case", [c for c in SUITE], ids=lambda c: c.name)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_suite_shapes(case, dtype):
    mod = make_module(case, seed=1).cuda()
    contract(mod, make_inputs(case, "cuda", torch.float32, seed=2), dtype)


@pytest.mark.parametrize("case", [c for c in SUITE if c.name.endswith("seed")], ids=lambda c: c.name)
def test_autotuned_path(case, monkeypatch):
    """Autotuning runs each candidate on the call's own buffers first: the result must not change.
    (The tiled kernels: the seed shapes would otherwise take the single-launch ones.)"""
    from evofuse.ops import row_attention

    monkeypatch.setenv("EVOFUSE_AUTOTUNE", "1")
    monkeypatch.setattr(outer_product_mean, "SMALL_MAX_N", 0)
    monkeypatch.setattr(row_attention, "SMALL_MAX_N", 0)
    contract(make_module(case, seed=3).cuda(), make_inputs(case, "cuda", torch.float32, seed=4), torch.bfloat16)


@pytest.mark.parametrize("case", [c for c in SUITE if c.name.endswith("seed")], ids=lambda c: c.name)
@pytest.mark.parametrize("taped", [False, True], ids=["launches", "taped"])
def test_autotuned_training_relaunches_the_binary_it_tuned(case, taped, monkeypatch):
    """With autotuning, a key's first call tunes, its second launches the config picked through Triton, the
    later ones the binary from one lookup (`TunedLaunch`; "taped": the Outer Product Mean's from the tape that
    its second call recorded): the forward's and backward's tiled kernels give the same output and gradients,
    bit for bit, on all four calls, under the contract against float64."""
    from evofuse.ops import _tape, row_attention

    if not taped:
        monkeypatch.setattr(_tape.Tapes, "key", lambda self, options, tensors: None)
    monkeypatch.setenv("EVOFUSE_AUTOTUNE", "1")
    monkeypatch.setattr(outer_product_mean, "SMALL_MAX_N", 0)
    monkeypatch.setattr(row_attention, "SMALL_MAX_N", 0)
    mod = make_module(case, seed=5).cuda().bfloat16()
    inputs = [t.bfloat16() if t is not None and t.is_floating_point() else t
              for t in make_inputs(case, "cuda", torch.float32, seed=6)]
    calls = [grads(mod, inputs, "triton") for _ in range(4)]
    out, got = calls[0]
    for out_k, got_k in calls[1:]:
        torch.testing.assert_close(out_k, out, rtol=0, atol=0)
        for name, g in got.items():
            torch.testing.assert_close(got_k[name], g, rtol=0, atol=0, msg=name)
    exact_out, exact = grads(copy.deepcopy(mod).double(), [t.double() if t is not None and t.is_floating_point() else t
                                                           for t in inputs], "torch")
    lowp_out, lowp = grads(copy.deepcopy(mod), inputs, "torch")
    assert_contract(out, exact_out, torch.bfloat16, lowp_ref=lowp_out)
    compare(got, exact, torch.bfloat16, lowp)


@pytest.mark.parametrize("op, dtype", [("opm", torch.bfloat16), ("opm", torch.float16), ("opm", torch.float32),
                                       ("att", torch.float32), ("att", torch.bfloat16)], ids=str)
def test_every_candidate_config(op, dtype, monkeypatch):
    """Autotuning may pick any candidate: each one is checked at an awkward shape (float32 runs the Outer
    Product Mean kernel on split float16 operands)."""
    from evofuse.ops import row_attention

    module = outer_product_mean if op == "opm" else row_attention
    monkeypatch.setattr(module, "SMALL_MAX_N", 0)  # the tiled kernels, whose candidates these are
    if op == "opm":
        mod = opm_module(64, 128, 32, seed=9).cuda()
        inputs = (torch.randn(1, 33, 97, 64, device="cuda"), random_mask(1, 33, 97, "rows", 1).cuda())
    else:
        mod = att_module(256, 32, 8, seed=9).cuda()
        inputs = (torch.randn(1, 5, 97, 256, device="cuda"), torch.randn(1, 97, 97, 32, device="cuda"),
                  random_mask(1, 5, 97, "rows", 1).cuda())
    if op == "opm":  # hidden_dim 32 takes the multi-pass kernel: its candidates of the form, then the one-pass ones
        monkeypatch.setattr(module, "WGMMA", False)  # (Hopper's kernel has its own test of its configs)
        for cfg in module._multipass_prune(module._multipass_configs(), {}, SPLIT=dtype == torch.float32):
            with monkeypatch.context() as m:
                m.setattr(module, "_multipass_configs", lambda cfg=cfg: [cfg])
                contract(mod, inputs, dtype)
        monkeypatch.setattr(module, "MULTIPASS", False)
    for cfg in module._configs():
        monkeypatch.setattr(module, "_configs", lambda cfg=cfg: [cfg])
        if not module._prune([cfg], {}, C=32, N_BUCKET=128, BLOCK_D=32, SPLIT=dtype == torch.float32):
            continue
        try:
            contract(mod, inputs, dtype)
        except triton.runtime.errors.OutOfResources:  # the autotuner skips these too
            continue


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_every_backward_config(dtype, monkeypatch):
    """Each candidate tile of the three attention backward kernels gives the right gradients."""
    from evofuse.ops import row_attention

    mod = att_module(128, 12, 2, seed=4).cuda()
    inputs = [torch.randn(1, 3, 97, 128, device="cuda").to(dtype), torch.randn(1, 97, 97, 12, device="cuda").to(dtype),
              random_mask(1, 3, 97, "rows", 2).cuda()]
    _, exact = grads(copy.deepcopy(mod).to(dtype).double(), [t.double() if t.dim() == 4 else t for t in inputs], "torch")
    lowp = None if dtype == torch.float32 else grads(copy.deepcopy(mod).to(dtype), inputs, "torch")[1]
    for cfg in row_attention._bwd_configs():
        monkeypatch.setattr(row_attention, "_bwd_configs", lambda cfg=cfg: [cfg])
        try:
            _, got = grads(copy.deepcopy(mod).to(dtype), inputs, "triton")
        except triton.runtime.errors.OutOfResources:  # the autotuner skips these too
            continue
        compare(got, exact, dtype, lowp)


@pytest.mark.parametrize("case", [c for c in SUITE if c.name.endswith("seed")], ids=lambda c: c.name)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_single_launch_reuses_its_binary(case, dtype):
    """The single-launch kernels' second call of a key launches the cached binary (`CachedLaunch`),
    with the new call's tensors and strides (a transposed MSA view, another mask)."""
    from evofuse.ops import row_attention

    launcher = cached_launch(outer_product_mean._opm_small_kernel if case.op == "opm"
                             else row_attention._row_attention_small_kernel)
    launcher.binaries.clear()
    mod = make_module(case, seed=5).cuda()
    contract(mod, make_inputs(case, "cuda", torch.float32, seed=6), dtype)
    (key, (binary, constexprs)), = launcher.binaries.items()
    runs = []

    class Counted:
        function, packed_metadata = binary.function, binary.packed_metadata

        def run(self, *args):
            runs.append(args)
            binary.run(*args)

    launcher.binaries[key] = (Counted(), constexprs)
    msa, *rest = make_inputs(case, "cuda", torch.float32, seed=7, zero_frac=0.5)
    contract(mod, (msa.transpose(1, 2).contiguous().transpose(1, 2), *rest), dtype)
    assert len(runs) == 1 and list(launcher.binaries) == [key]


@pytest.mark.parametrize("case", [c for c in SUITE if c.name.endswith("seed")], ids=lambda c: c.name)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_single_launch_calls_are_replayed(case, dtype):
    """A second call of the same shapes replays the first one's launch (`Replays`: no argument checks,
    no path choice, no launch key) with its own tensors: new inputs and mask, the weights after a round
    trip through other dtypes (new storage), another module's weights; the outputs meet the contract."""
    from evofuse import functional

    mod = make_module(case, seed=5).cuda()
    contract(mod, make_inputs(case, "cuda", torch.float32, seed=6), dtype)
    (plan,) = functional._REPLAYS.plans.values()
    binary, runs = plan.binary, []

    class Counted:
        function, packed_metadata = binary.function, binary.packed_metadata

        def run(self, *args):
            runs.append(args)
            binary.run(*args)

    plan.binary = Counted()
    contract(mod, make_inputs(case, "cuda", torch.float32, seed=7, zero_frac=0.5), dtype)
    contract(make_module(case, seed=8).cuda(), make_inputs(case, "cuda", torch.float32, seed=9), dtype)
    assert len(runs) == 2 and list(functional._REPLAYS.plans.values()) == [plan]


@pytest.mark.parametrize("N, S", [(1, 1), (17, 3), (97, 33), (130, 7)])
@pytest.mark.parametrize("c", [8, 16, 32, 64])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("path", ["auto", "tiled", "multipass", "one-pass"])
def test_opm_awkward(N, S, c, dtype, path, monkeypatch):
    """"auto" lets small problems take the single-launch kernel; "tiled" forces the tiled kernels (Hopper's
    Gluon kernel for 16-bit operands at hidden_dim 32, the multi-pass kernel otherwise at hidden_dim 32 and
    64), "multipass" the multi-pass kernel where Hopper's would run, "one-pass" the tiled kernel in one pass.
    Output widths 19 to 128 cross out_proj's row blocks."""
    if path == "multipass" and (dtype == torch.float32 or c != 32):
        pytest.skip("the same kernels as tiled: Hopper's kernel takes 16-bit operands at hidden_dim 32 only")
    if path != "auto":
        monkeypatch.setattr(outer_product_mean, "SMALL_MAX_N", 0)
    monkeypatch.setattr(outer_product_mean, "MULTIPASS", path != "one-pass")
    monkeypatch.setattr(outer_product_mean, "WGMMA", path != "multipass")
    pair_dim = {8: 19, 16: 40, 32: 128, 64: 100}[c]
    for k, normalization in enumerate(["seed", "af2", "boltz"]):
        mod = opm_module(24, pair_dim, c, seed=N + c, normalization=normalization).cuda()
        x = torch.randn(2, S, N, 24, device="cuda")
        contract(mod, (x, random_mask(2, S, N, ["rows", "random", "ones"][k], N).cuda()), dtype)


def spy_wgmma(monkeypatch):
    """A list that gets an entry each time Hopper's Gluon kernel is launched."""
    ran = []
    kernel = outer_product_mean_wgmma.outer_products_wgmma
    monkeypatch.setattr(outer_product_mean_wgmma, "outer_products_wgmma", lambda *a, **k: (ran.append(1),
                                                                                         kernel(*a, **k))[1])
    return ran


def hopper_kernel_expected(dtype, c=32, R=128):
    return outer_product_mean_wgmma.supported(torch.empty(1, 1, 1, 1, dtype=dtype, device="cuda"), c, R)


@pytest.mark.parametrize("config", outer_product_mean_wgmma.CONFIGS, ids=str)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_opm_wgmma_every_config(config, dtype, monkeypatch):
    """Hopper's Gluon kernel at each of its configs: tiles past the residues' edges (N 1, 17, 97, 130), MSAs
    shorter than a pass's eight epilogue chunks (drained after the pass) and rows not a multiple of BLOCK_S,
    two batch elements (programs crossing from one to the other), output widths 19 to 128, the three
    normalizations with masks of every kind and none; and that the kernel ran."""
    if not hopper_kernel_expected(dtype):
        pytest.skip("Hopper (sm_90) only")
    monkeypatch.setattr(outer_product_mean, "SMALL_MAX_N", 0)
    monkeypatch.setattr(outer_product_mean_wgmma, "CONFIGS", (config,))
    ran = spy_wgmma(monkeypatch)
    shapes = [(1, 1, 19), (17, 3, 128), (97, 33, 128), (130, 200, 19), (24, 520, 128), (40, 70, 64)]
    for k, (N, S, pair_dim) in enumerate(shapes):
        normalization, kind = ["seed", "af2", "boltz"][k % 3], ["rows", "random", "ones", "empty", "rows", "none"][k]
        mod = opm_module(24, pair_dim, 32, seed=N + S, normalization=normalization).cuda()
        x = torch.randn(2, S, N, 24, device="cuda")
        mask = random_mask(2, S, N, kind, N)
        contract(mod, (x, None if mask is None else mask.cuda()), dtype)
    assert len(ran) == len(shapes)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_opm_wgmma_launch_through_binary(dtype, monkeypatch):
    """After a key's first launch through Triton, the Gluon kernel is launched straight into its binary (light
    descriptors): on new inputs of the same key it writes the output Triton's own launch writes, bit for bit; a
    key that differs (another N, another normalization) takes Triton's launch first."""
    if not hopper_kernel_expected(dtype):
        pytest.skip("Hopper (sm_90) only")

    class Hits(dict):
        hits = 0

        def get(self, key, default=None):
            found = super().get(key, default)
            Hits.hits += found is not None
            return found

    monkeypatch.setattr(outer_product_mean, "SMALL_MAX_N", 0)
    monkeypatch.setattr(outer_product_mean_wgmma, "_BINARIES", Hits())
    ran = spy_wgmma(monkeypatch)
    for k, (N, S, normalization) in enumerate([(97, 33, "af2"), (97, 33, "seed"), (130, 70, "af2")]):
        mod = opm_module(24, 128, 32, seed=N, normalization=normalization).cuda().to(dtype)
        mask = random_mask(2, S, N, "random", N).cuda()
        first = torch.randn(2, S, N, 24, device="cuda", dtype=dtype)
        x = torch.randn(2, S, N, 24, device="cuda", dtype=dtype)
        with torch.no_grad():
            before = Hits.hits
            mod(first, mask, impl="triton")  # a new key: Triton's launch
            assert Hits.hits == before
            direct = mod(x, mask, impl="triton")  # the same key on other tensors: the binary
            assert Hits.hits == before + 1
            outer_product_mean_wgmma._BINARIES.clear()
            own = mod(x, mask, impl="triton")  # Triton's launch again
        assert torch.equal(direct, own), (N, S, normalization)
    assert len(ran) == 9


@pytest.mark.parametrize("N, S", [(1, 1), (17, 3), (97, 5), (200, 2)])
@pytest.mark.parametrize("h, d", [(1, 8), (4, 16), (2, 32), (8, 64), (2, 128), (3, 24)])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("tiled", [False, True], ids=["auto", "tiled"])
def test_attention_awkward(N, S, h, d, dtype, tiled, monkeypatch):
    """"auto" lets small problems take the single-launch kernel; "tiled" forces the tiled path."""
    from evofuse.ops import row_attention

    if tiled:
        monkeypatch.setattr(row_attention, "SMALL_MAX_N", 0)
    mod = att_module(h * d, 12, h, seed=N + d).cuda()
    x, z = torch.randn(2, S, N, h * d, device="cuda"), torch.randn(2, N, N, 12, device="cuda")
    contract(mod, (x, z, random_mask(2, S, N, "rows", N).cuda()), dtype)


def gradient_contract(mod, inputs, dtype):
    """The output and every gradient of `mod` in `dtype` on `inputs` against float64 autograd of the
    reference (and, for 16-bit dtypes, against the reference run in that dtype)."""
    out, got = grads(copy.deepcopy(mod).to(dtype), inputs, "triton")
    lowp_out, lowp = grads(copy.deepcopy(mod).to(dtype), inputs, "torch") if dtype != torch.float32 else (None, None)
    exact_out, exact = grads(copy.deepcopy(mod).to(dtype).double(),
                             [t.double() if t.dim() == 4 else t for t in inputs], "torch")
    assert_contract(out, exact_out, dtype, lowp_ref=lowp_out)
    compare(got, exact, dtype, lowp)


@pytest.mark.parametrize("name", ["opm-seed", "opm-af2-main", "att-seed", "att-af2-main"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_suite_gradients(name, dtype):
    """Every input and parameter gradient at the suite shapes against float64 autograd of the reference."""
    case = next(c for c in SUITE if c.name == name)
    mod = make_module(case, seed=6).cuda()
    inputs = [t.to(dtype) if t.dim() == 4 else t for t in make_inputs(case, "cuda", torch.float32, seed=7)]
    gradient_contract(mod, inputs, dtype)


@pytest.mark.parametrize("N, S, h, d", [(97, 3, 2, 64), (40, 2, 1, 128), (17, 5, 3, 24)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_attention_gradients_awkward(N, S, h, d, dtype):
    """The fused backward kernels at shapes that cross their tiles, every head width class."""
    mod = att_module(h * d, 12, h, seed=N + d).cuda()
    inputs = [torch.randn(2, S, N, h * d, device="cuda").to(dtype), torch.randn(2, N, N, 12, device="cuda").to(dtype),
              random_mask(2, S, N, "rows", N).cuda()]
    gradient_contract(mod, inputs, dtype)


@pytest.mark.parametrize("N, S, c, normalization", [(97, 3, 32, "af2"), (17, 5, 16, "boltz"), (33, 2, 8, "seed"),
                                                    (130, 9, 32, "seed"), (64, 4, 32, "boltz")])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_opm_gradients_awkward(N, S, c, normalization, dtype):
    """The Outer Product Mean's backward (16-bit: the outer products, dX and dW kernels) at shapes that
    cross their tiles, a fully masked MSA row and residue, every hidden_dim class of the kernels; at hidden_dim
    32 in 16 bits on Hopper, the training forward through the Gluon kernel (a pass-major copy of a)."""
    mod = opm_module(24, 12, c, seed=N + c, normalization=normalization).cuda()
    inputs = [torch.randn(2, S, N, 24, device="cuda").to(dtype), random_mask(2, S, N, "rows", N).cuda()]
    gradient_contract(mod, inputs, dtype)


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
@pytest.mark.parametrize("name", ["opm-seed", "opm-af2-main", "att-seed", "att-af2-main"])
def test_tensors_on_another_gpu_than_the_current(name):
    """Outputs and gradients of a module on cuda:1 while cuda:0 is current (the launches move to the
    tensors' GPU), the seed shapes twice (the single-launch path is not replayed onto the wrong GPU)."""
    case = next(c for c in SUITE if c.name == name)
    assert torch.cuda.current_device() == 0
    mod = make_module(case, seed=6).to("cuda:1")
    inputs = make_inputs(case, "cuda:1", torch.float32, seed=7)
    for _ in range(2):
        contract(mod, inputs, torch.bfloat16)
    gradient_contract(mod, [t.to(torch.bfloat16) if t.dim() == 4 else t for t in inputs], torch.bfloat16)


def _extra_mib(fn):
    """Peak MiB allocated by fn beyond what was allocated before it, after one call of warm-up as the
    bench measures (one-time allocations, such as cuBLAS's workspace on its first product, excluded)."""
    with torch.no_grad():
        fn()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    with torch.no_grad():
        out = fn()
    torch.cuda.synchronize()
    return (torch.cuda.max_memory_allocated() - base) / 2**20, out


@pytest.mark.parametrize("dtype, limit", [(torch.float32, 704), (torch.bfloat16, 384)], ids=str)
def test_opm_long_memory(dtype, limit, monkeypatch):
    """SPEC 6: beyond the inputs, the output, a and b, and at most 64 MiB more (opm-long fp32: 704 MiB,
    bf16: 384 MiB); bf16 on Hopper through the Gluon kernel."""
    case = next(c for c in SUITE if c.name == "opm-long")
    mod = make_module(case).cuda().to(dtype)
    x, mask = make_inputs(case, "cuda", dtype)
    ran = spy_wgmma(monkeypatch)
    mib, _ = _extra_mib(lambda: mod(x, mask, impl="triton"))
    assert mib <= limit, f"opm-long {dtype} used {mib:.0f} MiB beyond the inputs"
    assert bool(ran) == hopper_kernel_expected(dtype, mod.hidden_dim, mod.out_proj.out_features)


@pytest.mark.parametrize("dtype, limit", [(torch.bfloat16, 400), (torch.float32, 800)])
def test_att_long_memory(dtype, limit):
    case = next(c for c in SUITE if c.name == "att-long")
    mod = make_module(case).cuda().to(dtype)
    x, z, mask = make_inputs(case, "cuda", dtype)
    mib, _ = _extra_mib(lambda: mod(x, z, mask, impl="triton"))
    assert mib <= limit, f"att-long {dtype} used {mib:.0f} MiB beyond the inputs"


@pytest.mark.parametrize("S", [16384, 4101])
def test_opm_float32_long_msa(S, monkeypatch):
    """float32 at the default precision over up to 16k MSA rows (chunks of SPLIT_CHUNK_S rows, the last one
    short, each the rows taken three times for the hi/lo products) keeps the contract against float64."""
    monkeypatch.setattr(outer_product_mean, "SMALL_MAX_N", 0)
    mod = opm_module(32, 64, 32, seed=S, normalization="seed").cuda()
    x = torch.randn(1, S, 40, 32, device="cuda")
    contract(mod, (x, random_mask(1, S, 40, "random", 3).cuda()), torch.float32)


def test_opm_offsets_past_2_31(monkeypatch):
    """N = 4096: the (B, N, N, 128) output has 2**31 elements; rows at the far end are checked (on Hopper
    through the Gluon kernel)."""
    N, S, c, R = 4096, 4, 32, 128
    ran = spy_wgmma(monkeypatch)
    mod = opm_module(32, R, c, seed=3).cuda().to(torch.bfloat16)
    x = torch.randn(1, S, N, 32, device="cuda", dtype=torch.bfloat16)
    mask = random_mask(1, S, N, "random", 1).cuda()
    with torch.no_grad():
        out = mod(x, mask, impl="triton")
        rows = torch.tensor([0, 1, N // 2, N - 2, N - 1], device="cuda")
        m = mod.double()
        xl = m.layer_norm(x.double())
        a = m.proj_a(xl) * mask[..., None].double()
        b = m.proj_b(xl) * mask[..., None].double()
        outer = torch.einsum("bsip,bsjq->bijpq", a[:, :, rows], b).reshape(1, len(rows), N, c * c)
        den = mask.double().sum(1).clamp(min=1)[:, rows, None, None]
        exact = m.out_proj(outer / den)
    err = (out[:, rows].double() - exact).norm() / exact.norm()
    assert err < 1e-2, err
    assert bool(ran) == hopper_kernel_expected(torch.bfloat16)


def test_attention_long_sequences_run():
    """N = 4096 and S = 16384 run without a crash; spot-checked against the reference on slices."""
    mod = att_module(64, 16, 4, seed=4).cuda().to(torch.bfloat16)
    for B, S, N in [(1, 2, 4096), (1, 16384, 16)]:
        x = torch.randn(B, S, N, 64, device="cuda", dtype=torch.bfloat16)
        z = torch.randn(B, N, N, 16, device="cuda", dtype=torch.bfloat16)
        mask = random_mask(B, S, N, "rows", 2).cuda()
        with torch.no_grad():
            out = mod(x, z, mask, impl="triton")
            rows = [0, S // 2, S - 1]
            ref = mod(x[:, rows], z, mask[:, rows], impl="torch")
        assert torch.isfinite(out).all()
        torch.testing.assert_close(out[:, rows], ref, rtol=3e-2, atol=3e-2)


def test_opm_long_msa_streams():
    mod = opm_module(32, 16, 32, seed=5).cuda()
    x = torch.randn(1, 16384, 24, 32, device="cuda")
    mask = random_mask(1, 16384, 24, "rows", 3).cuda()
    contract(mod, (x, mask), torch.float32)


def _train_extra_mib(mod, inputs):
    leaves = [t.requires_grad_(True) if t is not None and t.dim() == 4 else t for t in inputs]
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    out = mod(*leaves, impl="triton")
    out.backward(torch.ones_like(out))
    torch.cuda.synchronize()
    return (torch.cuda.max_memory_allocated() - base) / 2**20


@pytest.mark.parametrize("name, limit", [("opm-long", 2048), ("att-long", 1536), ("opm-af2-main", 360)])
def test_training_memory_is_of_the_forward_order(name, limit):
    """bf16 forward+backward: eager needs ~10 GiB on the long shapes; evofuse stays within a few times
    the forward's budget (output, its gradient, the input gradients and 32 MiB recompute blocks). opm-af2-main:
    the bench's 349.8 MiB (session 19) and 10 more (a buffer held past its use read 368.3, session 20)."""
    case = next(c for c in SUITE if c.name == name)
    mod = make_module(case).cuda().to(torch.bfloat16)
    mib = _train_extra_mib(mod, make_inputs(case, "cuda", torch.bfloat16))
    assert mib <= limit, f"{name} bf16 forward+backward used {mib:.0f} MiB beyond the inputs"


@pytest.mark.parametrize("rows", [37, 196613])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32], ids=str)
def test_column_sums(dtype, rows):
    """The backwards' bias gradients: rows summed in float32 (a product with a row of ones for large
    16-bit inputs, PyTorch's sum for small ones)."""
    from evofuse.ops._common import column_sums

    x = torch.randn(rows, 64, device="cuda").to(dtype)
    got = column_sums(x)
    exact = x.double().sum(0)
    assert got.dtype == torch.float32
    torch.testing.assert_close(got.double(), exact, rtol=1e-5, atol=1e-3)
