"""The gated attention core that row, triangle and column attention compose: `kernels` (Triton), `configs` (their
tiles, as data), `core` (the forward's launch and the backward's custom op), `tile` (one key tile of it, for ring
attention: imported here so that its ops register with every other op's)."""

from . import tile  # noqa: F401
