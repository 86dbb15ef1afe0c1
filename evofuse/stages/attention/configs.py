"""Row attention's kernel tiles, as data, and the predicate that keeps those that fit a call.

BLOCK_M queries and BLOCK_N keys a tile; BLOCK_D is the head dimension rounded up to a power of two (>= 16),
set by the launcher. A config is kept when its tiles fit the register file for the operand width.
"""

from __future__ import annotations

import triton

from ..._runtime import next_pow2, tuning_candidates

FORWARD_CONFIGS = [
    triton.Config({"BLOCK_M": bm, "BLOCK_N": bn}, num_warps=warps, num_stages=stages)
    for bm, bn, warps, stages in ((64, 64, 4, 3), (128, 64, 8, 3), (64, 32, 4, 3), (128, 128, 8, 2), (32, 32, 4, 2),
                                  (16, 32, 4, 2))
]
BACKWARD_CONFIGS = [
    triton.Config({"BLOCK_M": bm, "BLOCK_N": bn}, num_warps=warps, num_stages=stages)
    for bm, bn, warps, stages in ((64, 64, 4, 2), (32, 64, 4, 2), (64, 32, 4, 2), (128, 64, 8, 2), (32, 32, 4, 2),
                                  (16, 32, 4, 2))
]
INTERPRETER_CONFIG = triton.Config({"BLOCK_M": 16, "BLOCK_N": 16}, num_warps=1, num_stages=1)

TILE_LIMIT = 128 * 128  # elements of the largest [tile rows, BLOCK_D] or [BLOCK_M, BLOCK_N] tile of a program


def fits(config: triton.Config, BLOCK_D: int, N: int, element_size: int) -> bool:
    bm, bn = config.kwargs["BLOCK_M"], config.kwargs["BLOCK_N"]
    limit = TILE_LIMIT // (2 if element_size == 4 else 1)
    small_n = max(16, 1 << max(N - 1, 0).bit_length())
    return max(bm, bn) * BLOCK_D <= limit and bm * bn <= limit and min(bm, bn) <= small_n


def candidates(configs: list[triton.Config], BLOCK_D: int, N: int, element_size: int) -> list[triton.Config]:
    """The configs tried for a call (the first fitting where autotuning is off; the interpreter's alone
    under Triton's interpreter)."""
    return tuning_candidates(configs, lambda cfg: fits(cfg, BLOCK_D, N, element_size), INTERPRETER_CONFIG)


def prune(configs, named_args, **kwargs):
    return candidates(configs, kwargs["BLOCK_D"], named_args["N"], named_args["qkvg_ptr"].element_size())


# The gate's backward is memory bound: one program takes whole rows (every head), about GATE_TILE elements,
# with GATE_WARPS warps.
GATE_TILE = 8192  # elements of a row block the gate kernel takes a program
GATE_WARPS = 4


def gate_launch(num_heads: int, head_dim: int) -> dict:
    """The gate kernel's tile and warps: whole rows, about GATE_TILE elements (BLOCK_M rows of BLOCK_H padded
    heads of BLOCK_D padded channels)."""
    block_h, block_d = next_pow2(num_heads), next_pow2(head_dim)
    return dict(BLOCK_M=max(1, GATE_TILE // (block_h * block_d)), BLOCK_H=block_h, BLOCK_D=block_d,
                HEAD_DIM=head_dim, num_warps=GATE_WARPS)
