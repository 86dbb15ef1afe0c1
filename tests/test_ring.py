"""Ring attention's entry points (`evofuse.ring`): rows of residues split into tiles of queries and of keys, each
query tile's output and log-sum-exp merged over the key tiles, and each tile's gradients summed, against the whole
rows' attention by autograd in float64: masks replacing or adding, rows whose keys are all masked (in one tile, or
in every tile), no bias, tiles of one residue; the kernels in Triton's interpreter on the CPU. Bad arguments are
named; and a ring of 2 and of 4 processes (gloo) passing keys and values round."""

import os

import pytest
import torch

from evofuse import reference as ref
from evofuse import ring
from evofuse.numerics import rel_error

from .conftest import DEVICE, SPAWNED_INTERPRETER


def _inputs(T, tiles=2, S=3, h=2, d=8, with_bias=True, seed=0):
    """q, k, v (1, S, N, h, d), the bias (1, h, N, N) or None and the keys' mask (1, S, N) for N = tiles * T: row 0's
    keys of the first tile all masked, row 1's keys all masked, ~20% of the rest."""
    g = torch.Generator().manual_seed(seed)
    N = tiles * T
    q, k, v = (torch.randn(1, S, N, h, d, generator=g, dtype=torch.float64) for _ in range(3))
    bias = torch.randn(1, h, N, N, generator=g, dtype=torch.float64) if with_bias else None
    mask = (torch.rand(1, S, N, generator=g) > 0.2).double()
    mask[:, 0, :T] = 0
    mask[:, 1] = 0
    return q, k, v, bias, mask


LOW = torch.float16 if DEVICE == "cpu" else torch.bfloat16  # the interpreter's bf16 products are not checked


@pytest.mark.parametrize("impl", ["triton", "torch"])
@pytest.mark.parametrize("T, mask_mode, with_bias, dtype", [
    (9, "replace", True, torch.float32), (9, "add", True, torch.float32), (5, "add", False, torch.float32),
    (1, "replace", True, torch.float32), (9, "add", True, LOW),
    pytest.param(97, "add", True, torch.float32, marks=pytest.mark.gpu)])  # (several of the GPU's tiles)
def test_tiles_merge_to_the_whole_rows(T, mask_mode, with_bias, dtype, impl):
    """float32 within the contract's 1e-5 of float64; 16-bit within 2e-2 (one rounding of the operands, the
    outputs and the gradients)."""
    tiles = 2
    bound = 1e-5 if dtype == torch.float32 else 2e-2
    q, k, v, bias, mask = _inputs(T, tiles, with_bias=with_bias)
    leaves = [t.clone().requires_grad_() for t in (q, k, v)] + ([bias.clone().requires_grad_()] if with_bias else [])
    o_whole, lse_whole = ref.attention_tile_reference(*leaves[:3], leaves[3] if with_bias else None, mask, mask_mode)
    grad = torch.randn(o_whole.shape, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    o_whole.backward(grad)

    def part(t, a, dim):  # tile a of t along dim, in dtype on the tests' device
        return None if t is None else t.narrow(dim, a * T, T).to(DEVICE, dtype)
    grads = [torch.zeros_like(t) for t in (q, k, v)] + ([torch.zeros_like(bias)] if with_bias else [])
    for a in range(tiles):  # the query tile a against every key tile
        qa, grad_a = part(q, a, 2), part(grad, a, 2)
        outs, lses = [], []
        for t in range(tiles):
            bias_at = None if bias is None else part(bias, a, 2).narrow(3, t * T, T)
            o, lse = ring.attention_tile_forward(qa, part(k, t, 2), part(v, t, 2), bias_at, part(mask, t, 2),
                                                 mask_mode=mask_mode, impl=impl)
            assert o.dtype == dtype and lse.dtype == torch.float64
            outs.append(o)
            lses.append(lse)
        o, lse = ring.merge_tiles(outs, lses)
        assert rel_error(o.double().cpu(), o_whole.narrow(2, a * T, T)) <= bound, "output"
        rows = slice(None) if dtype == torch.float32 else [0, 2]  # (16-bit masks at float16's -65504, not -1e9)
        assert rel_error(lse.double().cpu()[:, rows], lse_whole.narrow(2, a * T, T)[:, rows]) <= bound, "log-sum-exp"
        for t in range(tiles):
            bias_at = None if bias is None else part(bias, a, 2).narrow(3, t * T, T).contiguous()
            dq, dk, dv, dz = ring.attention_tile_backward(grad_a, qa, part(k, t, 2), part(v, t, 2), bias_at,
                                                          part(mask, t, 2), o, lse, bias_grad=with_bias,
                                                          mask_mode=mask_mode, impl=impl)
            grads[0].narrow(2, a * T, T).add_(dq.double().cpu())
            grads[1].narrow(2, t * T, T).add_(dk.double().cpu())
            grads[2].narrow(2, t * T, T).add_(dv.double().cpu())
            if with_bias:
                grads[3].narrow(2, a * T, T).narrow(3, t * T, T).add_(dz.double().cpu())
    for name, got, leaf in zip(("q", "k", "v", "bias"), grads, leaves):
        assert rel_error(got, leaf.grad) <= bound, f"{name}'s gradient"


@pytest.mark.no_poison
@pytest.mark.parametrize("with_bias, bias_grad", [(True, True), (True, False), (False, False)])
def test_tile_ops_opcheck(with_bias, bias_grad):
    """The tiles' kernels as custom ops (`evofuse::attention_tile_forward` and `_backward`): schema, fake and
    dispatch checks (torch.library.opcheck)."""
    from evofuse.stages.attention.tile import tile_backward_op, tile_forward_op

    q, k, v, bias, mask = (None if t is None else t.float().to(DEVICE) for t in _inputs(4, with_bias=with_bias))
    torch.library.opcheck(tile_forward_op, (q, k, v, bias, mask, "add", "default"))
    o, lse = tile_forward_op(q, k, v, bias, mask, "add", "default")
    torch.library.opcheck(tile_backward_op, (torch.randn_like(o), q, k, v, bias, mask, o, lse, "add", "default",
                                             bias_grad))


@pytest.mark.no_poison
def test_a_compiled_ring_step_matches_the_eager_one():
    """torch.compile(fullgraph=True) traces a query tile's forward over two key tiles, their merge and each tile's
    backward (through the tiles' ops, no graph break) and computes what the eager calls do."""
    q, k, v, bias, mask = (t.float().to(DEVICE) for t in _inputs(4))

    def step(q, k, v, bias, mask, grad):
        tiles = [(k[:, :, :4], v[:, :, :4], bias[:, :, :4, :4].contiguous(), mask[:, :, :4]),
                 (k[:, :, 4:], v[:, :, 4:], bias[:, :, :4, 4:].contiguous(), mask[:, :, 4:])]
        parts = [ring.attention_tile_forward(q[:, :, :4], *tile, mask_mode="add", impl="triton") for tile in tiles]
        o, lse = ring.merge_tiles([p[0] for p in parts], [p[1] for p in parts])
        grads = [ring.attention_tile_backward(grad, q[:, :, :4], *tile[:3], tile[3], o, lse, mask_mode="add",
                                              impl="triton") for tile in tiles]
        return o, lse, *[g for tile_grads in grads for g in tile_grads]

    grad = torch.randn(1, 3, 4, 2, 8, generator=torch.Generator().manual_seed(2)).to(DEVICE)
    want = step(q, k, v, bias, mask, grad)
    got = torch.compile(step, backend="aot_eager", fullgraph=True)(q, k, v, bias, mask, grad)
    for w, g in zip(want, got):
        torch.testing.assert_close(g, w, rtol=0, atol=0)


def test_bad_arguments_are_named():
    q, k, v, bias, mask = (t.float() for t in _inputs(4))
    with pytest.raises(ValueError, match="k must have shape"):
        ring.attention_tile_forward(q, k[..., :4], v, bias, mask)
    with pytest.raises(ValueError, match="v must have k's shape"):
        ring.attention_tile_forward(q, k[:, :, :3], v, bias[..., :3], mask[..., :3])
    with pytest.raises(ValueError, match="bias must have shape"):
        ring.attention_tile_forward(q, k, v, bias[..., :3], mask)
    with pytest.raises(ValueError, match="mask must have shape"):
        ring.attention_tile_forward(q, k, v, bias, mask[:, :2])
    with pytest.raises(TypeError, match="v must be a torch.Tensor"):
        ring.attention_tile_forward(q, k, v.tolist(), bias, mask)
    with pytest.raises(ValueError, match="mask_mode"):
        ring.attention_tile_forward(q, k, v, bias, mask, mask_mode="mul")
    o, lse = ring.attention_tile_forward(q, k, v, bias, mask, impl="torch")
    with pytest.raises(ValueError, match="lse must have shape"):
        ring.attention_tile_backward(o, q, k, v, bias, mask, o, lse[..., :1], impl="torch")
    with pytest.raises(ValueError, match="bias_grad needs a bias"):
        ring.attention_tile_backward(o, q, k, v, None, mask, o, lse, impl="torch")


def _ring_worker(rank, world, store, mask_mode):
    """Rank r holds the queries, keys, values and keys' mask of residue tile r and the bias's rows of its queries;
    keys and values go round the ring (gloo send / recv) for the forward, and with their gradients' running sums
    for the backward, which come home complete after a full turn."""
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    try:
        T = 3
        q, k, v, bias, mask = (t.float() for t in _inputs(T, world))
        grad = torch.randn(q.shape, generator=torch.Generator().manual_seed(5))
        mine = slice(rank * T, (rank + 1) * T)
        q_r, grad_r, bias_r = q[:, :, mine], grad[:, :, mine], bias[:, :, mine]
        nxt, prv = (rank + 1) % world, (rank - 1) % world

        def turn(tensors):  # each rank's buffers to the next rank, the previous rank's here
            got = [torch.empty_like(t) for t in tensors]
            ops = [dist.P2POp(dist.isend, t, nxt) for t in tensors] + [dist.P2POp(dist.irecv, t, prv) for t in got]
            for request in dist.batch_isend_irecv(ops):
                request.wait()
            return got

        travel = [k[:, :, mine].contiguous(), v[:, :, mine].contiguous(), mask[:, :, mine].contiguous()]
        outs, lses = [], []
        for step in range(world):
            t = (rank - step) % world  # the key tile held now
            o, lse = ring.attention_tile_forward(q_r, *travel[:2], bias_r[..., t * T:(t + 1) * T], travel[2],
                                                 mask_mode=mask_mode, impl="triton")
            outs.append(o)
            lses.append(lse)
            travel = turn(travel)
        o, lse = ring.merge_tiles(outs, lses)
        dq = torch.zeros_like(q_r)
        dbias = torch.zeros_like(bias_r)
        travel += [torch.zeros_like(q_r), torch.zeros_like(q_r)]  # dk, dv of the tile held, summed on the way
        for step in range(world):
            t = (rank - step) % world
            bias_t = bias_r[..., t * T:(t + 1) * T].contiguous()
            dq_t, dk_t, dv_t, dz_t = ring.attention_tile_backward(grad_r, q_r, *travel[:2], bias_t, travel[2], o, lse,
                                                                  mask_mode=mask_mode, impl="triton")
            dq += dq_t
            travel[3] += dk_t
            travel[4] += dv_t
            dbias[..., t * T:(t + 1) * T] = dz_t
            travel = turn(travel)
        got = {name: torch.cat(_gathered(t, world), 2) for name, t in
               (("o", o.double()), ("q", dq.double()), ("k", travel[3].double()), ("v", travel[4].double()),
                ("bias", dbias.double()))}
        if rank == 0:
            leaves = [t.clone().requires_grad_() for t in (q, k, v, bias)]
            whole, _ = ref.attention_tile_reference(*(t.double() for t in leaves), mask.double(), mask_mode)
            whole.backward(grad.double())
            assert rel_error(got["o"], whole) <= 1e-5, "output"
            for name, leaf in zip(("q", "k", "v", "bias"), leaves):
                assert rel_error(got[name], leaf.grad) <= 1e-5, f"{name}'s gradient"
        dist.barrier()
    finally:
        dist.destroy_process_group()
    # (checks passed: leave without the interpreter's finalization, where gloo's threads can still hold work and
    # abort the process, pytorch/pytorch#179291)
    os._exit(0)


def _gathered(t, world):
    import torch.distributed as dist

    parts = [torch.empty_like(t) for _ in range(world)]
    dist.all_gather(parts, t)
    return parts


@SPAWNED_INTERPRETER
@pytest.mark.parametrize("world, mask_mode", [(2, "replace"), (4, "add")])
def test_a_ring_of_processes(world, mask_mode, tmp_path):
    """A ring of 2 and of 4 processes (gloo), the kernels in Triton's interpreter: each rank's output and its
    queries', keys', values' and bias's gradients, gathered, against the whole rows by autograd in float64."""
    import torch.distributed as dist
    import torch.multiprocessing as mp

    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("needs torch.distributed with gloo")
    mp.spawn(_ring_worker, args=(world, str(tmp_path / "store"), mask_mode), nprocs=world)
