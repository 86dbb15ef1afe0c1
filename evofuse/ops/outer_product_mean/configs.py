"""The Outer Product Mean kernels' tiles, as data, and the predicates that keep those that fit a call.

The float32 route's fused contraction: a config names PASSES (passes over the channels p), BLOCK_I x BLOCK_J
residues a tile, BLOCK_S MSA rows a step, BLOCK_R of out_proj's rows an epilogue step and W_STAGES, the epilogue
loop's pipeline depth. The predicate keeps a config when its products are legal tensor-core shapes (each side
>= 16), its float32 accumulator of (BLOCK_I * C / PASSES) x (BLOCK_J * C) fits its warps' registers, and its
shared memory, as the sm_90 compiler lays it out, fits the multiprocessor. Then the 16-bit route's product with
out_proj's weight, and the backward's dX and dW kernels.
"""

from __future__ import annotations

import functools

import triton

from ..._runtime import SHARED_BYTES, autotune_enabled, interpreting, tuning_candidates


def _configs(tiles) -> list[triton.Config]:
    return [triton.Config({"PASSES_PER_32": passes, "BLOCK_I": bi, "BLOCK_J": bj, "BLOCK_S": bs, "BLOCK_R": br,
                           "W_STAGES": w_stages, "GROUP_I": 8}, num_warps=warps, num_stages=stages)
            for passes, bi, bj, bs, br, w_stages, warps, stages in tiles]


# By products a contraction takes (TERMS: 1 for the float16 high halves alone at the "fast" precision, 3 for both
# halves at the default precision): (PASSES per 32 channels p, BLOCK_I, BLOCK_J, BLOCK_S, BLOCK_R, W_STAGES,
# num_warps, num_stages). PASSES is given per 32 channels: the kernel scales it to the call's C, rounding up.
CONFIGS = {
    1: _configs(((2, 8, 8, 64, 64, 1, 8, 3), (2, 8, 8, 64, 64, 2, 8, 2), (4, 16, 8, 64, 64, 1, 8, 3),
                 (2, 8, 8, 32, 64, 1, 8, 4), (4, 8, 8, 32, 32, 1, 8, 3), (1, 4, 8, 32, 32, 1, 8, 2),
                 (1, 8, 16, 32, 32, 1, 8, 2), (8, 16, 4, 32, 32, 1, 8, 2))),
    3: _configs(((4, 16, 8, 32, 64, 1, 8, 3), (4, 8, 8, 64, 64, 1, 8, 3), (4, 8, 8, 32, 64, 1, 8, 3),
                 (4, 8, 8, 32, 64, 1, 4, 3), (8, 16, 4, 32, 64, 1, 8, 3), (1, 8, 8, 32, 32, 1, 4, 2))),
}
INTERPRETER_CONFIG = triton.Config({"PASSES_PER_32": 2, "BLOCK_I": 4, "BLOCK_J": 4, "BLOCK_S": 16, "BLOCK_R": 16,
                                    "W_STAGES": 1, "GROUP_I": 2}, num_warps=1, num_stages=1)

ACCUMULATOR_PER_THREAD = 128  # float32 registers of the first product's accumulator a thread holds (no spills)
SHARED_MARGIN = 24 * 1024  # the most the compiler took beyond the model below (the tables' configs, c = 16, 32, 64)


def passes(config: triton.Config, C: int) -> int:
    """The config's passes over C channels p (as the kernel derives them)."""
    return -(-config.kwargs["PASSES_PER_32"] * C // 32)


def shared_bytes(config: triton.Config, C: int, terms: int) -> int:
    """Shared memory of the kernel at `config`, as the sm_90 compiler lays it out (Triton 3.6, checked against
    its compilations to within SHARED_MARGIN): the largest of the main loop's operand stages, the float32
    accumulator's rearrangement and the epilogue's operands (x's halves, out_proj's blocks in W_STAGES
    stages), which are not live together."""
    kw = config.kwargs
    p = passes(config, C)
    rows, cols, pairs = kw["BLOCK_I"] * C // p, kw["BLOCK_J"] * C, kw["BLOCK_I"] * kw["BLOCK_J"]
    halves = 2 if terms == 3 else 1
    main = (rows + cols) * kw["BLOCK_S"] * 2 * max(1, config.num_stages)
    epilogue = halves * (pairs + kw["W_STAGES"] * kw["BLOCK_R"]) * (C * C // p) * 2
    return max(main, rows * cols * 4, epilogue)


def fits(config: triton.Config, C: int, terms: int) -> bool:
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
    return shared_bytes(config, C, terms) + SHARED_MARGIN <= SHARED_BYTES


def candidates(C: int, terms: int) -> list[triton.Config]:
    """The configs tried for hidden_dim C and `terms` products a contraction (the first where autotuning is
    off; the interpreter's alone under Triton's interpreter)."""
    return tuning_candidates(CONFIGS[terms], lambda cfg: fits(cfg, C, terms), INTERPRETER_CONFIG, fallback=False)


def prune(configs, named_args, **kwargs):
    return candidates(kwargs["C"], kwargs["TERMS"])


ALL_CONFIGS = [cfg for table in CONFIGS.values() for cfg in table]  # what the autotuner is built with


def workspace_slot(R: int, C: int, terms: int) -> int:
    """float32 elements of a program's workspace: the most that any candidate config needs."""
    return _workspace_slot(R, C, terms, interpreting(), autotune_enabled())


@functools.lru_cache(maxsize=256)
def _workspace_slot(R: int, C: int, terms: int, *environment) -> int:
    slots = [-(-R // cfg.kwargs["BLOCK_R"]) * cfg.kwargs["BLOCK_R"] * cfg.kwargs["BLOCK_I"] * cfg.kwargs["BLOCK_J"]
             for cfg in candidates(C, terms) if passes(cfg, C) > 1]
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
    return tuning_candidates(DX_CONFIGS, lambda cfg: cfg.kwargs["BLOCK_K"] <= C * C, DX_INTERPRETER_CONFIG)


def dx_prune(configs, named_args, **kwargs):
    return dx_candidates(kwargs["C"])


# The backward's dW kernel: (BLOCK_R, BLOCK_K, BLOCK_P, num_warps, num_stages)
DW_CONFIGS = [triton.Config({"BLOCK_R": br, "BLOCK_K": bk, "BLOCK_P": bp}, num_warps=warps, num_stages=stages)
              for br, bk, bp, warps, stages in ((128, 128, 64, 8, 3), (64, 128, 64, 4, 3), (128, 64, 64, 4, 3),
                                                (128, 128, 32, 8, 4), (64, 64, 64, 4, 3), (32, 32, 32, 4, 2))]
DW_INTERPRETER_CONFIG = triton.Config({"BLOCK_R": 16, "BLOCK_K": 16, "BLOCK_P": 16}, num_warps=1, num_stages=1)


def dw_candidates(C: int, element_bytes: int) -> list[triton.Config]:
    """The dW kernel's configs for hidden_dim C and operands of `element_bytes`: a block of (p q) no wider than
    C*C, the [BLOCK_K, BLOCK_R] float32 accumulator within ACCUMULATOR_PER_THREAD registers a thread, and the
    pipelined operand tiles within shared memory."""
    def fit(cfg):
        kw = cfg.kwargs
        operands = cfg.num_stages * kw["BLOCK_P"] * (kw["BLOCK_K"] + kw["BLOCK_R"]) * element_bytes
        return (kw["BLOCK_K"] <= C * C and kw["BLOCK_K"] * kw["BLOCK_R"] <= ACCUMULATOR_PER_THREAD * 32 * cfg.num_warps
                and operands + SHARED_MARGIN <= SHARED_BYTES)

    return tuning_candidates(DW_CONFIGS, fit, DW_INTERPRETER_CONFIG)


def dw_prune(configs, named_args, **kwargs):
    return dw_candidates(kwargs["C"], named_args["x_ptr"].element_size())


# The 16-bit route's product of the outer products with out_proj's weight (`opm_project_kernel`): (BLOCK_I,
# BLOCK_J, BLOCK_R, BLOCK_K, num_warps, num_stages): the first five the fastest at the suite's shapes, with the
# cuBLAS products faster than the fused contraction there
PROJECT_CONFIGS = [triton.Config({"BLOCK_I": bi, "BLOCK_J": bj, "BLOCK_R": br, "BLOCK_K": bk, "GROUP_I": 8},
                                 num_warps=warps, num_stages=stages)
                   for bi, bj, br, bk, warps, stages in ((8, 16, 128, 64, 8, 3), (16, 8, 128, 64, 8, 3),
                                                         (8, 8, 128, 64, 4, 3), (16, 16, 128, 32, 8, 4),
                                                         (8, 16, 64, 64, 4, 3), (8, 8, 64, 64, 4, 3),
                                                         (4, 8, 32, 64, 4, 2))]
PROJECT_INTERPRETER_CONFIG = triton.Config({"BLOCK_I": 4, "BLOCK_J": 4, "BLOCK_R": 16, "BLOCK_K": 16, "GROUP_I": 2},
                                           num_warps=1, num_stages=1)


def project_candidates(C: int, R: int) -> list[triton.Config]:
    """The product's configs for hidden_dim C and R outputs: no block of outputs wider than R needs (at least 16
    columns, a tensor-core shape), a block of (p q) no wider than C*C, the [pairs, BLOCK_R] float32 accumulator
    within ACCUMULATOR_PER_THREAD registers a thread."""
    def fit(cfg):
        kw = cfg.kwargs
        return (kw["BLOCK_R"] <= max(16, triton.next_power_of_2(R)) and kw["BLOCK_K"] <= C * C
                and kw["BLOCK_I"] * kw["BLOCK_J"] * kw["BLOCK_R"] <= ACCUMULATOR_PER_THREAD * 32 * cfg.num_warps)

    return tuning_candidates(PROJECT_CONFIGS, fit, PROJECT_INTERPRETER_CONFIG)


def project_prune(configs, named_args, **kwargs):
    return project_candidates(kwargs["C"], named_args["R"])
