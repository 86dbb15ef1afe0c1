"""Compiles every Triton kernel's default launch for sm_90 (the H100/H200) on a machine without a GPU,
and checks that each fits a block's shared memory (227 KiB on the H200).

python3 benchmarks/compile_sm90.py [-v]: one line per launch with its shared memory, registers per
thread and spilled bytes per thread (STACK, from cuobjdump on the cubin); exits 1 if a launch fails to
compile or needs more shared memory than the card has. CI runs it (in a process of
its own: the kernels must not be in Triton's interpreter), so that compile errors and shared-memory
overruns in paths only a GPU takes show before a device session. Shared memory read this way matched
what the H200 reported.
"""

import os
import subprocess
import sys
import tempfile
from pathlib import Path

os.environ.pop("TRITON_INTERPRET", None)

import torch  # noqa: E402
import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.experimental.gluon._runtime import GluonASTSource  # noqa: E402

from evofuse.ops import layer_norm_linear as lnl  # noqa: E402
from evofuse.ops import outer_product_mean as opm  # noqa: E402
from evofuse.ops import outer_product_mean_wgmma as opm_wgmma  # noqa: E402
from evofuse.ops import partial_sums, split_linear  # noqa: E402
from evofuse.ops import row_attention as ra  # noqa: E402
from evofuse.reference import MASK_LOGIT  # noqa: E402

SHARED_LIMIT = 227 * 1024
CUOBJDUMP = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
FLOATS = ("eps", "qk_scale", "sm_scale")


def compile_sm90(kernel, pointers, consts, num_warps, num_stages, values=None):
    """(shared memory bytes, "REG:n STACK:m") of `kernel` compiled for sm_90 with `pointers`
    {arg: "*bf16", ...}; STACK > 0 means registers spilled to local memory. Pointers are marked 16-byte
    aligned, as PyTorch's allocations are. `values` {arg: int} specializes integer arguments as a launch
    with those values would (1 becomes a constant, multiples of 16 are marked so): without it the loads
    are not known to be aligned, so neither vectorized nor pipelined with asynchronous copies, and the
    registers and spills read here can differ much from those of a real launch (the float32 OPM kernel:
    1496 bytes of spills generic, 1288 specialized; the bf16 one 0 either way, 160 -> 108 registers)."""
    values = values or {}
    consts = dict(consts) | {n: 1 for n, v in values.items() if v == 1}
    sig = {n: "constexpr" if n in consts else pointers.get(n, "fp32" if n in FLOATS else "i32")
           for n in kernel.arg_names}
    attrs = {(kernel.arg_names.index(n),): [["tt.divisibility", 16]] for n in kernel.arg_names
             if n not in consts and not sig[n].startswith("tensordesc")
             and (n in pointers or values.get(n, 1) % 16 == 0)}
    source = GluonASTSource if kernel.is_gluon() else triton.compiler.ASTSource  # (Gluon: tensor descriptors)
    src = source(fn=kernel, signature=sig, constexprs=consts, attrs=attrs)
    compiled = triton.compile(src, target=GPUTarget("cuda", 90, 32),
                              options={"num_warps": num_warps, "num_stages": num_stages})
    with tempfile.TemporaryDirectory() as tmp:
        cubin = Path(tmp) / "kernel.cubin"
        cubin.write_bytes(compiled.asm["cubin"])
        usage = subprocess.run([str(CUOBJDUMP), "-res-usage", str(cubin)], capture_output=True, text=True).stdout
    regs = " ".join(next((line.split()[:2] for line in usage.splitlines() if "REG:" in line), ["REG:?", "STACK:?"]))
    return compiled.metadata.shared, regs


def launches():
    """(name, kernel, pointer types, constexprs, num_warps, num_stages) of the default launches."""
    # fp16: a as it is; bf16: a pass-major (the Gluon kernel's inference forward), and a as it is with a pass-major
    # copy (its training forward)
    for dt, a_passes, a_copy in (("bf16", 2, False), ("bf16", 2, True), ("fp16", 1, False)):
        for D in (64, 256, 512):
            rows, block_d, block_k = lnl._tiles(D, 64)
            yield (f"ln_linear {dt} D={D} a_passes={a_passes} a_copy={a_copy}", lnl._ln_linear_kernel,
                   {n: f"*{dt}" for n in ("x_ptr", "lnw_ptr", "lnb_ptr", "w_ptr", "w2_ptr", "bias_ptr", "bias2_ptr",
                                          "y_ptr", "ya_ptr")}
                   | {"m_ptr": "*fp32", "shift_ptr": "*fp32", "scale_ptr": "*fp32", "amax_ptr": "*i32"},
                   dict(SLOT=32, HAS_LN=True, HAS_MASK=True, SPLIT=False, ALPHA=1.0, AMAX=False, K_FIRST=32,
                        A_PASSES=a_passes, A_COPY=a_copy,
                        BLOCK_ROWS=rows,
                        BLOCK_D=block_d, BLOCK_K=block_k), 4, 2)
    for D in (64, 256, 512):  # float32 rows on float16 halves (split_ln_linear)
        rows, block_d, block_k, warps = lnl._launch_tiles(D, 64, split=True)
        yield (f"ln_linear split fp32 D={D}", lnl._ln_linear_kernel,
               {n: "*fp32" for n in ("x_ptr", "lnw_ptr", "lnb_ptr", "bias_ptr", "bias2_ptr", "y_ptr", "ya_ptr", "m_ptr",
                                     "shift_ptr", "scale_ptr")}
               | {"w_ptr": "*fp16", "w2_ptr": "*fp16", "amax_ptr": "*i32"},
               dict(SLOT=32, HAS_LN=True, HAS_MASK=True, SPLIT=True, ALPHA=2.0 ** -12, AMAX=True, K_FIRST=0, A_PASSES=1,
                    A_COPY=False,
                    BLOCK_ROWS=rows,
                    BLOCK_D=block_d, BLOCK_K=block_k), warps, 2)
    for dt in ("bf16", "fp32"):
        for stats in (False, True):
            yield (f"layer norm {dt} D=256 stats={stats}", lnl._layer_norm_kernel,
                   {"x_ptr": f"*{dt}", "w_ptr": f"*{dt}", "b_ptr": f"*{dt}", "y_ptr": f"*{dt}", "mean_ptr": "*fp32",
                    "rstd_ptr": "*fp32"},
                   dict(STATS=stats, BLOCK_ROWS=16, BLOCK_D=256), 4, 3)
    for dt in ("bf16", "fp32"):
        for need_x in (True, False):
            yield (f"layer norm backward {dt} D=256 dx={need_x}", lnl._layer_norm_bwd_kernel,
                   {"x_ptr": f"*{dt}", "dy_ptr": f"*{dt}", "mean_ptr": "*fp32", "rstd_ptr": "*fp32", "w_ptr": f"*{dt}",
                    "dx_ptr": f"*{dt}", "dw_ptr": "*fp32", "db_ptr": "*fp32"},
                   dict(NEED_X=need_x, BLOCK_ROWS=8, BLOCK_D=256), 4, 3)
    for dt, dy1 in (("bf16", "fp32"), ("bf16", "bf16"), ("fp16", "fp32")):
        yield (f"ln+linear backward {dt} D=256 C=32 dy1={dy1}", lnl._ln_linear_bwd_kernel,
               {"x_ptr": f"*{dt}", "lnw_ptr": f"*{dt}", "lnb_ptr": f"*{dt}", "w_ptr": f"*{dt}", "m_ptr": "*fp32",
                "dy0_ptr": f"*{dt}", "dy1_ptr": f"*{dy1}", "dx_ptr": f"*{dt}", "xn_ptr": f"*{dt}", "dy_ptr": f"*{dt}",
                "part_ptr": "*fp32"},
               dict(HAS_MASK=True, EVEN_D=True, EVEN_C=True, BLOCK_ROWS=lnl.LN_LINEAR_BWD_ROWS, BLOCK_C=32, BLOCK_D=256),
               4, 2)
    # the partial sums ended at opm-af2-main: out_proj's weight (33 splits) and bias (4608 blocks of pairs), then
    # ln_linear_backward's programs' sums (264) and its weights' cast
    blocks = [partial_sums._blocks(k, m) for k, m in ((33, 128 * 1024), (4608, 128), (264, 576), (1, 64 * 256))]
    yield ("sum partials bf16 opm-af2-main", partial_sums._sum_partials_kernel,
           {f"{n}{k}_ptr": t for k in range(4) for n, t in (("p", "*fp32"), ("out", "*bf16"))},
           dict(BUFFERS=4, **{f"BLOCK_{x}{k}": blocks[k][i] for k in range(4) for i, x in enumerate("KM")}), 4, 3)
    for has_ln in (True, False):
        yield (f"split rows ln={has_ln}", split_linear._split_rows_kernel,
               {"x_ptr": "*fp32", "lnw_ptr": "*fp32", "lnb_ptr": "*fp32", "shift_ptr": "*fp32", "a_ptr": "*fp16"},
               dict(HAS_LN=has_ln, BLOCK_ROWS=16, BLOCK_D=256), 4, 3)
    yield ("split ln weights D=256", split_linear._ln_weights_kernel,
           {n: "*fp32" for n in ("lnw_ptr", "lnb_ptr", "wa_ptr", "wb_ptr", "ba_ptr", "bb_ptr", "out_ptr")}
           | {"w16_ptr": "*fp16"},
           dict(PRODUCT_SHIFT=split_linear.PRODUCT_SHIFT, SHIFT_CLAMP=60.0, EXP_CLAMP=split_linear.EXP_CLAMP,
                BLOCK_D=256, BLOCK_K=16), 4, 3)
    for reorder in (False, True):
        yield (f"opm out_proj weight halves reorder={reorder}", opm._out_weight_kernel,
               {"w_ptr": "*fp32", "max_ptr": "*fp32", "halves_ptr": "*fp16", "e_ptr": "*fp32"},
               dict(C=32, HALVES=1, REORDER=reorder, PASSES=opm.SPLIT_PASSES, LO=True, SCALE_TOP=opm.SCALE_TOP,
                    EXP_CLAMP=split_linear.EXP_CLAMP, BLOCK=1024), 4, 3)
    for lo in (False, True):
        yield (f"float16 split lo={lo}", opm._float16_split_kernel,
               {"x_ptr": "*fp32", "maxima_ptr": "*i32", "e_ptr": "*fp32", "halves_ptr": "*fp16"},
               dict(LO=lo, SCALE_TOP=opm.SCALE_TOP, EXP_CLAMP=split_linear.EXP_CLAMP, BLOCK=1024), 4, 3)
    for form, dt, split, scaled in (("bf16", "bf16", False, False), ("fp32", "fp16", True, True),
                                    ("fp32 fast", "fp16", False, True)):
        out = "*bf16" if dt == "bf16" else "*fp32"
        ptrs = {n: f"*{dt}" for n in ("a_ptr", "b_ptr", "w_ptr", "a_lo_ptr", "b_lo_ptr", "w_lo_ptr")}
        ptrs |= {n: "*fp32" for n in ("sc_ptr", "wb_ptr", "inv_scale_ptr", "p_ptr")} | {"o_ptr": out}
        for C in opm.FAST_HIDDEN_DIMS[:3]:
            for norm, acc in ((0, False), (1, True)):
                consts = dict(C=C, NORM=norm, SPLIT=split, SCALED=scaled, ACCUMULATE=acc,
                              ADD_BIAS=True, STORE_X=False)
                cfg = opm._prune(opm._configs(), {}, **consts)[0]
                yield (f"opm {form} c={C} norm={norm} accumulate={acc}", opm._opm_kernel, ptrs, consts | cfg.kwargs,
                       cfg.num_warps, cfg.num_stages)
    for form, dt, split, scaled in (("bf16", "bf16", False, False), ("fp32 fast", "fp16", False, True),
                                    ("fp32", "fp16", True, True)):
        ptrs = {n: f"*{dt}" for n in ("a_ptr", "b_ptr", "w_ptr")} | {"o_ptr": "*bf16" if dt == "bf16" else "*fp32"}
        ptrs |= {n: "*fp32" for n in ("sc_ptr", "wb_ptr", "inv_scale_ptr", "ws_ptr", "p_ptr")}
        for norm, acc in ((0, False), (1, True)):
            consts = dict(C=32, NORM=norm, SPLIT=split, SCALED=scaled, ACCUMULATE=acc, ADD_BIAS=True)
            cfg = opm._multipass_prune(opm._multipass_configs(), {}, **consts)[0]
            yield (f"opm multi-pass {form} c=32 norm={norm} accumulate={acc}", opm._opm_multipass_kernel, ptrs,
                   consts | cfg.kwargs, cfg.num_warps, cfg.num_stages)
    a_layout, b_layout, w_layout = opm_wgmma._layouts()
    # Hopper's Gluon kernel (bf16, c=32, pair_dim 128), with a Triton whose Gluon API it was written for (others
    # take the multi-pass kernel instead)
    for block_s, stages, w_stages in opm_wgmma.CONFIGS if opm_wgmma.GLUON_API else ():
        descs = {"a_desc": f"tensordesc<bf16[1, {block_s}, 1, 128],{a_layout!r}>",
                 "b_desc": f"tensordesc<bf16[1, {block_s}, 256],{b_layout!r}>",
                 "w_desc": f"tensordesc<bf16[128, 64],{w_layout!r}>"}
        yield (f"opm wgmma bf16 c=32 BLOCK_S={block_s} STAGES={stages} W_STAGES={w_stages}", opm_wgmma._opm_wgmma_kernel,
               descs | {"sc_ptr": "*fp32", "wb_ptr": "*bf16", "o_ptr": "*bf16"},
               dict(C=32, NORM=1, BLOCK_S=block_s, STAGES=stages, W_STAGES=w_stages, R_PAD=128, GROUP_I=8,
                    num_warps=opm_wgmma.NUM_WARPS), opm_wgmma.NUM_WARPS, 1)
    for norm in range(3):
        yield (f"opm pair scale norm={norm}", opm._pair_scale_kernel, {"m_ptr": "*fp32", "sc_ptr": "*fp32"},
               dict(NORM=norm, HAS_MASK=True, EPS=1e-3, BLOCK_I=32, BLOCK_J=32, BLOCK_S=32), 4, 3)
    for C in opm.FAST_HIDDEN_DIMS[:3]:  # the backward's kernels (16-bit)
        ptrs = {n: "*bf16" for n in ("a_ptr", "b_ptr", "w_ptr", "a_lo_ptr", "b_lo_ptr", "w_lo_ptr", "o_ptr")}
        ptrs |= {n: "*bf16" for n in ("wb_ptr", "inv_scale_ptr")} | {n: "*fp32" for n in ("sc_ptr", "p_ptr")}
        consts = dict(C=C, NORM=0, SPLIT=False, SCALED=False, ACCUMULATE=False,
                      ADD_BIAS=False, STORE_X=True)
        cfg = opm._prune(opm._configs(), {}, **consts)[0]
        yield (f"opm backward outer products bf16 c={C}", opm._opm_kernel, ptrs, consts | cfg.kwargs, cfg.num_warps,
               cfg.num_stages)
        for R in (128, 256):
            cfg = opm._dx_prune(opm._dx_configs(), {}, C=C, BLOCK_R=R)[0]
            yield (f"opm backward dX bf16 c={C} R={R}", opm._opm_dx_kernel,
                   {n: "*bf16" for n in ("g_ptr", "w_ptr", "dx_ptr")}, dict(C=C, BLOCK_R=R) | cfg.kwargs, cfg.num_warps,
                   cfg.num_stages)
        for cfg in opm._dw_prune(opm._dw_configs(), {}, C=C):
            for accumulate in (False, True):  # the first block of rows i's partial sums, then the others'
                yield (f"opm backward dW bf16 c={C} {cfg.kwargs} accumulate={accumulate}", opm._opm_dw_kernel,
                       {n: "*bf16" for n in ("g_ptr", "x_ptr")} | {"ws_ptr": "*fp32"},
                       dict(C=C, ACCUMULATE=accumulate) | cfg.kwargs, cfg.num_warps, cfg.num_stages)
    yield ("opm backward Gs bf16", opm._opm_gs_kernel, {n: "*bf16" for n in ("g_ptr", "gs_ptr")}
           | {n: "*fp32" for n in ("sc_ptr", "sum_ptr")}, dict(SCALED_SUM=True, BLOCK_P=32, BLOCK_R=128), 4, 3)
    for dt, out in (("bf16", "*bf16"), ("fp32", "*fp32")):
        ptrs = {n: f"*{dt}" for n in ("x_ptr", "lnw_ptr", "lnb_ptr", "wa_ptr", "ba_ptr", "wb_ptr", "bb_ptr", "w_ptr",
                                      "wbias_ptr")} | {"m_ptr": "*fp32", "o_ptr": out}
        for S, D, C in ((8, 64, 32), (1, 64, 16), (12, 64, 32)):
            meta = opm._small_meta(S, 32, D, C, torch.float32 if dt == "fp32" else torch.bfloat16)
            if meta is None:  # too large for the single launch in this dtype: never launched
                continue
            yield (f"opm single launch {dt} S={S} D={D} c={C}", opm._opm_small_kernel, ptrs,
                   dict(C=C, NORM=1, HAS_MASK=True, EPS=1e-3) | meta, 8, 1)
    for dt in ("bf16", "fp32"):
        names = ("x_ptr", "pair_ptr", "lnw_ptr", "lnb_ptr", "wq_ptr", "bq_ptr", "wk_ptr", "bk_ptr", "wv_ptr", "bv_ptr",
                 "wg_ptr", "bg_ptr", "wo_ptr", "bo_ptr", "wz_ptr", "bz_ptr", "o_ptr")
        ptrs = {n: f"*{dt}" for n in names} | {"m_ptr": "*fp32"}
        for N, D, P, h in ((32, 64, 64, 4), (17, 128, 16, 8), (32, 128, 64, 1)):
            meta = ra._small_meta(N, D, h, torch.float32 if dt == "fp32" else torch.bfloat16, ())
            if meta is None:  # too large for the single launch in this dtype: never launched
                continue
            yield (f"attention single launch {dt} N={N} D={D} P={P} h={h}", ra._row_attention_small_kernel, ptrs,
                   dict(HAS_MASK=True, MASKED_LOGIT=MASK_LOGIT) | meta, 8, 1)
    for dt, prec, e in (("bf16", "tf32", 2), ("fp32", "tf32x3", 8)):
        for block_d in (16, 32, 64, 128):
            base = dict(HAS_MASK=True, LOG2E=1.4426950408889634, MASKED_LOGIT=MASK_LOGIT * 1.4426950408889634,
                        BLOCK_D=block_d, PRECISION=prec)
            ptrs = {n: f"*{dt}" for n in ("x_ptr", "z_ptr", "o_ptr", "do_ptr", "dx_ptr")}
            ptrs |= {"m_ptr": "*fp32", "st_ptr": "*fp32", "dl_ptr": "*fp32", "dz_ptr": "*fp32"}
            for gate, stats in ((True, False), (True, True), (False, True)):  # inference, training, recompute
                consts = base | dict(GATE=gate, STORE_STATS=stats)
                cfg = ra._prune(ra._configs(), {}, N_BUCKET=512, **consts)[0]
                yield (f"attention {dt} d={block_d} gate={gate} stats={stats}", ra._row_attention_kernel, ptrs,
                       consts | cfg.kwargs, cfg.num_warps, cfg.num_stages)
            consts = base | dict(OPERAND_BYTES=e)
            cfg = ra._bwd_prune(ra._bwd_configs(), {}, **consts)[0]
            for name in ("dq", "dz"):
                kernel = getattr(ra, f"_row_attention_bwd_{name}_kernel")
                yield (f"attention {name} {dt} d={block_d}", kernel, ptrs, consts | cfg.kwargs, cfg.num_warps,
                       cfg.num_stages)
            for dq in (True, False):
                yield (f"attention keys dq={dq} {dt} d={block_d}", ra._row_attention_bwd_keys_kernel,
                       ptrs | {"ws_ptr": "*fp32"}, consts | cfg.kwargs | {"DQ": dq}, cfg.num_warps, cfg.num_stages)
        yield (f"attention gate backward {dt}", ra._gate_backward_kernel,
               {n: f"*{dt}" for n in ("x_ptr", "o_ptr", "do_ptr", "dgt_ptr", "gated_ptr", "dx_ptr")} | {"delta_ptr": "*fp32"},
               dict(BLOCK_ROWS=16, BLOCK_H=8, BLOCK_E=32), 8, 3)


# opm-af2-main's launch (B = 1, S = 512, N = 384, c = 32, pair_dim 128; contiguous a, b, mask, weight, output)
_OPM_AF2_MAIN = dict(stride_ab=512 * 384 * 32, stride_as=384 * 32, stride_ai=32, stride_bb=512 * 384 * 32,
                     stride_bs=384 * 32, stride_bj=32, stride_scb=384 * 384, stride_sci=384, stride_scj=1,
                     stride_wr=1024, stride_wk=1, stride_ob=384 * 384 * 128, stride_oi=384 * 128, stride_oj=128,
                     stride_or=1, stride_pb=384 * 384 * 128, stride_pi=384 * 128, stride_pj=128, stride_pr=1,
                     S=512, NI=384, N=384, R=128, S_BUCKET=512, N_BUCKET=512)


# the float32 projections' launch there: x (1, 512, 384, 256) contiguous, [w_hi | w_lo | w_hi] (64, 768), out (2, ..., 32)
_LN_AF2_MAIN = dict(stride_xb=512 * 384 * 256, stride_xs=384 * 256, stride_xi=256, stride_xd=1, stride_wk=768, stride_wd=1,
                    stride_mb=512 * 384, stride_ms=384, stride_mi=1, stride_yslot=512 * 384 * 32, stride_yrow=32,
                    ROWS=512 * 384, S=512, N=384, D=256, K=64)


def specialized_launches():
    """The Outer Product Mean kernels' default launches at opm-af2-main's argument values (see compile_sm90)."""
    for name, kernel, ptrs, consts, warps, stages in launches():
        if kernel is lnl._ln_linear_kernel and consts["BLOCK_D"] == 256 and "fp16" not in name:
            # the 16-bit projections' weight is (64, 256), the float32 ones' [w_hi | w_lo | w_hi] (64, 768)
            yield (f"{name} at opm-af2-main", kernel, ptrs, consts, warps, stages,
                   _LN_AF2_MAIN | ({} if consts["SPLIT"] else {"stride_wk": 256}))
        if kernel is lnl._ln_linear_bwd_kernel:
            values = {k: v for k, v in _LN_AF2_MAIN.items() if k in kernel.arg_names}
            yield (f"{name} at opm-af2-main", kernel, ptrs, consts, warps, stages,
                   values | dict(stride_xr=256, stride_mr=1, stride_dy0=32, stride_dy1=32, C=32, stride_part=2 * 32 + 2 * 256))
        if kernel is opm._opm_dx_kernel and consts["C"] == 32 and consts["BLOCK_R"] == 128:  # a block of 192 rows
            yield (f"{name} at opm-af2-main", kernel, ptrs, consts, warps, stages,
                   dict(stride_gb=192 * 384 * 128, stride_gi=384 * 128, stride_gj=128, stride_gr=1, stride_wr=1024,
                        stride_wk=1, stride_db=192 * 32 * 384 * 32, stride_dr=384 * 32, stride_dc=1, B=1, NI=192, N=384,
                        R=128))
        if kernel is opm._opm_dw_kernel and consts["C"] == 32:  # a block of 192 rows
            yield (f"{name} at opm-af2-main", kernel, ptrs, consts, warps, stages,
                   dict(stride_gb=192 * 384 * 128, stride_gi=384 * 128, stride_gj=128, stride_gr=1,
                        stride_xb=192 * 32 * 384 * 32, stride_xr=384 * 32, stride_xc=1, stride_wss=128 * 1024,
                        stride_wsr=1024, NI=192, N=384, R=128, PAIRS=192 * 384))
        multipass = kernel is opm._opm_multipass_kernel  # its accumulating form too: the most shared memory
        if (kernel is opm._opm_kernel or multipass) and consts["C"] == 32 and (multipass or not consts["ACCUMULATE"]):
            values = {k: v for k, v in _OPM_AF2_MAIN.items() if k in kernel.arg_names}
            if multipass:
                halves = 512 * 384 * 32 if consts["SPLIT"] else 0  # hi to lo: (2, B, S, N, c) and (2, 1, R, c*c)
                values |= {"B": 1, "stride_wsp": opm._workspace_size(128, 32), "stride_ah": halves,
                           "stride_bh": halves, "stride_wh": 128 * 1024 if consts["SPLIT"] else 0}
            yield f"{name} at opm-af2-main", kernel, ptrs, consts, warps, stages, values


def main(verbose: bool) -> int:
    print(f"triton {triton.__version__}")
    failed = 0
    generic = ((*launch, None) for launch in launches())
    for name, kernel, ptrs, consts, warps, stages, values in (*generic, *specialized_launches()):
        try:
            shared, regs = compile_sm90(kernel, ptrs, consts, warps, stages, values)
        except Exception as err:  # a compile error is a finding, reported with the others
            failed += 1
            print(f"FAIL {name}: {type(err).__name__}: {str(err)[:300]}")
            continue
        over = shared > SHARED_LIMIT
        failed += over
        if verbose or over:
            print(f"{'FAIL' if over else 'ok  '} {name}: {shared / 1024:.0f} KiB shared, {regs}")
    print(f"{failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main("-v" in sys.argv))
