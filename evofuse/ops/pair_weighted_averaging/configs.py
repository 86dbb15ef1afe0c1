"""Pair-weighted averaging's kernel tiles, as data, and the predicates that keep those that fit a call.

The weighted sum (the backward's dv): BLOCK_I residues i and BLOCK_J residues j a tile; COLS (MSA row, channel)
columns, COLS // BLOCK_C rows s of BLOCK_C channels (the head width rounded up to a power of two, set by the
launcher: no padding columns for heads of 8 channels, as AF3's).
"""

from __future__ import annotations

import triton

from ..._runtime import SHARED_BYTES, next_pow2, tuning_candidates

# (the last two: the fastest for the weighted sum's dv alone at the suite's shapes)
CONFIGS = [
    triton.Config({"BLOCK_I": bi, "BLOCK_J": bj, "COLS": cols}, num_warps=warps, num_stages=stages)
    for bi, bj, cols, warps, stages in ((64, 64, 128, 4, 3), (128, 64, 128, 8, 3), (64, 32, 256, 8, 3),
                                        (128, 32, 256, 8, 2), (64, 64, 64, 4, 3), (32, 32, 64, 4, 2),
                                        (128, 64, 64, 4, 3), (128, 32, 128, 4, 3))
]
INTERPRETER_CONFIG = triton.Config({"BLOCK_I": 16, "BLOCK_J": 16, "COLS": 32}, num_warps=1, num_stages=1)


def fits(config: triton.Config, BLOCK_C: int, element_size: int) -> bool:
    """Columns that hold whole heads, an accumulator the register file holds for the operand width, and operand
    stages ([BLOCK_I, BLOCK_J] x [BLOCK_J, COLS]) that fit shared memory, as the compiler counts them on sm_90."""
    kw = config.kwargs
    bi, bj, cols = kw["BLOCK_I"], kw["BLOCK_J"], kw["COLS"]
    limit = 128 * 256 // (2 if element_size == 4 else 1)
    stage = (bi * bj + bj * cols) * element_size
    return cols >= BLOCK_C and bi * cols <= limit and stage * max(1, config.num_stages) <= SHARED_BYTES


def candidates(BLOCK_C: int, element_size: int) -> list[triton.Config]:
    """The configs tried for a call (the first fitting where autotuning is off; the interpreter's alone under
    Triton's interpreter)."""
    cols = max(INTERPRETER_CONFIG.kwargs["COLS"], BLOCK_C)  # (the interpreter's: one row s of the widest heads too)
    interpreter = triton.Config({**INTERPRETER_CONFIG.kwargs, "COLS": cols}, num_warps=1, num_stages=1)
    return tuning_candidates(CONFIGS, lambda cfg: fits(cfg, BLOCK_C, element_size), interpreter)


def prune(configs, named_args, **kwargs):
    return candidates(kwargs["BLOCK_C"], named_args["v_ptr"].element_size())


# The gated projection's backward: BLOCK_S MSA rows of one (b, i) a step, BLOCK_K (head, channel) columns a
# program, the output channels at once (the launcher's BLOCK_O). proj_o's weight gradient is summed by the kernel
# (two programs a multiprocessor along the rows), which beat a separate cuBLAS product at every suite shape; the
# kernel reads u head major, so narrow heads favour many rows and few columns, wide heads the reverse
PROJECTION_CONFIGS = [
    triton.Config({"BLOCK_S": bs, "BLOCK_K": bk}, num_warps=warps, num_stages=stages)
    for bs, bk, warps, stages in ((32, 128, 4, 2), (64, 64, 4, 3), (32, 64, 4, 3), (16, 256, 4, 2),
                                  (16, 128, 4, 2), (32, 256, 8, 2), (16, 64, 4, 3), (64, 128, 8, 2),
                                  (32, 128, 4, 3), (128, 32, 4, 3), (64, 64, 4, 2))  # (the last: where none fits)
]
PROJECTION_INTERPRETER_CONFIG = triton.Config({"BLOCK_S": 16, "BLOCK_K": 16}, num_warps=1, num_stages=1)


def projection_fits(config: triton.Config, HC: int, BLOCK_O: int, element_size: int) -> bool:
    """No wider a step than the columns (padded to 16, the product's least), at most 16K float32 accumulator
    elements a program for the step's product and the output's gradient each, at most 64 a thread for the
    program's sum of proj_o's weight gradient [BLOCK_O, BLOCK_K], and shared memory within sm_90's: operand
    stages of [BLOCK_S, BLOCK_O] + [BLOCK_O, BLOCK_K] + [BLOCK_S, BLOCK_K] elements, three more [BLOCK_S, BLOCK_O]
    and one [BLOCK_O, BLOCK_K] (proj_g's weight), and PROJECTION_SHARED_SLACK bytes. A model that bounds the sm_90
    compilers' counts from above: Triton 3.9's for every config at 64 and 128 output channels in bf16 and float32,
    and Triton 3.6's for the float32 configs nearest the limit (tests/test_compile_sm90.py compiles every one)."""
    kw = config.kwargs
    bs, bk = kw["BLOCK_S"], kw["BLOCK_K"]
    stages = max(1, config.num_stages)
    shared = (stages * (bs * BLOCK_O + BLOCK_O * bk + bs * bk) + 3 * bs * BLOCK_O + BLOCK_O * bk) * element_size
    return (bk <= max(16, next_pow2(HC)) and bs * max(bk, BLOCK_O) <= 16384
            and BLOCK_O * bk <= 64 * 32 * config.num_warps and shared + PROJECTION_SHARED_SLACK <= SHARED_BYTES)


PROJECTION_SHARED_SLACK = 1024  # bytes the compiler took beyond the element counts (246272 against 245760 counted)


def projection_candidates(HC: int, BLOCK_O: int, element_size: int) -> list[triton.Config]:
    """The gated projection backward's configs tried for a call (the first fitting where autotuning is off)."""
    return tuning_candidates(PROJECTION_CONFIGS, lambda cfg: projection_fits(cfg, HC, BLOCK_O, element_size),
                             PROJECTION_INTERPRETER_CONFIG)


def prune_projection(configs, named_args, **kwargs):
    return projection_candidates(named_args["HC"], kwargs["BLOCK_O"], named_args["do_ptr"].element_size())
