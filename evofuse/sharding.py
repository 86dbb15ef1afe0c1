"""evofuse's ops on PyTorch's distributed tensors (`torch.distributed.tensor`). Importing this module registers, for
each op that has them, its sharding rules (`register_sharding`): the placements of its inputs under which it runs on
each shard as it is, and its outputs' placements then; DTensor moves the inputs there and runs the op's kernels on
the local shards. evofuse adds no communication of its own. `import evofuse.sharding` before calling a module on
DTensors (it imports `torch.distributed.tensor`, which `import evofuse` does not).

Rules so far (every one also takes all inputs replicated):
- triangle multiplication: the pair and its mask sharded by batch elements (Shard(0)), the parameters replicated; its
  product t (c, B, N, N) kept for the backward Shard(1); in the backward the pair's gradient Shard(0) and each
  parameter's a partial sum over the shards (Partial()), which DTensor reduces where it is read.
"""

from __future__ import annotations

import torch
from torch.distributed.tensor import Partial, Replicate, Shard
from torch.distributed.tensor.experimental import register_sharding

from .ops.triangle_multiplication import op as _trimul  # noqa: F401  (registers torch.ops.evofuse.triangle_*)

_ops = torch.ops.evofuse


def _replicated(tensors) -> list:
    """Replicate() for each tensor argument, None for an absent one (an optional tensor given None)."""
    return [None if t is None else Replicate() for t in tensors]


@register_sharding(_ops.triangle_multiplication.default)
def _triangle_multiplication(pair_repr, pair_mask, *rest):
    params, options = rest[:8], [None] * 4  # (outgoing, precision, chunk_rows, train)
    train = rest[-1]
    mask = None if pair_mask is None else Shard(0)
    return [([Replicate(), Replicate()], [Replicate(), None if pair_mask is None else Replicate(),
                                          *_replicated(params), *options]),
            ([Shard(0), Shard(1) if train else Replicate()], [Shard(0), mask, *_replicated(params), *options])]


@register_sharding(_ops.triangle_multiplication_core_backward.default)
def _triangle_multiplication_backward(grad_out, pair_repr, pair_mask, *rest):
    params, options, needs = rest[:8], [None] * 3, rest[-1]  # (rest[8]: t; then outgoing, precision, needs)
    mask = None if pair_mask is None else Shard(0)
    replicated = ([Replicate()] * 9, [Replicate(), Replicate(), None if pair_mask is None else Replicate(),
                                      *_replicated(params), Replicate(), *options])
    batch = ([Shard(0) if needs[0] else Replicate(), *(Partial() if need else Replicate() for need in needs[1:])],
             [Shard(0), Shard(0), mask, *_replicated(params), Shard(1), *options])
    return [replicated, batch]
