"""The taped training step's host time at opm-af2-main bf16, measured warm (20 calls in a row behind ~0.1 s of queued
device work, median of 7 such runs; run 1's probe timed single calls after a synchronize, which read 2-4x slower):
the step, its forward and backward, each tape alone and by kind of step, PyTorch's and Triton's unit costs on this
host, the Gluon launch in four forms, and autograd's own cost for a Function of the step's inputs."""
import collections
import statistics
import time
import types

import torch

from evofuse.ops import _tape
from evofuse.ops import outer_product_mean_wgmma as wg
from evofuse.suite import SUITE, make_inputs, make_module

case = next(c for c in SUITE if c.name == "opm-af2-main")
mod = make_module(case).cuda().to(torch.bfloat16)
inputs = make_inputs(case, "cuda", torch.bfloat16, fully_masked=False)
inputs = [t.requires_grad_(True) if t.dim() == 4 else t for t in inputs]
leaves = list(mod.parameters()) + [t for t in inputs if t.dim() == 4]


def warm_us(fn, setup=None, n=20, reps=7):
    times = []
    for _ in range(reps):
        state = setup() if setup else None
        torch.cuda.synchronize()
        torch.cuda._sleep(200_000_000)
        start = time.perf_counter()
        for k in range(n):
            fn(state[k] if state else None)
        times.append((time.perf_counter() - start) / n)
    torch.cuda.synchronize()
    return statistics.median(times) * 1e6


def no_grads():
    for t in leaves:
        t.grad = None


def step(_):
    no_grads()
    out = mod(*inputs)
    out.backward(torch.ones_like(out))


def forwards():
    no_grads()
    outs = [mod(*inputs) for _ in range(20)]
    return [(o, torch.ones_like(o)) for o in outs]


def backward(state):
    no_grads()
    state[0].backward(state[1])


for _ in range(5):
    step(None)
torch.cuda.synchronize()
x = torch.zeros(1, device="cuda")
print(f"x.add_ {warm_us(lambda s: x.add_(1), n=200):.1f} us")
print(f"grads to None (11 leaves) {warm_us(lambda s: no_grads(), n=200):.1f} us")
print(f"step {warm_us(step):.0f} us")
print(f"forward {warm_us(lambda s: mod(*inputs)):.0f} us (recording gradients)")
print(f"backward {warm_us(backward, forwards):.0f} us (engine thread)")
got = {}
real_call = _tape.TAPES.call


def grab(options, fn, tensors):
    got[options[0]] = (_tape.TAPES.tapes.get(_tape.TAPES.key(options, tensors)), options, tensors)
    return real_call(options, fn, tensors)


_tape.TAPES.call = grab
step(None)
_tape.TAPES.call = real_call
torch.cuda.synchronize()


def timed_replay(tape, tensors, acc):
    """Tape.__call__'s loop with a clock around each step, summed by kind into acc."""
    clock = time.perf_counter
    vals = list(tensors)
    vals.extend([None] * tape.width)
    stream = None
    t0 = clock()
    for op, a, b, c, d, release in tape.steps:
        t = clock()
        if op == "empty":
            vals[d] = torch.empty_strided(a[0], a[1], dtype=a[2], device=a[3])
            kind = "empty"
        elif op == "call":
            a(*[_tape._fill(v, vals) for v in b])
            kind = f"call {a.__name__}"
        elif op is not None:
            out = op(*[_tape._fill(v, vals) for v in a], **{k: _tape._fill(v, vals) for k, v in b.items()})
            if type(d) is int:
                if d >= 0:
                    vals[d] = out
            else:
                for k, v in zip(d, out):
                    if k >= 0:
                        vals[k] = v
            out = None
            kind = str(op)
        else:
            if stream is None:
                active = a._driver.active
                stream = active.get_current_stream(active.get_current_device())
            binary, constexprs = b
            args = [vals[v.index].data_ptr() if type(v) is _tape._Slot
                    else vals[v.root].data_ptr() + v.nbytes if type(v) is _tape._View else v for v in d]
            binary.run(*c, stream, binary.function, binary.packed_metadata, None, None, None, *args, *constexprs)
            kind = "launch"
        for k in release:
            vals[k] = None
        acc[kind] += time.perf_counter() - t
    result = (tuple(None if k is None else _tape._fill(k, vals) for k in tape.result) if type(tape.result) is tuple
              else _tape._fill(tape.result, vals))
    acc["total"] += clock() - t0
    return result


with torch.no_grad():
    for name, (tape, options, tensors) in got.items():
        if type(tape) is not _tape.Tape:
            print(name, "not taped")
            continue
        print(f"{name}: the tape alone {warm_us(lambda s: tape(tensors)):.0f} us, its key "
              f"{warm_us(lambda s: _tape.TAPES.key(options, tensors), n=200):.1f} us")
        acc = collections.Counter()
        counts = collections.Counter()
        for _ in range(3):
            torch.cuda.synchronize()
            torch.cuda._sleep(200_000_000)
            for _ in range(20):
                timed_replay(tape, tensors, acc)
        torch.cuda.synchronize()
        for op, a, *_ in tape.steps:
            counts["empty" if op == "empty" else f"call {a.__name__}" if op == "call" else "launch" if op is None
                   else str(op)] += 1
        print("   ", ", ".join(f"{k} x{counts[k]}: {v / 60 * 1e6:.0f} us" for k, v in acc.most_common()))

    # unit costs on this host
    e = torch.empty(1 << 20, device="cuda")
    def alloc(_):
        return torch.empty_strided((1024, 1024), (1024, 1), dtype=torch.bfloat16, device=x.device)

    print(f"empty_strided {warm_us(alloc, n=200):.1f} us, "
          f"as_strided {warm_us(lambda s: e.as_strided((512, 512), (512, 1), 0), n=200):.1f} us")
    m1 = torch.randn(1, 64, 64, device="cuda", dtype=torch.bfloat16)
    print(f"aten.bmm.default {warm_us(lambda s: torch.ops.aten.bmm.default(m1, m1), n=200):.1f} us, "
          f"torch.bmm {warm_us(lambda s: torch.bmm(m1, m1), n=200):.1f} us")

    # the Gluon launch
    B, S, N, c, R = case.B, case.S, case.N, case.width, case.pair
    a = torch.randn(B, S, N, c, device="cuda", dtype=torch.bfloat16)
    b = torch.randn_like(a)
    scale = torch.rand(B, N, N, device="cuda")
    w = torch.randn(R, c * c, device="cuda", dtype=torch.bfloat16)
    bias = torch.randn(R, device="cuda", dtype=torch.bfloat16)
    out = torch.empty(B, N, N, R, device="cuda", dtype=torch.bfloat16)
    print(f"Gluon launcher {warm_us(lambda s: wg.outer_products_wgmma(a, b, scale, w, bias, out, 1)):.0f} us")
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    block_s, stages, w_stages = wg.CONFIGS[0]
    r_pad = 128
    a_layout, b_layout, w_layout = wg._layouts()

    def descriptors(kind=TensorDescriptor):
        return (kind(a, [B, S, wg._PASSES, N * c // wg._PASSES], [S * N * c, N * c, N * c // wg._PASSES, 1],
                     [1, block_s, 1, wg._BLOCK_I * c // wg._PASSES], a_layout),
                kind(b, [B, S, N * c], [S * N * c, N * c, 1], [1, block_s, wg._BLOCK_J * c], b_layout),
                kind(w, [R, c * c], [c * c, 1], [r_pad, wg._W_BLOCK], w_layout))

    print(f"  three TensorDescriptors {warm_us(lambda s: descriptors(), n=200):.1f} us")
    descs = descriptors()
    grid = (min(B * -(-N // wg._BLOCK_I) * -(-N // wg._BLOCK_J), 132),)
    runtime = (*descs, scale, *scale.stride(), bias, out, *out.stride(), B, S, N, R)
    consts = dict(C=c, NORM=1, BLOCK_S=block_s, STAGES=stages, W_STAGES=w_stages, R_PAD=r_pad, GROUP_I=8)
    binary = wg._opm_wgmma_kernel[grid](*runtime, **consts, num_warps=wg.NUM_WARPS)
    def triton_launch(_):
        wg._opm_wgmma_kernel[grid](*runtime, **consts, num_warps=wg.NUM_WARPS)

    print(f"  Triton's launch, descriptors made {warm_us(triton_launch):.0f} us")
    stream = torch.cuda.current_stream().cuda_stream

    def direct(ds):
        binary.run(grid[0], 1, 1, stream, binary.function, binary.packed_metadata, None, None, None,
                   *ds, scale.data_ptr(), *scale.stride(), bias.data_ptr(), out.data_ptr(), *out.stride(), B, S, N, R,
                   *consts.values(), wg.NUM_WARPS)

    print(f"  the binary, descriptors made {warm_us(lambda s: direct(descs)):.0f} us")

    def light(base, shape, strides, block_shape, layout):
        return types.SimpleNamespace(base=base, shape=shape, strides=strides, padding="zero")

    print(f"  the binary, light descriptors made per call {warm_us(lambda s: direct(descriptors(light))):.0f} us")
    ref = out.clone()
    direct(descriptors(light))
    torch.cuda.synchronize()
    print("  light launch writes the same output:", torch.equal(ref, out))


class Stand(torch.autograd.Function):
    """Autograd's own cost for the step's shape of call: 10 tensor inputs (9 needing gradients), 3 saved tensors
    beside them, gradients made by empty_like."""

    @staticmethod
    def forward(ctx, msa, mask, *params):
        ctx.save_for_backward(msa, mask, *params)
        return torch.empty(1, device=msa.device)

    @staticmethod
    def backward(ctx, g):
        saved = ctx.saved_tensors
        return (torch.empty_like(saved[0]), None, *[torch.empty_like(p) for p in saved[2:]])


def stand_step(_):
    no_grads()
    Stand.apply(inputs[0], inputs[1], *mod.parameters()).backward(torch.ones(1, device="cuda"))


print(f"autograd alone (a Function of the step's inputs, 9 empty_like gradients) {warm_us(stand_step):.0f} us")
torch.autograd.set_multithreading_enabled(False)
print(f"  its backward on the calling thread {warm_us(stand_step):.0f} us; the step's {warm_us(step):.0f} us")
