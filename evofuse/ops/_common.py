"""Helpers shared by the Triton launchers: precision choice, autotuning, size buckets."""

from __future__ import annotations

import os

import torch
import triton

PRECISIONS = ("default", "fast")


def interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def dot_precision(dtype: torch.dtype, precision: str) -> str:
    """input_precision for tl.dot on `dtype` operands (SPEC 3).

    float32 at default precision uses 3xTF32 (error ~1e-7, meets rel <= 1e-5); "fast" uses plain TF32.
    16-bit operands ignore it (their products are exact in the fp32 accumulator).
    """
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
    if dtype == torch.float32 and precision == "default":
        return "tf32x3"
    return "tf32"


def bucket(n: int) -> int:
    """Power-of-two bucket of a size, the autotuning key (configs are not retuned per N)."""
    return 1 << max(int(n) - 1, 0).bit_length()


def tuned(kernel, configs: list[triton.Config], key: list[str], prune) -> object:
    """The autotuned kernel on a GPU; in Triton's interpreter, the first config that survives pruning."""
    if interpreting():
        return None
    return triton.autotune(configs=configs, key=key, prune_configs_by={"early_config_prune": prune})(kernel)
