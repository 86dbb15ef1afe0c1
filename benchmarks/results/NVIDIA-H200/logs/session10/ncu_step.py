"""Session 10: one att-af2-main bf16 training step at the autotuner's backward pick (64 x 64, 4 warps, 2 stages),
forward at the first config, for Nsight Compute (no autotuning runs in the profile)."""
import os

os.environ["EVOFUSE_AUTOTUNE"] = "0"

import torch  # noqa: E402
import triton  # noqa: E402

import evofuse.ops.row_attention as ra  # noqa: E402
from evofuse.bench import training_step  # noqa: E402
from evofuse.suite import SUITE, make_inputs, make_module  # noqa: E402

ra._bwd_configs = lambda: [triton.Config({"BLOCK_M": 64, "BLOCK_N": 64}, num_warps=4, num_stages=2)]
case = next(c for c in SUITE if c.name == "att-af2-main")
mod = make_module(case).cuda().to(torch.bfloat16)
inputs = [t.requires_grad_(True) if t.dim() == 4 else t for t in make_inputs(case, "cuda", torch.bfloat16, fully_masked=False)]
step = training_step(lambda: mod(*inputs))
step()
torch.cuda.synchronize()
