"""The transition's backward kernel's tiles: the shared LayerNorm + gated linear kernel's tables (`layer_norm_glu`),
BLOCK_M rows and BLOCK_N hidden channels a program, the input's and then the output's channels BLOCK_D a step, and the
predicate that keeps those that fit a call."""

from __future__ import annotations

from ..._runtime import tuning_candidates
from .. import layer_norm_glu


def tables():
    return layer_norm_glu.CONFIGS + layer_norm_glu.FLOAT32_CONFIGS


def prune_backward(configs, named_args, **kwargs):
    element_size = named_args["x_ptr"].element_size()
    table = layer_norm_glu.FLOAT32_CONFIGS if element_size == 4 else layer_norm_glu.CONFIGS
    widest = max(named_args["D"], named_args["C"])
    operands = 2 if kwargs["GLU"] else 1  # (the pass that makes a and b again: the larger of its two loops)
    return tuning_candidates(table, lambda c: layer_norm_glu.fits(c, named_args["M"], widest, named_args["H"], operands,
                                                                  element_size), layer_norm_glu.INTERPRETER_CONFIG)
