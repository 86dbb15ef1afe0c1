"""Triangle multiplication's output kernel's tiles: the shared LayerNorm + gated linear kernel's tables
(`layer_norm_glu`), BLOCK_M pairs and BLOCK_N output channels a program, the product's and then the pair's channels
BLOCK_D a step, and the predicate that keeps those that fit a call (one weight tile beside the rows' in each loop)."""

from __future__ import annotations

from ..._runtime import tuning_candidates
from .. import layer_norm_glu


def tables():
    return layer_norm_glu.CONFIGS + layer_norm_glu.FLOAT32_CONFIGS


def prune_output(configs, named_args, **kwargs):
    element_size = named_args["z_ptr"].element_size()
    table = layer_norm_glu.FLOAT32_CONFIGS if element_size == 4 else layer_norm_glu.CONFIGS
    widest = max(named_args["C"], named_args["CZ"])
    return tuning_candidates(table, lambda c: layer_norm_glu.fits(c, named_args["M"], widest, named_args["CZ"], 1,
                                                                  element_size), layer_norm_glu.INTERPRETER_CONFIG)
