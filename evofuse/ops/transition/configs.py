"""The transition's kernels' tiles, as data, and the predicate that keeps those that fit a call.

BLOCK_M rows and BLOCK_N hidden channels a program, the reduced channels BLOCK_D a step (the input's in the forward,
the output's in the backward); a tile is kept when it is no larger than the call needs and its pipelined operand tiles
fit shared memory.
"""

from __future__ import annotations

import triton

from ..._runtime import next_pow2, tuning_candidates


def _configs(tiles) -> list[triton.Config]:
    return [triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_D": bd}, num_warps=warps, num_stages=stages)
            for bm, bn, bd, warps, stages in tiles]


# (BLOCK_M, BLOCK_N, BLOCK_D, num_warps, num_stages); the first that fits is the default where autotuning is off
CONFIGS = _configs(((128, 64, 64, 4, 3), (128, 128, 64, 8, 3), (64, 128, 64, 4, 3), (64, 64, 64, 4, 3),
                    (128, 128, 32, 8, 4), (64, 64, 32, 4, 2), (32, 64, 32, 4, 2), (16, 32, 32, 4, 2)))
FLOAT32_CONFIGS = _configs(((64, 64, 32, 4, 3), (128, 64, 32, 8, 3), (64, 128, 32, 8, 3), (32, 64, 32, 4, 2),
                            (16, 32, 32, 4, 2)))
INTERPRETER_CONFIG = triton.Config({"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_D": 16}, num_warps=1, num_stages=1)
SHARED_LIMIT = 200 * 1024  # bytes of shared memory a config's operand tiles may take (sm_90: 227 KB)


def fits(config: triton.Config, M: int, D: int, H: int, glu: bool, element_size: int) -> bool:
    bm, bn, bd = (config.kwargs[k] for k in ("BLOCK_M", "BLOCK_N", "BLOCK_D"))
    if bm > max(16, next_pow2(M)) or bn > max(16, next_pow2(H)) or bd > max(16, next_pow2(D)):
        return False
    per_stage = (bm * bd + (2 if glu else 1) * bd * bn) * element_size
    return per_stage * max(1, config.num_stages) <= SHARED_LIMIT


def prune(configs, named_args, **kwargs):
    element_size = named_args["x_ptr"].element_size()
    table = FLOAT32_CONFIGS if element_size == 4 else CONFIGS
    return tuning_candidates(table, lambda c: fits(c, named_args["M"], named_args["D"], named_args["H"], kwargs["GLU"],
                                                   element_size), INTERPRETER_CONFIG)


def prune_backward(configs, named_args, **kwargs):
    element_size = named_args["pre_ptr"].element_size()
    table = FLOAT32_CONFIGS if element_size == 4 else CONFIGS
    return tuning_candidates(table, lambda c: fits(c, named_args["M"], named_args["C"], named_args["H"], False,
                                                   element_size), INTERPRETER_CONFIG)
