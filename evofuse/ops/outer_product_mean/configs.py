"""The Outer Product Mean kernel's tiles, as data, and the predicate that keeps those that fit a call.

A config names PASSES (passes over the channels p), BLOCK_I x BLOCK_J residues a tile, BLOCK_S MSA rows
a step and BLOCK_R of out_proj's rows an epilogue step. The predicate keeps a config when its products
are legal tensor-core shapes (each side >= 16), its float32 accumulator of (BLOCK_I * C / PASSES) x
(BLOCK_J * C) fits its warps' registers, and its operand tiles fit shared memory for the operand width.
"""

from __future__ import annotations

import functools

import triton

from ..._runtime import autotune_enabled, interpreting


def _configs(tiles) -> list[triton.Config]:
    return [triton.Config({"PASSES_PER_32": passes, "BLOCK_I": bi, "BLOCK_J": bj, "BLOCK_S": bs, "BLOCK_R": br,
                           "GROUP_I": 8}, num_warps=warps, num_stages=stages)
            for passes, bi, bj, bs, br, warps, stages in tiles]


# By operand width in bytes: (PASSES per 32 channels p, BLOCK_I, BLOCK_J, BLOCK_S, BLOCK_R, num_warps,
# num_stages). PASSES is given per 32 channels: the kernel scales it to the call's C, rounding up.
CONFIGS = {
    2: _configs(((2, 8, 8, 64, 64, 8, 2), (4, 16, 8, 32, 64, 8, 3), (4, 8, 8, 32, 32, 8, 3),
                 (1, 4, 8, 32, 32, 8, 2), (1, 8, 16, 32, 32, 8, 2), (1, 16, 32, 32, 32, 8, 2), (8, 16, 4, 32, 32, 8, 2))),
    # float32 inputs: float16 halves, three products for each of the two contractions
    4: _configs(((4, 8, 8, 16, 32, 8, 2), (2, 8, 4, 16, 32, 4, 2), (8, 16, 4, 16, 32, 8, 2), (1, 8, 8, 16, 32, 4, 2))),
}
INTERPRETER_CONFIG = triton.Config({"PASSES_PER_32": 2, "BLOCK_I": 4, "BLOCK_J": 4, "BLOCK_S": 16, "BLOCK_R": 16,
                                    "GROUP_I": 2}, num_warps=1, num_stages=1)

ACCUMULATOR_PER_THREAD = 128  # float32 registers of the first product's accumulator a thread holds (no spills)
SHARED_LIMIT = 220 * 1024  # bytes of shared memory a program may take (sm_90 allows 227 KB; a margin)


def passes(config: triton.Config, C: int) -> int:
    """The config's passes over C channels p (as the kernel derives them)."""
    return -(-config.kwargs["PASSES_PER_32"] * C // 32)


def fits(config: triton.Config, C: int, element_size: int) -> bool:
    kw = config.kwargs
    p = passes(config, C)
    if C % p:
        return False
    rows, cols = kw["BLOCK_I"] * C // p, kw["BLOCK_J"] * C
    pairs = kw["BLOCK_I"] * kw["BLOCK_J"]
    if min(rows, cols, pairs, kw["BLOCK_R"], C * C // p) < 16:
        return False
    if rows * cols > ACCUMULATOR_PER_THREAD * 32 * config.num_warps:
        return False
    # the main loop's 16-bit operand stages and the float32 accumulator's rearrangement: a lower bound of what
    # the compiler asks for on sm_90, so the table holds only configs that compiled there (a config this passes
    # and the compiler refuses is skipped by the autotuner, not by the first-config path)
    stages = (rows + cols) * kw["BLOCK_S"] * 2 * max(1, config.num_stages)
    shared = stages + rows * cols * 4
    return shared <= SHARED_LIMIT


def candidates(C: int, element_size: int) -> list[triton.Config]:
    """The configs tried for hidden_dim C and inputs of element_size bytes (the first where autotuning is
    off; the interpreter's alone under Triton's interpreter)."""
    if interpreting():
        return [INTERPRETER_CONFIG]
    if element_size not in CONFIGS:
        return []
    kept = [cfg for cfg in CONFIGS[element_size] if fits(cfg, C, element_size)]
    return kept if autotune_enabled() else kept[:1]


def prune(configs, named_args, **kwargs):
    return candidates(kwargs["C"], 4 if kwargs["SCALED"] else 2)  # the table of the inputs' width


ALL_CONFIGS = [cfg for table in CONFIGS.values() for cfg in table]  # what the autotuner is built with


def workspace_slot(R: int, C: int, element_size: int) -> int:
    """float32 elements of a program's workspace: the most that any candidate config needs."""
    return _workspace_slot(R, C, element_size, interpreting(), autotune_enabled())


@functools.lru_cache(maxsize=256)
def _workspace_slot(R: int, C: int, element_size: int, *environment) -> int:
    slots = [-(-R // cfg.kwargs["BLOCK_R"]) * cfg.kwargs["BLOCK_R"] * cfg.kwargs["BLOCK_I"] * cfg.kwargs["BLOCK_J"]
             for cfg in candidates(C, element_size) if passes(cfg, C) > 1]
    return max(slots, default=0)


# The backward's dX kernel: (BLOCK_I, BLOCK_J, BLOCK_K, BLOCK_R, num_warps, num_stages)
DX_CONFIGS = [triton.Config({"BLOCK_I": bi, "BLOCK_J": bj, "BLOCK_K": bk, "BLOCK_R": br}, num_warps=warps,
                            num_stages=stages)
              for bi, bj, bk, br, warps, stages in ((8, 8, 128, 64, 8, 3), (4, 16, 128, 32, 4, 3), (8, 8, 64, 64, 4, 3),
                                                    (4, 4, 64, 32, 4, 2))]
DX_INTERPRETER_CONFIG = triton.Config({"BLOCK_I": 4, "BLOCK_J": 4, "BLOCK_K": 16, "BLOCK_R": 16}, num_warps=1,
                                      num_stages=1)


def dx_candidates(C: int) -> list[triton.Config]:
    """The dX kernel's configs for hidden_dim C (a block of (p q) no wider than C*C)."""
    if interpreting():
        return [DX_INTERPRETER_CONFIG]
    kept = [cfg for cfg in DX_CONFIGS if cfg.kwargs["BLOCK_K"] <= C * C] or DX_CONFIGS[-1:]
    return kept if autotune_enabled() else kept[:1]


def dx_prune(configs, named_args, **kwargs):
    return dx_candidates(kwargs["C"])
