"""evofuse's ops on distributed tensors (`evofuse.sharding`): two processes with the gloo backend, the kernels in
Triton's interpreter on the CPU (CPU machines only: see `conftest.SPAWNED_INTERPRETER`), each op on sharded inputs
against the same module on the whole tensors: the inference output, then a training step's output, the inputs'
gradients and every parameter's, float32 within the contract's bound."""

import importlib.util
import os
import tempfile
import warnings

import pytest
import torch
import torch.distributed as dist

from evofuse.numerics import FP32_DEFAULT_BOUND, rel_error

from .conftest import SPAWNED_INTERPRETER

pytestmark = [SPAWNED_INTERPRETER, pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(),
                                                      reason="needs torch.distributed with gloo")]
WORLD = 2
B = 2 * WORLD  # (batch elements, and MSA rows where those are sharded: two a process)
# the cases whose inference gathers: triangle attention's bias, triangle multiplication's b or a, the Outer Product
# Mean's b (and its mask), attention with pair bias's keys and values (and their mask); one tensor unless said here
GATHERING = ("tri-starting:1", "tri-ending:2", "trimul-outgoing:1", "trimul-incoming:2", "opm:2",
             "opm-unmasked:2", "apb:1")
GATHERS = {"opm:2": 2, "apb:1": 2}


def _mask(*shape):
    return (torch.rand(*shape) > 0.2).float()


def _case(name):
    """(module, inputs: the differentiable ones first, then the mask, their placements' sharded dimensions (None:
    replicated), the output's sharded dimension) of a case, seeded."""
    import evofuse

    torch.manual_seed(0)
    op, _, shard = name.partition(":")
    if op in ("trimul-outgoing", "trimul-incoming"):  # (by batch elements, or by the pair's rows or columns)
        mod = evofuse.TriangleMultiplication(16, 8, outgoing=op.endswith("outgoing"))
        if shard:
            dim = int(shard)
            return mod, [torch.randn(2, 2 * B, 2 * B, 16), _mask(2, 2 * B, 2 * B)], [dim, dim], dim
        return mod, [torch.randn(B, 7, 7, 16), _mask(B, 7, 7)], [0, 0], 0
    if op in ("opm", "opm-unmasked"):
        if shard == "2":  # (by residues, b gathered: float32, and without a mask float16)
            if op == "opm":
                mod = evofuse.OuterProductMean(16, 8, 8, normalization="count_ij_after")
                return mod, [torch.randn(2, 5, 2 * B, 16), _mask(2, 5, 2 * B)], [2, 2], 1
            return evofuse.OuterProductMean(16, 8, 8).half(), [torch.randn(2, 5, 2 * B, 16).half(), None], [2, None], 1
        if shard:  # (by MSA rows: the output a partial sum over the devices' rows; AF2's normalization, and without
            # a mask the seed module's)
            if op == "opm":
                mod = evofuse.OuterProductMean(16, 8, 8, normalization="count_ij_after")
                return mod, [torch.randn(2, 2 * B, 7, 16), _mask(2, 2 * B, 7)], [1, 1], None
            return evofuse.OuterProductMean(16, 8, 8), [torch.randn(2, 2 * B, 7, 16), None], [1, None], None
        return evofuse.OuterProductMean(16, 8, 8), [torch.randn(B, 5, 7, 16), _mask(B, 5, 7)], [0, 0], 0
    if op == "trans":
        dim = int(shard)
        return evofuse.Transition(16, 32), [torch.randn(B, B, 5, 16), _mask(B, B, 5)], [dim, dim], dim
    if op == "pwa":
        mod = evofuse.PairWeightedAveraging(c_m=16, c_z=8, c_h=8, num_heads=2)
        torch.nn.init.normal_(mod.proj_o.weight, std=0.25)  # (Boltz starts it at zero: no gradient would flow back)
        if shard:  # (by MSA rows, the pair and its mask replicated)
            return mod, [torch.randn(B, B, 7, 16), torch.randn(B, 7, 7, 8), _mask(B, 7, 7)], [1, None, None], 1
        return mod, [torch.randn(B, 3, 7, 16), torch.randn(B, 7, 7, 8), _mask(B, 7, 7)], [0, 0, 0], 0
    if op in ("tri-starting", "tri-ending"):  # (by batch elements, or by the pair's rows or columns)
        mod = evofuse.TriangleAttention(16, 4, 2, starting=op.endswith("starting"))
        dim = int(shard or 0)
        return mod, [torch.randn(2, 2 * B, 2 * B, 16), _mask(2, 2 * B, 2 * B)], [dim, dim], dim
    if op in ("col", "gcol"):  # (col:2 and gcol:2: by residues)
        mod = (evofuse.MSAColumnAttention if op == "col" else evofuse.MSAColumnGlobalAttention)(16, 4, 2)
        dim = int(shard or 0)
        return mod, [torch.randn(B, 5, 2 * B, 16), _mask(B, 5, 2 * B)], [dim, dim], dim
    if op == "apb":  # (by batch elements, or by tokens: the single representation's, the pair's rows, the mask's)
        mod = evofuse.AttentionPairBias(16, 8, 2)
        if shard:
            return mod, [torch.randn(2, 4 * WORLD, 16), torch.randn(2, 4 * WORLD, 4 * WORLD, 8),
                         _mask(2, 4 * WORLD)], [1, 1, 1], 1
        return mod, [torch.randn(B, 7, 16), torch.randn(B, 7, 7, 8), _mask(B, 7)], [0, 0, 0], 0
    dim = int(shard)  # row attention: by batch elements, or by MSA rows with the pair replicated
    return (evofuse.MSARowAttentionWithPairBias(16, 8, 2), [torch.randn(B, B, 7, 16), torch.randn(B, 7, 7, 8),
                                                            _mask(B, B, 7)], [dim, 0 if dim == 0 else None, dim], dim)


def _whole(mod, inputs):
    """(the differentiable inputs as leaves, the output, each parameter's gradient): the module on the whole
    tensors, a training step of the squares' sum, its parameters' gradients then cleared."""
    whole = [t.clone().requires_grad_() for t in inputs[:-1]]
    want = mod(*whole, inputs[-1])
    want.square().sum().backward()
    want_grads = {n: p.grad.clone() for n, p in mod.named_parameters()}
    mod.zero_grad()
    return whole, want, want_grads


def _compare(mesh, name):
    from torch.distributed.tensor import Partial, Replicate, Shard, distribute_module, distribute_tensor

    mod, inputs, dims, out_dim = _case(name)
    whole, want, want_grads = _whole(mod, inputs)
    sharded = distribute_module(mod, mesh)  # (the parameters replicated)

    def placed():
        return [None if t is None else distribute_tensor(t, mesh, [Replicate() if d is None else Shard(d)])
                for t, d in zip(inputs, dims)]
    from torch.distributed.tensor.debug import CommDebugMode

    args = placed()
    with torch.no_grad(), CommDebugMode() as comms:
        got = sharded(*args)
    _check("inference output", got, want, Partial() if out_dim is None else Shard(out_dim))
    # (by batch elements nothing moves; by the pair's rows triangle attention gathers the bias alone, as the
    # placements say, triangle multiplication b (outgoing) or a (incoming), the Outer Product Mean by residues b,
    # and the mask where the counts are made from it)
    gathers = sum(n for op, n in comms.get_comm_counts().items() if "all_gather" in str(op))
    assert gathers == GATHERS.get(name, 1 if name in GATHERING else 0), comms.get_comm_counts()
    # (a training call whose inputs take no gradient first: DTensor caches a backward's sharding by its tensors, and
    # the placements of the gradients it makes must follow which it is asked for)
    out = sharded(*placed())
    (out.redistribute(mesh, [Replicate()]) if out_dim is None else out).square().sum().backward()
    sharded.zero_grad()
    args = placed()
    for t in args[:-1]:
        t.requires_grad_()
    got = sharded(*args)
    _check("output", got, want, Partial() if out_dim is None else Shard(out_dim))
    if out_dim is None:  # (the loss of a partial sum: reduced here, so that the backward below is the op's alone)
        got = got.redistribute(mesh, [Replicate()])
    with CommDebugMode() as comms:
        got.square().sum().backward()
    # (nothing moves, every rows' product taking each device's rows as one block; but triangle attention by the
    # pair's rows gathers the bias (B, h, N, N) again for the attention's backward, as its forward did, and reduces
    # the bias's gradient, a partial sum over the rows; triangle multiplication by rows or columns, and the Outer
    # Product Mean by residues, gather b (or a) again and reduce-scatter its gradient, a partial sum over the devices)
    moved = {str(op).split(".")[-1].split("'")[0]: n for op, n in comms.get_comm_counts().items()}
    # (attention with pair bias gathers its keys and values and their mask again)
    expected = {"all_gather_into_tensor": 2 if name == "apb:1" else 1,
                "all_reduce" if name.startswith("tri-") else "reduce_scatter_tensor": 1}
    assert moved == (expected if name in GATHERING else {}), (name, moved)
    for k, (t, w) in enumerate(zip(args, whole)):
        _check(f"input {k}'s gradient", t.grad, w.grad)
    for n, p in sharded.named_parameters():
        want = want_grads[n]
        sibling = want_grads[n[:-4] + "weight" if n.endswith("bias") else n].norm()
        if want.norm() <= 1e-6 * sibling:  # 0 in exact arithmetic (a softmax-invariant bias): judged by its size
            assert p.grad.full_tensor().norm() <= 1e-5 * sibling, f"{n}'s gradient: expected ~0"
        else:
            _check(f"{n}'s gradient", p.grad, want)


def _check(what, got, want, placement=None):
    from torch.distributed.tensor import DTensor

    assert isinstance(got, DTensor), f"{what}: a {type(got).__name__}, not a DTensor"
    assert placement is None or got.placements == (placement,), f"{what}: placements {got.placements}"
    error = rel_error(got.full_tensor(), want)
    bound = FP32_DEFAULT_BOUND if want.dtype == torch.float32 else 1e-2  # (float16: sums in other orders)
    assert error <= bound, f"{what}: rel error {error:.3e}"


def _worker(rank, store, name, world=WORLD):
    os.environ["EVOFUSE_IMPL"] = "triton"  # (the kernels, in the interpreter, not the reference)
    warnings.filterwarnings("error", message="evofuse: no fused")  # (a fallback to the reference fails)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    try:
        from torch.distributed.tensor import DeviceMesh

        import evofuse.sharding  # noqa: F401

        _compare(DeviceMesh("cpu", list(range(world))), name)
        dist.barrier()  # (both ranks done before the group goes: gloo aborts a process torn down mid-exchange)
    finally:
        dist.destroy_process_group()
    # (checks passed: leave without the interpreter's finalization, where gloo's threads can still hold work and
    # abort the process, pytorch/pytorch#179291)
    os._exit(0)


def _patched_layer(mesh, family, dim=0):
    """A patched Pairformer layer (narrow widths; Boltz-2's PairformerLayer, Protenix's PairformerBlock) on inputs
    sharded by batch elements (dim 0), in inference (Boltz's in-place forward): the same outputs as on the whole
    tensors, sharded alike, nothing moved; or by residues (dim 1: the single representation's, the pair's rows):
    the same outputs, DTensor moving what the modules' rules ask (attention with pair bias by tokens). (Boltz's own
    training forward makes its dropout masks as plain tensors, which DTensor refuses beside its own: its
    context-parallel package brings layers of its own for that.)"""
    from torch.distributed.tensor import Shard, distribute_module, distribute_tensor
    from torch.distributed.tensor.debug import CommDebugMode

    torch.manual_seed(0)
    s, z, mask = torch.randn(B, 8, 32), torch.randn(B, 8, 8, 16), _mask(B, 8)
    pair_mask = mask[:, :, None] * mask[:, None, :]
    if family == "boltz":
        from boltz.model.layers.pairformer import PairformerLayer

        from evofuse.integrations import boltz as integration

        layer = PairformerLayer(32, 16, num_heads=2, dropout=0.0, pairwise_head_width=8, pairwise_num_heads=2,
                                v2=True).eval()
        inputs = (s, z, mask, pair_mask)
    else:
        from protenix.model.modules.pairformer import PairformerBlock

        from evofuse.integrations import protenix as integration

        layer = PairformerBlock(n_heads=2, c_z=16, c_s=32, c_hidden_mul=8, c_hidden_pair_att=8, no_heads_pair=2,
                                dropout=0.0).eval()
        inputs = (s, z, pair_mask)
    assert len(integration.patch(layer)) == 7  # (attention, both triangle multiplications and attentions, transitions)
    with torch.no_grad():
        want = layer(*(t.clone() for t in inputs))
        sharded, placed = distribute_module(layer, mesh), [distribute_tensor(t, mesh, [Shard(dim)]) for t in inputs]
        with CommDebugMode() as comms:
            got = sharded(*placed)
    if dim:  # (the outgoing triangle multiplication on the pair's rows gathers b alone)
        counts = {fqn: sum(c["forward"].values()) for fqn, c in comms.comm_module_counts.items()}
        assert [n for fqn, n in counts.items() if fqn.endswith(".tri_mul_out")] == [1], counts
        if family == "boltz":  # (attention with pair bias by tokens: the keys and values and their mask, not the pair)
            assert [n for fqn, n in counts.items() if fqn.endswith(".attention")] == [2], counts
    else:
        assert comms.get_total_counts() == 0, comms.get_comm_counts()
    for what, g, w in zip(("s", "z"), got, want):
        _check(what, g, w, Shard(dim))


def _layer_worker(rank, store, family, dim):
    os.environ["EVOFUSE_IMPL"] = "triton"
    os.environ.setdefault("LAYERNORM_TYPE", "torch")  # (Protenix's own LayerNorm builds a CUDA extension otherwise)
    warnings.filterwarnings("error", message="evofuse: no fused")
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=WORLD)
    try:
        from torch.distributed.tensor import DeviceMesh

        import evofuse.sharding  # noqa: F401
        from evofuse.integrations import _crossover

        # (the fused kernels at this small size too, below the crossovers where the models' own modules run)
        _crossover.CROSSOVERS = dict.fromkeys(_crossover.CROSSOVERS, (0, 0))
        _patched_layer(DeviceMesh("cpu", list(range(WORLD))), family, dim)
        dist.barrier()
    finally:
        dist.destroy_process_group()
    os._exit(0)  # (as _worker)


@pytest.mark.parametrize("family", [
    pytest.param("boltz", marks=pytest.mark.skipif(importlib.util.find_spec("boltz") is None,
                                                   reason="needs boltz 2.2.1 (--no-deps)")),
    pytest.param("protenix", marks=pytest.mark.skipif(
        any(importlib.util.find_spec(name) is None for name in ("protenix", "optree", "rdkit", "scipy")),
        reason="needs protenix 2.0.0 (--no-deps) and its imports"))])
@pytest.mark.parametrize("dim", [0, 1])
def test_a_patched_model_layer_on_sharded_tensors(family, dim):
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory() as folder:
        mp.spawn(_layer_worker, args=(os.path.join(folder, "store"), family, dim), nprocs=WORLD)


@pytest.mark.parametrize("name", ["trimul-outgoing", "trimul-incoming", "trimul-outgoing:1", "trimul-incoming:2",
                                  "opm", "opm:1", "opm-unmasked:1", "opm:2", "opm-unmasked:2", "trans:0", "trans:1",
                                  "pwa", "pwa:1", "att:0", "att:1", "tri-starting", "tri-ending", "tri-starting:1",
                                  "tri-ending:2", "col", "col:2", "gcol", "gcol:2", "apb", "apb:1"])
def test_sharded_matches_whole(name):
    """trimul-outgoing:1 and trimul-incoming:2 are triangle multiplication by the pair's rows and columns, opm:1 and
    opm-unmasked:1 the Outer Product Mean by MSA rows, att:1 row attention by MSA rows (the pair replicated), pwa:1
    pair-weighted averaging likewise, trans:1 the transition by its second dimension, tri-starting:1 and
    tri-ending:2 triangle attention by the pair's rows and columns, col:2 and gcol:2 column and global column
    attention by residues, apb:1 attention with pair bias by tokens; the others by batch elements. Each process
    makes an inference call and then a training call at the same shapes: DTensor caches an op's sharding by its
    arguments from the first integer one on (`register_sharding`), and an op's kept outputs differ between the two."""
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory() as folder:
        mp.spawn(_worker, args=(os.path.join(folder, "store"), name), nprocs=WORLD)


@pytest.mark.parametrize("name", ["trimul-outgoing:1", "opm:2", "trans:1", "pwa:1", "att:1", "tri-starting:1",
                                  "col:2", "gcol:2", "apb:1"])
def test_sharded_matches_whole_on_four_processes(name):
    """Each operation's split along a residue, token or MSA-row dimension (`test_sharded_matches_whole`'s cases) on
    four processes: the same shapes, each sharded dimension in four parts (one or two each)."""
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory() as folder:
        mp.spawn(_worker, args=(os.path.join(folder, "store"), name, 4), nprocs=4)


def _grid_worker(rank, store, name):
    """One process of a 2 x 2 grid: the pair split by its rows along the mesh's first dimension and by its columns
    along the second, as context-parallel engines tile it; outputs and every gradient against the whole tensors
    (DTensor moves what the rules, expanded over both mesh dimensions, ask)."""
    os.environ["EVOFUSE_IMPL"] = "triton"
    warnings.filterwarnings("error", message="evofuse: no fused")
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=4)
    try:
        from torch.distributed.tensor import DeviceMesh, Shard, distribute_module, distribute_tensor

        import evofuse.sharding  # noqa: F401

        mesh = DeviceMesh("cpu", [[0, 1], [2, 3]])
        mod, inputs, _, _ = _case(name)
        whole, want, want_grads = _whole(mod, inputs)
        sharded = distribute_module(mod, mesh)  # (in place: the parameters become replicated DTensors)
        args = [distribute_tensor(t, mesh, [Shard(1), Shard(2)]) for t in inputs]
        with torch.no_grad():
            _check("inference output", sharded(*args), want)
        args[0].requires_grad_()
        sharded(*args).square().sum().backward()
        _check("the pair's gradient", args[0].grad, whole[0].grad)
        for n, p in sharded.named_parameters():
            _check(f"{n}'s gradient", p.grad, want_grads[n])
        dist.barrier()
    finally:
        dist.destroy_process_group()
    os._exit(0)  # (as _worker)


@pytest.mark.parametrize("name", ["trimul-outgoing:1", "trimul-incoming:2", "tri-starting:1", "tri-ending:2"])
def test_the_pair_on_a_two_by_two_grid(name):
    """Four processes: the pair operations on a pair tiled by rows and columns (`_grid_worker`)."""
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory() as folder:
        mp.spawn(_grid_worker, args=(os.path.join(folder, "store"), name), nprocs=4)
