"""Where a replacement runs the module it replaced: on calls so small that both are bound by the host, and the
model's own module costs less of it. Each operation's crossover is the least size at which the fused call was
measured faster than the models' modules, inside the models, with and without gradients (`python3
benchmarks/models.py --never-slower`; the data in docs/PERFORMANCE.md, "Where the patched models run their own
modules"). A call captured into a CUDA graph or traced by torch.compile pays no host time of its own when it runs,
so it always takes the fused kernels."""

from __future__ import annotations

import torch

# operation: (the least size of a call without gradients that runs fused, of one with them); a call's size is its rows:
# the pair's (B N N) for the triangle operations, the input's for a transition; for attention with pair bias, its
# scores a head (rows of the single representation times the N keys)
CROSSOVERS: dict[str, tuple[int, int]] = {
    "triangle_multiplication": (256 * 256, 384 * 384),
    "triangle_attention": (256 * 256, 384 * 384),
    "attention_pair_bias": (0, 1024 * 1024),
    # (rows: the single representation's, a small MSA's; docs/PERFORMANCE.md, "Transitions beside the models' own")
    "transition": (16384, 16384),
}


def rows_of(x: torch.Tensor) -> int:
    """The rows of x (*, c): a transition's size, and for a pair (*, N, N, c) a triangle operation's (B N N)."""
    return x.numel() // max(x.shape[-1], 1)


def scores(a: torch.Tensor) -> int:
    """A single representation a (*, N, c)'s attention scores a head: its rows times N, the size attention with pair
    bias's crossover is set in."""
    return a.numel() // max(a.shape[-1], 1) * a.shape[-2]


class RunsOriginal:
    """What a replacement that keeps the module it replaced mixes in: `OPERATION` names its crossover, `keep(original)`
    holds the original outside the module tree (its children are the replacement's own, so it shares their
    parameters, in a deep copy too), `small(size, x)` says whether a call runs it, and `original(...)` calls it."""

    OPERATION = ""

    def keep(self, original: torch.nn.Module) -> None:
        self.__dict__["_original"] = original

    def small(self, size: int, x: torch.Tensor) -> bool:
        """Whether a call of `size` on x (a CUDA or CPU tensor) runs the original: smaller than the crossover of its
        gradient mode, neither captured into a CUDA graph nor traced."""
        if torch.compiler.is_compiling():  # (asked first: no guard on the size in a compiled graph)
            return False
        if size >= CROSSOVERS[self.OPERATION][torch.is_grad_enabled()]:
            return False
        return not (x.is_cuda and torch.cuda.is_current_stream_capturing())

    def original(self, *args, **kwargs):
        """The original module's call, in the replacement's training mode."""
        original = self.__dict__["_original"]
        original.training = self.training
        return original(*args, **kwargs)
