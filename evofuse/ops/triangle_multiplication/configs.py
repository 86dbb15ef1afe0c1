"""Triangle multiplication's output kernel's tiles: the shared LayerNorm + gated linear kernel's (`layer_norm_glu`),
BLOCK_M pairs and BLOCK_N output channels a program, the product's and then the pair's channels BLOCK_D a step."""

from __future__ import annotations

from .. import layer_norm_glu


def prune_output(configs, named_args, **kwargs):
    """One weight tile beside the rows' in each of its two loops."""
    return layer_norm_glu.candidates(named_args["M"], max(named_args["C"], named_args["CZ"]), named_args["CZ"], 1,
                                     named_args["z_ptr"].element_size())
