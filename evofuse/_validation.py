"""Input validation shared by the functional API and the modules: every error names the argument at fault."""

from __future__ import annotations

import torch

_REAL_FLOATS = frozenset((torch.float16, torch.bfloat16, torch.float32, torch.float64))


def _require_tensor(name: str, t: object) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    return t


def _require_float(name: str, t: torch.Tensor) -> None:
    if t.dtype not in _REAL_FLOATS:
        raise TypeError(f"{name} must be a real floating tensor (float16, bfloat16, float32 or float64), got {t.dtype}")


def check_floating(name: str, t: object) -> torch.Tensor:
    """`t` must be a real floating tensor."""
    _require_float(name, _require_tensor(name, t))
    return t


def check_msa(msa_repr: object) -> torch.Tensor:
    """msa_repr must be a real floating tensor of rank 4 (B, S, N, D) once its leading dimensions are folded."""
    t = _require_tensor("msa_repr", msa_repr)
    _require_float("msa_repr", t)
    if t.dim() != 4:
        raise ValueError(f"msa_repr must have shape (..., S, N, D), got {tuple(t.shape)} (rank {t.dim()})")
    return t


def check_width(msa_repr: torch.Tensor, width: int, source: str) -> tuple[int, int, int]:
    """msa_repr's last dimension must be `width`, the size of the parameter `source`; returns (B, S, N)."""
    if msa_repr.shape[-1] != width:
        raise ValueError(f"msa_repr must have shape (B, S, N, {width}) ({width}: the size of {source}): last dimension "
                         f"is {msa_repr.shape[-1]}, expected {width}")
    return msa_repr.shape[0], msa_repr.shape[1], msa_repr.shape[2]


def _check_mask(name: str, mask: object, letters: str, shape: tuple[int, ...], device: torch.device) -> None:
    """A mask must be None or a real tensor (bool, integer or floating) of `shape` (named by `letters`) on `device`."""
    if mask is None:
        return
    t = _require_tensor(name, mask)
    if t.is_complex():
        raise TypeError(f"{name} must be bool, integer or real floating, got {t.dtype}")
    if tuple(t.shape) != shape:
        raise ValueError(f"{name} must have shape ({letters}) = {shape} to match msa_repr, got {tuple(t.shape)}")
    if t.device != device:
        raise ValueError(f"{name} is on {t.device} but msa_repr is on {device}: all tensors must be on one device")


def check_mask(msa_mask: object, B: int, S: int, N: int, device: torch.device) -> None:
    """msa_mask must be None or a real (B, S, N) tensor (bool, integer or floating) on `device`."""
    _check_mask("msa_mask", msa_mask, "B, S, N", (B, S, N), device)


def check_pair(pair_repr: object, B: int, N: int, pair_dim: int, source: str, device: torch.device) -> None:
    """pair_repr must be a real floating (B, N, N, pair_dim) tensor on `device` (pair_dim: the size of the
    parameter `source`)."""
    t = _require_tensor("pair_repr", pair_repr)
    _require_float("pair_repr", t)
    expected = (B, N, N, pair_dim)
    what = f"pair_repr must have shape (B, N, N, {pair_dim}) = {expected} (B, N: msa_repr's; {pair_dim}: {source}'s)"
    if t.dim() != 4:
        raise ValueError(f"{what}, got {tuple(t.shape)} (rank {t.dim()})")
    if tuple(t.shape) != expected:
        raise ValueError(f"{what}, got {tuple(t.shape)}")
    if t.device != device:
        raise ValueError(f"pair_repr is on {t.device} but msa_repr is on {device}: all tensors must be on one device")


def check_pair_mask(pair_mask: object, B: int, N: int, device: torch.device) -> None:
    """pair_mask must be None or a real (B, N, N) tensor (bool, integer or floating) on `device`."""
    _check_mask("pair_mask", pair_mask, "B, N, N", (B, N, N), device)


def check_params(device: torch.device, params: dict[str, torch.Tensor | None], optional: tuple[str, ...] = (),
                 source: str = "msa_repr") -> None:
    """Every parameter must be a real floating tensor on the device of the input `source`; those named in `optional`
    may be None. (One combined test of all of them on the hot path; the specific error only once it fails.)"""
    params = {name: p for name, p in params.items() if p is not None or name not in optional}
    try:
        tensors = params.values()
        if {p.device for p in tensors} == {device} and _REAL_FLOATS.issuperset([p.dtype for p in tensors]):
            return
    except AttributeError:  # not a tensor: named below
        pass
    for name, p in params.items():
        t = _require_tensor(name, p)
        _require_float(name, t)
        if t.device != device:
            raise ValueError(f"{name} is on {t.device} but {source} is on {device}: all tensors must be on one device")


def _factor(token: str) -> tuple[int, str]:
    """A shape letter with its factor: "2c" -> (2, "c"), "D" -> (1, "D")."""
    letter = token.lstrip("0123456789")
    return int(token[:len(token) - len(letter)] or 1), letter


_CHECKED: dict = {}  # (shapes, the parameters' shapes, given sizes) -> the letters' sizes, of the checks that passed
CHECKED_MAX = 4096  # signatures kept; past them every call is checked anew


def check_shapes(params: dict[str, torch.Tensor | None], shapes: dict[str, str],
                 sizes: dict[str, int] | None = None) -> dict[str, int]:
    """Each parameter named in `shapes` (an optional one left None passes) must have the shape its letters name:
    "H D" is rank 2, sizes H and D; "2c cz" twice c by cz. Every rank is checked first; then each letter takes its
    size from the first parameter that has it (or from `sizes`) and every later one must agree, the error naming
    the parameter and those its letters came from. Returns every letter's size. A signature (the shapes' letters, the
    parameters' shapes and `sizes`) that passed once is not parsed again: a call's host time counts at small sizes."""
    key = (tuple(shapes.items()), tuple(None if params[name] is None else params[name].shape for name in shapes),
           None if sizes is None else tuple(sizes.items()))
    known = _CHECKED.get(key)
    if known is not None:
        return dict(known)
    checked = _check_shapes(params, shapes, sizes)
    if len(_CHECKED) < CHECKED_MAX:
        _CHECKED[key] = checked
    return dict(checked)


def _check_shapes(params: dict[str, torch.Tensor | None], shapes: dict[str, str],
                  sizes: dict[str, int] | None) -> dict[str, int]:
    for name, letters in shapes.items():
        if params[name] is not None and params[name].dim() != len(letters.split()):
            raise ValueError(f"{name} must have rank {len(letters.split())} ({letters}), got shape "
                             f"{tuple(params[name].shape)}")
    sizes, source = dict(sizes or {}), {}
    for name, letters in shapes.items():
        p = params[name]
        if p is None:
            continue
        tokens = [_factor(token) for token in letters.split()]
        for (factor, letter), size in zip(tokens, p.shape):
            if letter not in sizes and size % factor == 0:
                sizes[letter], source[letter] = size // factor, name
        expected = tuple(factor * sizes[letter] if letter in sizes else None for factor, letter in tokens)
        if tuple(p.shape) != expected:
            given = ", ".join(f"{letter}: {source[letter]}'s" for _, letter in tokens
                              if source.get(letter, name) != name)
            raise ValueError(f"{name} must have shape ({letters}) = {expected}" + (f" ({given})" if given else "")
                             + f", got {tuple(p.shape)}")
    return sizes


def check_pair_input(pair_repr: object, pair_mask: object) -> torch.Tensor:
    """The pair stack's input: pair_repr a real floating (..., N, N, c) tensor, pair_mask None or a real tensor of its
    shape but the last, on its device."""
    if not isinstance(pair_repr, torch.Tensor) or pair_repr.dim() < 3 or pair_repr.shape[-3] != pair_repr.shape[-2]:
        shape = tuple(pair_repr.shape) if isinstance(pair_repr, torch.Tensor) else type(pair_repr).__name__
        raise (ValueError if isinstance(pair_repr, torch.Tensor) else TypeError)(
            f"pair_repr must be a tensor of shape (..., N, N, c), got {shape}")
    check_floating("pair_repr", pair_repr)
    if pair_mask is not None:
        mask = _require_tensor("pair_mask", pair_mask)
        if mask.is_complex():
            raise TypeError(f"pair_mask must be bool, integer or real floating, got {mask.dtype}")
        if mask.shape != pair_repr.shape[:-1]:
            raise ValueError(f"pair_mask must have shape {tuple(pair_repr.shape[:-1])} (pair_repr's but its last), "
                             f"got {tuple(mask.shape)}")
        if mask.device != pair_repr.device:
            raise ValueError(f"pair_mask is on {mask.device} but pair_repr is on {pair_repr.device}: all tensors "
                             "must be on one device")
    return pair_repr


def check_rows_input(x: object, mask: object, name: str = "x") -> torch.Tensor:
    """A row-wise operation's input: x a real floating (..., D) tensor of rank >= 1, mask None or a real tensor of its
    shape but the last, on its device."""
    t = check_floating(name, x)
    if t.dim() < 1:
        raise ValueError(f"{name} must have shape (..., D), got a scalar")
    if mask is not None:
        m = _require_tensor("mask", mask)
        if m.is_complex():
            raise TypeError(f"mask must be bool, integer or real floating, got {m.dtype}")
        if m.shape != t.shape[:-1]:
            raise ValueError(f"mask must have shape {tuple(t.shape[:-1])} ({name}'s but its last), got {tuple(m.shape)}")
        if m.device != t.device:
            raise ValueError(f"mask is on {m.device} but {name} is on {t.device}: all tensors must be on one device")
    return t
