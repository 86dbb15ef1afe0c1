"""The kernels each operation's call enqueues on the GPU, a forward and a training step at its seed shape in bfloat16,
counted by torch.profiler (`evofuse._timing.kernel_launches`, memory copies and fills included): a regression in the
lean call path (an extra pass, copy, cast or fill) changes a count; a failure names eager PyTorch's own counts (the
module with impl="torch") beside it."""

import pytest
import torch

from evofuse._timing import kernel_launches, kernel_names, training_step
from evofuse.suite import find_case, make_inputs, make_module

pytestmark = pytest.mark.gpu

# case: (forward, training step) kernels with torch 2.11 and triton 3.6; a change here is a change of the call path, to
# be explained in its commit. (cuBLAS's split-K reductions, which it adds on one card and not on another, are not
# counted.)
LAUNCHES = {
    "opm-seed": (11, 43),
    "att-seed": (9, 37),
    "pwa-seed": (8, 33),
    "tri-seed": (11, 38),
    "trimul-seed": (4, 26),
    "col-seed": (9, 30),
    "trans-seed": (3, 13),
}


def _calls(case, impl, weights=torch.bfloat16):
    """The case's module forward without a gradient, and its training step, as calls."""
    mod = make_module(case, seed=0, impl=impl).cuda().to(weights)
    inputs = make_inputs(case, "cuda", torch.bfloat16, seed=1, fully_masked=False)

    def forward():
        with torch.no_grad():
            mod(*inputs)
    leaves = [*mod.parameters(), *(t.requires_grad_() for t in inputs[:-1])]
    return forward, training_step(lambda: mod(*inputs), leaves)


def _counts(case, impl, weights=torch.bfloat16):
    return tuple(kernel_launches(call) for call in _calls(case, impl, weights))


@pytest.mark.parametrize("name", list(LAUNCHES))
def test_kernel_launches(name):
    case = find_case(name)
    got = _counts(case, "triton")
    assert got == LAUNCHES[name], (f"{name}: (forward, training step) {got}, expected {LAUNCHES[name]} (eager "
                                   f"PyTorch's {_counts(case, 'torch')}); the training step's kernels: "
                                   f"{kernel_names(_calls(case, 'triton')[1])}")


@pytest.mark.parametrize("name", [*LAUNCHES, "gcol-seed"])
def test_float32_weights_cost_one_cast(name):
    """float32 parameters on a bfloat16 input (the models' weights under autocast) are cast together: at most two
    kernels more than bfloat16 parameters in a forward (their cat and one cast) and four in a training step (and the
    gradients' cat and cast back), however many parameters the module has."""
    case = find_case(name)
    same, mixed = _counts(case, "triton"), _counts(case, "triton", torch.float32)
    assert mixed[0] - same[0] <= 2 and mixed[1] - same[1] <= 4, (name, same, mixed)
