"""Triangle multiplication's output kernel's tiles: the shared LayerNorm + gated linear kernel's (`layer_norm_glu`),
BLOCK_M pairs and BLOCK_N output channels a program, the product's and then the pair's channels BLOCK_D a step, or
whole rows for ROW_STEPS blocks of BLOCK_N."""

from __future__ import annotations

from ...stages import layer_norm_glu


def prune_output(configs, named_args, **kwargs):
    """One weight tile beside the rows' in each of its two loops; the whole-row tiles where a row of t and of the pair
    fits one chunk."""
    return layer_norm_glu.candidates(named_args["M"], max(named_args["C"], named_args["CZ"]), named_args["CZ"], 1,
                                     named_args["z_ptr"].element_size(), whole_rows=True)
