"""evofuse's ops on distributed tensors (`evofuse.sharding`): two processes with the gloo backend, the kernels in
Triton's interpreter on the CPU (on the GPU device's CPUs too), each op on sharded inputs against the same module
on the whole tensors: the output, the input's gradient and every parameter's, float32 within the contract's bound."""

import os
import tempfile
import warnings

import pytest
import torch
import torch.distributed as dist

from evofuse.numerics import FP32_DEFAULT_BOUND, rel_error

pytestmark = pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(),
                                reason="needs torch.distributed with gloo")
WORLD = 2


def _triangle_multiplication(mesh, outgoing):
    from torch.distributed.tensor import Shard, distribute_module, distribute_tensor

    import evofuse

    torch.manual_seed(0)
    mod = evofuse.TriangleMultiplication(16, 8, outgoing=outgoing)
    z = torch.randn(2 * WORLD, 7, 7, 16)
    mask = (torch.rand(2 * WORLD, 7, 7) > 0.2).float()
    z_whole = z.clone().requires_grad_()
    want = mod(z_whole, mask)
    want.square().sum().backward()
    want_grads = {name: p.grad.clone() for name, p in mod.named_parameters()}
    mod.zero_grad()
    sharded = distribute_module(mod, mesh)  # (the parameters replicated)
    with torch.no_grad():
        inference = sharded(distribute_tensor(z, mesh, [Shard(0)]), distribute_tensor(mask, mesh, [Shard(0)]))
    _check("inference output", inference, want, Shard(0))
    z_shards = distribute_tensor(z, mesh, [Shard(0)]).requires_grad_()
    got = sharded(z_shards, distribute_tensor(mask, mesh, [Shard(0)]))
    _check("output", got, want, Shard(0))
    got.square().sum().backward()
    _check("the pair's gradient", z_shards.grad, z_whole.grad, Shard(0))
    _check_parameters(sharded, want_grads)


def _outer_product_mean(mesh):
    from torch.distributed.tensor import Shard, distribute_module, distribute_tensor

    import evofuse

    torch.manual_seed(0)
    mod = evofuse.OuterProductMean(16, 8, 8)
    m = torch.randn(2 * WORLD, 5, 7, 16)
    mask = (torch.rand(2 * WORLD, 5, 7) > 0.2).float()
    m_whole = m.clone().requires_grad_()
    want = mod(m_whole, mask)
    want.square().sum().backward()
    want_grads = {name: p.grad.clone() for name, p in mod.named_parameters()}
    mod.zero_grad()
    sharded = distribute_module(mod, mesh)
    m_shards = distribute_tensor(m, mesh, [Shard(0)]).requires_grad_()
    got = sharded(m_shards, distribute_tensor(mask, mesh, [Shard(0)]))
    _check("output", got, want, Shard(0))
    got.square().sum().backward()
    _check("the MSA's gradient", m_shards.grad, m_whole.grad, Shard(0))
    _check_parameters(sharded, want_grads)


def _transition(mesh, dim):
    from torch.distributed.tensor import Shard, distribute_module, distribute_tensor

    import evofuse

    torch.manual_seed(0)
    mod = evofuse.Transition(16, 32)
    x = torch.randn(2 * WORLD, 2 * WORLD, 5, 16)
    mask = (torch.rand(2 * WORLD, 2 * WORLD, 5) > 0.2).float()
    x_whole = x.clone().requires_grad_()
    want = mod(x_whole, mask)
    want.square().sum().backward()
    want_grads = {name: p.grad.clone() for name, p in mod.named_parameters()}
    mod.zero_grad()
    sharded = distribute_module(mod, mesh)
    x_shards = distribute_tensor(x, mesh, [Shard(dim)]).requires_grad_()
    got = sharded(x_shards, distribute_tensor(mask, mesh, [Shard(dim)]))
    _check("output", got, want, Shard(dim))
    got.square().sum().backward()
    _check("x's gradient", x_shards.grad, x_whole.grad)
    _check_parameters(sharded, want_grads)


def _pair_weighted_averaging(mesh):
    from torch.distributed.tensor import Shard, distribute_module, distribute_tensor

    import evofuse

    torch.manual_seed(0)
    mod = evofuse.PairWeightedAveraging(c_m=16, c_z=8, c_h=8, num_heads=2)
    torch.nn.init.normal_(mod.proj_o.weight, std=0.25)  # (Boltz starts it at zero: no gradient would flow back)
    m = torch.randn(2 * WORLD, 3, 7, 16)
    z = torch.randn(2 * WORLD, 7, 7, 8)
    mask = (torch.rand(2 * WORLD, 7, 7) > 0.2).float()
    m_whole, z_whole = m.clone().requires_grad_(), z.clone().requires_grad_()
    want = mod(m_whole, z_whole, mask)
    want.square().sum().backward()
    want_grads = {name: p.grad.clone() for name, p in mod.named_parameters()}
    mod.zero_grad()
    sharded = distribute_module(mod, mesh)
    m_shards = distribute_tensor(m, mesh, [Shard(0)]).requires_grad_()
    z_shards = distribute_tensor(z, mesh, [Shard(0)]).requires_grad_()
    got = sharded(m_shards, z_shards, distribute_tensor(mask, mesh, [Shard(0)]))
    _check("output", got, want, Shard(0))
    got.square().sum().backward()
    _check("the MSA's gradient", m_shards.grad, m_whole.grad)
    _check("the pair's gradient", z_shards.grad, z_whole.grad)
    _check_parameters(sharded, want_grads)


def _msa_row_attention(mesh, dim):
    from torch.distributed.tensor import Replicate, Shard, distribute_module, distribute_tensor

    import evofuse

    torch.manual_seed(0)
    mod = evofuse.MSARowAttentionWithPairBias(16, 8, 2)
    m = torch.randn(2 * WORLD, 2 * WORLD, 7, 16)
    z = torch.randn(2 * WORLD, 7, 7, 8)
    mask = (torch.rand(2 * WORLD, 2 * WORLD, 7) > 0.2).float()
    m_whole, z_whole = m.clone().requires_grad_(), z.clone().requires_grad_()
    want = mod(m_whole, z_whole, mask)
    want.square().sum().backward()
    want_grads = {name: p.grad.clone() for name, p in mod.named_parameters()}
    mod.zero_grad()
    sharded = distribute_module(mod, mesh)
    m_shards = distribute_tensor(m, mesh, [Shard(dim)]).requires_grad_()
    z_shards = distribute_tensor(z, mesh, [Shard(0) if dim == 0 else Replicate()]).requires_grad_()
    got = sharded(m_shards, z_shards, distribute_tensor(mask, mesh, [Shard(dim)]))
    _check("output", got, want, Shard(dim))
    got.square().sum().backward()
    _check("the MSA's gradient", m_shards.grad, m_whole.grad)
    _check("the pair's gradient", z_shards.grad, z_whole.grad)
    _check_parameters(sharded, want_grads)


def _check_parameters(sharded, want_grads):
    """Every parameter's gradient against the whole-tensor module's; one that is 0 in exact arithmetic (a softmax
    ignores the constant a bias adds: the whole-tensor one is rounding) must be as small, not close in relative
    terms."""
    for name, p in sharded.named_parameters():
        want = want_grads[name]
        sibling = want_grads[name[:-4] + "weight" if name.endswith("bias") else name].norm()
        if want.norm() <= 1e-6 * sibling:
            assert p.grad.full_tensor().norm() <= 1e-5 * sibling, f"{name}'s gradient: expected ~0"
        else:
            _check(f"{name}'s gradient", p.grad, want)


def _check(what, got, want, placement=None):
    from torch.distributed.tensor import DTensor

    assert isinstance(got, DTensor), f"{what}: a {type(got).__name__}, not a DTensor"
    assert placement is None or got.placements == (placement,), f"{what}: placements {got.placements}"
    error = rel_error(got.full_tensor(), want)
    assert error <= FP32_DEFAULT_BOUND, f"{what}: rel error {error:.3e}"


def _worker(rank, store, case, *args):
    os.environ["EVOFUSE_IMPL"] = "triton"  # (the kernels, in the interpreter, not the reference)
    warnings.filterwarnings("error", message="evofuse: no fused")  # (a fallback to the reference fails)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=WORLD)
    try:
        from torch.distributed.tensor import DeviceMesh

        import evofuse.sharding  # noqa: F401

        globals()[case](DeviceMesh("cpu", list(range(WORLD))), *args)
        dist.barrier()  # (both ranks done before the group goes: gloo aborts a process torn down mid-exchange)
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("outgoing", [True, False], ids=["outgoing", "incoming"])
def test_triangle_multiplication_batch_sharded(outgoing):
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory() as folder:
        mp.spawn(_worker, args=(os.path.join(folder, "store"), "_triangle_multiplication", outgoing), nprocs=WORLD)


def test_outer_product_mean_batch_sharded():
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory() as folder:
        mp.spawn(_worker, args=(os.path.join(folder, "store"), "_outer_product_mean"), nprocs=WORLD)


@pytest.mark.parametrize("dim", [0, 1])
def test_transition_sharded_by_leading_dimension(dim):
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory() as folder:
        mp.spawn(_worker, args=(os.path.join(folder, "store"), "_transition", dim), nprocs=WORLD)


def test_pair_weighted_averaging_batch_sharded():
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory() as folder:
        mp.spawn(_worker, args=(os.path.join(folder, "store"), "_pair_weighted_averaging"), nprocs=WORLD)


@pytest.mark.parametrize("dim", [0, 1], ids=["batch", "msa-rows"])
def test_msa_row_attention_sharded(dim):
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory() as folder:
        mp.spawn(_worker, args=(os.path.join(folder, "store"), "_msa_row_attention", dim), nprocs=WORLD)
