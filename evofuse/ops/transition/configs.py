"""The transition's backward kernel's tiles: the shared LayerNorm + gated linear kernel's (`layer_norm_glu`), BLOCK_M
rows and BLOCK_N hidden channels a program, the input's and then the output's channels BLOCK_D a step."""

from __future__ import annotations

from ...stages import layer_norm_glu


def prune_backward(configs, named_args, **kwargs):
    """Its remaking of a and b is the larger of its two loops: two weight tiles with SwiGLU, one with ReLU."""
    return layer_norm_glu.candidates(named_args["M"], max(named_args["D"], named_args["C"]), named_args["H"],
                                     2 if kwargs["GLU"] else 1, named_args["x_ptr"].element_size())
