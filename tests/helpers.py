"""Random modules and inputs for the tests, the contract assertion, and the checks of a patched model."""

import copy
import warnings

import torch

from evofuse import MSARowAttentionWithPairBias, OuterProductMean
from evofuse.numerics import FP32_ALLCLOSE, bound, rel_error


def randomize(mod: torch.nn.Module, seed: int) -> torch.nn.Module:
    """Every parameter random (LayerNorm included), at the scale of nn.Linear's initialisation."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in mod.named_parameters():
            if name.startswith("layer_norm.weight"):
                p.copy_(1 + 0.3 * torch.randn(p.shape, generator=g))
            elif p.dim() == 1:
                p.copy_(0.3 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(torch.randn(p.shape, generator=g) / p.shape[1] ** 0.5)
    return mod


def opm_module(D, pair, c, seed=0, **kw):
    return randomize(OuterProductMean(D, pair, c, **kw), seed)


def att_module(D, pair, h, seed=0, **kw):
    return randomize(MSARowAttentionWithPairBias(D, pair, h, **kw), seed)


def rebuild_kernels() -> None:
    """Forget every autotuned kernel (and what was derived from the config tables), so that the next call tunes again
    under the environment and tables it then finds."""
    from evofuse._runtime import forget_autotuned
    from evofuse.ops.outer_product_mean import configs as opm_configs

    forget_autotuned()
    opm_configs._workspace_slot.cache_clear()


def masked_msa(B, S, N, D, seed, fully_masked=True) -> tuple[torch.Tensor, torch.Tensor]:
    """An MSA (B, S, N, D) and a mask with ~20% zeros and, if fully_masked, a residue whose rows are all masked (for the
    column attentions a column whose keys are all masked)."""
    g = torch.Generator().manual_seed(seed)
    mask = (torch.rand(B, S, N, generator=g) > 0.2).float()
    if fully_masked:
        mask[:, :, N // 2] = 0
    return torch.randn(B, S, N, D, generator=g), mask


def random_mask(B, S, N, kind: str, seed: int) -> torch.Tensor | None:
    """kind: "random" (~30% zeros), "ones", "none", "rows" (random + a fully masked MSA row and a
    residue masked in every row), "empty" (all zeros)."""
    g = torch.Generator().manual_seed(seed)
    if kind == "none":
        return None
    if kind == "ones":
        return torch.ones(B, S, N)
    if kind == "empty":
        return torch.zeros(B, S, N)
    mask = (torch.rand(B, S, N, generator=g) > 0.3).float()
    if kind == "rows":
        mask[:, S // 2, :] = 0
        mask[:, :, N // 2] = 0
    return mask


def assert_contract(out, exact, dtype, precision="default", lowp_ref=None, ref_fp32=None, what="output"):
    """The numerics contract for one tensor: `exact` is the float64 reference, `lowp_ref` the reference run in a
    16-bit dtype, `ref_fp32` the reference in float32 (for the allclose condition)."""
    assert out.dtype == dtype, f"{what}: dtype {out.dtype}, expected {dtype}"
    assert out.shape == exact.shape, f"{what}: shape {tuple(out.shape)}, expected {tuple(exact.shape)}"
    err = rel_error(out, exact)
    limit = bound(dtype, precision, None if lowp_ref is None else rel_error(lowp_ref, exact))
    assert err <= limit, f"{what}: rel error {err:.3e} > {limit:.3e}"
    if ref_fp32 is not None and precision == "default":
        assert torch.allclose(out.float(), ref_fp32.float(), **FP32_ALLCLOSE), f"{what}: not allclose to the fp32 reference"
    return err


def grads(mod, inputs, impl, seed=0, differentiable=None, views=None, only=None):
    """Output and named gradients of `mod` on `inputs` for a seeded random output gradient: the inputs that take
    gradients as input0, input1 (the first `differentiable` inputs; by default the floating 4-D ones), then every
    parameter by name. views(k, leaf): input k made from its leaf (strided or broadcast views); only: the one leaf
    ("inputk" or a parameter's name) that needs a gradient, the others none (default: every leaf). A leaf whose
    gradient stays None is left out."""
    for p in mod.parameters():
        p.grad = None
    takes = [t is not None and (k < differentiable if differentiable is not None else
                                t.is_floating_point() and t.dim() == 4) for k, t in enumerate(inputs)]
    leaves = [None if t is None else t.detach().clone().requires_grad_(takes[k] and only in (None, f"input{k}"))
              for k, t in enumerate(inputs)]
    needed = {n: p.requires_grad for n, p in mod.named_parameters()}
    try:
        for n, p in mod.named_parameters():
            p.requires_grad_(needed[n] and only in (None, n))
        args = [t if views is None or t is None else views(k, t) for k, t in enumerate(leaves)]
        out = mod(*args, impl=impl)
        g = torch.randn(out.shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64).to(out)
        out.backward(g)
    finally:
        for n, p in mod.named_parameters():
            p.requires_grad_(needed[n])
    named = {f"input{k}": t.grad for k, t in enumerate(leaves) if t is not None and t.grad is not None}
    named.update({n: p.grad.clone() for n, p in mod.named_parameters() if p.grad is not None})
    return out, named


# softmax is shift-invariant per row, so key.bias, pair_bias.bias, (pair-weighted averaging) norm_z.bias and
# (attention with pair bias) the pair LayerNorm's bias have exact gradient 0: those are judged on the scale of their
# weights' gradients
ZERO_GRADS = {"key.bias": "key.weight", "pair_bias.bias": "pair_bias.weight", "norm_z.bias": "norm_z.weight",
              "pair_norm.bias": "pair_norm.weight", "proj_z.0.bias": "proj_z.0.weight"}


def compare(got, exact, dtype, lowp=None, names=None):
    """The numerics contract for the gradients `names` (default: every one in `exact`) of `got` against the float64
    ones in `exact`; a gradient missing from `got` fails."""
    for name in exact if names is None else names:
        assert name in got, f"{name}: no gradient (expected one of norm {exact[name].double().norm():.3e})"
        g = got[name]
        if name in ZERO_GRADS and exact[name].norm() < 1e-9 * exact[ZERO_GRADS[name]].norm():
            # exactly 0 in exact arithmetic (softmax ignores a constant per row): the contract with the
            # sibling gradient's norm as the scale; 16-bit: twice what the reference in that dtype
            # leaves, + 1e-3 (bf16 rounding of o leaves ~1e-3 in the row sums, PyTorch's own as well)
            scale = exact[ZERO_GRADS[name]].norm()
            limit = 1e-3 * scale + (0 if lowp is None else 2 * lowp[name].double().norm())
            assert g.double().norm() <= limit, f"{name}: norm {g.double().norm():.3e} > {limit:.3e}"
            continue
        assert_contract(g, exact[name], dtype, lowp_ref=None if lowp is None else lowp[name], what=name)
    extra = set(got) - set(exact)
    assert names is not None or not extra, f"gradients the reference has not: {sorted(extra)}"


def block_step(block, inputs, call=None):
    """A training step of a model's block: (outputs, gradients of the first two inputs (m and z), gradients of
    the parameters by name) for the loss sum of the outputs' squares; call(block, *inputs) (default
    block(*inputs)) gives an output or a tuple of them."""
    inputs = [t.clone().requires_grad_(k < 2) for k, t in enumerate(inputs)]
    outs = call(block, *inputs) if call is not None else block(*inputs)
    outs = [o for o in (outs if isinstance(outs, tuple) else (outs,)) if o is not None]
    sum(o.square().sum() for o in outs).backward()
    params = {n: p.grad.clone() for n, p in block.named_parameters() if p.grad is not None}
    return [o.detach() for o in outs], [t.grad for t in inputs[:2]], params


def assert_block_matches(got, expected, limit=1e-5):
    """`block_step` of a patched block against the original's: every output and gradient within `limit`
    relative error. A parameter gradient is judged by the size of the expected one: one that is 0 in exact arithmetic
    (a softmax ignores the constant a bias adds: the original's is rounding, under 1e-6 of its weight's gradient)
    must be as small (under 1e-5 of that weight's); any other within `limit`, so that a lost or zeroed gradient
    fails."""
    named = [(f"output {k}", a, b) for k, (a, b) in enumerate(zip(got[0], expected[0]))]
    named += [(f"input {k}'s gradient", a, b) for k, (a, b) in enumerate(zip(got[1], expected[1]))]
    for what, a, b in named:
        assert rel_error(a, b) <= limit, f"{what}: rel error {rel_error(a, b):.3e}"
    assert got[2].keys() == expected[2].keys()
    for name, g in got[2].items():
        want = expected[2][name]
        sibling = expected[2][name[:-4] + "weight" if name.endswith("bias") else name].norm()
        if want.norm() <= 1e-6 * sibling:
            assert g.norm() <= 1e-5 * sibling, f"{name}: norm {g.norm():.3e}, expected ~0 (its weight's {sibling:.3e})"
        else:
            assert rel_error(g, want) <= limit, f"{name}: rel error {rel_error(g, want):.3e}"


def assert_patched_block_matches(integration, original, inputs, names, call=None):
    """`integration.patch` on a copy of the model's block `original` replaces the submodules `names` (sorted),
    keeps every state_dict name, computes a training step (`block_step`) as the original does, and `unpatch`
    puts the originals back."""
    patched = copy.deepcopy(original)
    assert sorted(integration.patch(patched)) == names
    assert list(patched.state_dict()) == list(original.state_dict())  # the checkpoint's names, unchanged
    assert_block_matches(block_step(patched, inputs, call), block_step(original, inputs, call))
    assert sorted(integration.unpatch(patched)) == names
    assert all(type(patched.get_submodule(n)) is type(original.get_submodule(n)) for n in names)


def assert_left_unpatched(integration, module, message):
    """`integration.patch` leaves `module` as it is, with a warning that contains `message`."""
    holder = torch.nn.Sequential(module)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert integration.patch(holder) == []
    assert any(message in str(w.message) for w in caught), [str(w.message) for w in caught]
    assert holder[0] is module


def assert_autocast_like_original(integration, block, calls, device):
    """Under autocast (float16 on CPU: the interpreter's bf16 products are not checked) each patched submodule
    of `block` returns the original's dtype, within the 16-bit contract of the original's own error against
    float64. calls: {submodule path: its arguments}."""
    dtype = torch.float16 if device == "cpu" else torch.bfloat16
    patched = copy.deepcopy(block)
    integration.patch(patched)
    for path, args in calls.items():
        original, fused = block.get_submodule(path), patched.get_submodule(path)
        with torch.no_grad():
            exact = copy.deepcopy(original).double()(*(t.double() for t in args))
            with torch.autocast(device, dtype=dtype):
                ours, theirs = fused(*args), original(*args)
        assert ours.dtype == theirs.dtype, path
        assert rel_error(ours, exact) <= 2 * rel_error(theirs, exact) + 1e-3, path


def peak_live_bytes(run) -> int:
    """The most bytes of tensor storage that `run()` held alive at once, counting the storages its aten calls made (on
    any device; views, in-place and out= results, and what existed before, not counted): the peak of a call's
    allocations where no CUDA allocator reports one (the interpreter)."""
    import weakref

    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_leaves

    live, peak, seen = [0], [0], set()

    def freed(key, size):
        live[0] -= size
        seen.discard(key)

    class Tracking(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            given = {t.untyped_storage().data_ptr() for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)}
            for t in tree_leaves(out):
                if isinstance(t, torch.Tensor) and t.untyped_storage().nbytes():
                    key = t.untyped_storage().data_ptr()
                    if key not in seen and key not in given:  # (a view, an in-place or out= result: no allocation)
                        seen.add(key)
                        size = t.untyped_storage().nbytes()
                        weakref.finalize(t.untyped_storage(), freed, key, size)
                        live[0] += size
                        peak[0] = max(peak[0], live[0])
            return out

    with Tracking():
        run()
    return peak[0]


def assert_small_calls_run_the_original(integration, original, inputs, call=None):
    """Below every crossover (`integrations._crossover.CROSSOVERS` past any size) a patched copy of the model's block
    `original` runs the modules it replaced: its training step (`block_step`) and its inference call equal the
    original's to the bit, so each replacement hands its original the call as the model made it."""
    import pytest

    from evofuse.integrations import _crossover

    patched = copy.deepcopy(original)
    assert integration.patch(patched)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_crossover, "CROSSOVERS", dict.fromkeys(_crossover.CROSSOVERS, (2**62, 2**62)))
        steps = [block_step(block, inputs, call) for block in (patched, original)]
        with torch.no_grad():
            calls = [call(block, *inputs) if call is not None else block(*inputs) for block in (patched, original)]
    (outs, grads, params), (want_outs, want_grads, want_params) = steps
    assert all(torch.equal(a, b) for a, b in zip(outs + grads, want_outs + want_grads, strict=True))
    assert params.keys() == want_params.keys() and all(torch.equal(params[n], want_params[n]) for n in params)
    calls = [c if isinstance(c, tuple) else (c,) for c in calls]
    assert all(torch.equal(a, b) for a, b in zip(*calls, strict=True))
