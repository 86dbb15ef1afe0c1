"""Every Triton kernel compiled for sm_90 (the H100 and H200) on a machine without a GPU, at each operation's
default tile, in bfloat16 and float32: what Triton's interpreter does not check (globals that are not
constexpr, layouts the compiler refuses, shared memory beyond the multiprocessor's 227 KB) fails here, before
a GPU run. The kernels must not be built under the interpreter, so the compiles run in a process of their
own (this file run as a script)."""

import os
import subprocess
import sys

import pytest

FLOATS = ("eps", "qk_scale", "sm_scale", "inf", "x_scale", "alpha")
FLOAT32_POINTERS = ("m_ptr", "lse_ptr", "delta_ptr", "dz_ptr", "dw_ptr", "cnt_ptr", "inv_ptr", "ws_ptr",
                    "partial_ptr", "dln_ptr", "folded_bias_ptr", "sum_ptr")


@pytest.mark.full
def test_every_kernel_compiles_for_sm90():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"} | {"EVOFUSE_AUTOTUNE": "0"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    run = subprocess.run([sys.executable, __file__], capture_output=True, text=True, env=env, timeout=1500)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    assert "compiled" in run.stdout


# The strides that are 1 in the launches at the suite's shapes (Triton specializes an integer argument of value
# 1 as a constant), by kernel; every other integer is marked divisible by 16, as a launch at those shapes marks
# it (the loads then vectorize and pipeline: the most shared memory a kernel takes).
UNIT_STRIDES = {
    "opm_forward_kernel": ("stride_wk", "stride_or"),
    "opm_project_kernel": ("stride_xc", "stride_wk", "stride_or", "stride_cj"),
    "opm_dx_kernel": ("stride_gr", "stride_wk", "stride_dc"),
    "opm_grad_scale_kernel": ("stride_gr", "stride_cj"),
    "opm_dw_kernel": ("stride_gr", "stride_xc"),
    "_layer_norm_linear_kernel": ("stride_xd", "stride_wd", "stride_mm"),
    "_layer_norm_backward_kernel": ("stride_xd", "stride_gd", "stride_mm", "stride_wd", "stride_nd", "stride_dd"),
    "_weight_halves_kernel": ("stride_wd",),
    "pair_heads_kernel": ("stride_xp", "stride_wp"),
    "pair_heads_backward_kernel": ("stride_xp", "stride_wp", "stride_gij", "stride_dp"),
    "attention_forward_kernel": ("stride_zj", "stride_mn", "stride_lt"),
    "attention_dq_kernel": ("stride_zj", "stride_mn", "stride_lt"),
    "attention_dkdv_kernel": ("stride_zj", "stride_mn", "stride_lt"),
    "attention_dz_kernel": ("stride_zj", "stride_mn", "stride_lt"),
    "weighted_sum_kernel": ("stride_wj",),
    "gated_projection_kernel": ("stride_wk", "stride_xd", "stride_gd"),
    "gated_projection_backward_kernel": ("stride_wk", "stride_xd", "stride_gd"),
    "masked_softmax_kernel": ("stride_xj", "stride_mj", "stride_wj"),
    "masked_softmax_backward_kernel": ("stride_wj", "stride_gj", "stride_dj"),
    "layer_norm_glu_kernel": ("stride_xd", "stride_wd"),
    "output_kernel": ("stride_tm", "stride_pc", "stride_zd", "stride_gd"),
    "transition_backward_kernel": ("stride_xd", "stride_wd", "stride_gc", "stride_wh"),
    "_matmul_kernel": ("stride_ak", "stride_bn"),
}


def _compile(kernel, dtype, consts, num_warps, num_stages, pointers=None):
    """Shared memory (bytes) of `kernel` compiled for sm_90 as a launch at the suite's shapes specializes it:
    pointers typed `dtype` unless named in FLOAT32_POINTERS or `pointers`, the strides of UNIT_STRIDES constant
    1, pointers and the other integers (32-bit) divisible by 16; constexprs not given take their defaults, as at a
    launch."""
    import triton
    from triton.backends.compiler import GPUTarget

    pointers = pointers or {}
    defaults = {p.name: p.default for p in kernel.params if p.is_constexpr and p.has_default}
    consts = defaults | dict(consts) | {n: 1 for n in UNIT_STRIDES.get(kernel.__name__, ())}
    sig = {}
    for name in kernel.arg_names:
        if name in consts:
            sig[name] = "constexpr"
        elif name.endswith("_desc"):  # (a tensor descriptor: its type and block shape given in `pointers`)
            sig[name] = pointers[name]
        elif name.endswith("_ptr"):
            sig[name] = pointers.get(name, "*fp32" if name in FLOAT32_POINTERS else f"*{dtype}")
        else:
            sig[name] = "fp32" if name in FLOATS else "i32"
    attrs = {(kernel.arg_names.index(n),): [["tt.divisibility", 16]] for n in kernel.arg_names
             if n not in consts and n not in FLOATS and not n.endswith("_desc")}
    source = triton.compiler.ASTSource(fn=kernel, signature=sig, constexprs=consts, attrs=attrs)
    return triton.compile(source, target=GPUTarget("cuda", 90, 128),
                          options={"num_warps": num_warps, "num_stages": num_stages}).metadata.shared


def _launches():
    """(name, kernel, dtype, constexprs, num_warps, num_stages, pointer overrides) of the default launches."""
    from evofuse._runtime import next_pow2
    from evofuse.ops.msa_column_global_attention import kernels as gcol
    from evofuse.ops.outer_product_mean import backward_kernels as opm_backward
    from evofuse.ops.outer_product_mean import configs as opm_configs
    from evofuse.ops.outer_product_mean import kernels as opm
    from evofuse.ops.pair_weighted_averaging import configs as pwa_configs
    from evofuse.ops.pair_weighted_averaging import kernels as pwa
    from evofuse.ops.pair_weighted_averaging import op as pwa_op
    from evofuse.ops.transition import backward_tma as trans_tma
    from evofuse.ops.transition import kernels as trans
    from evofuse.ops.triangle_multiplication import kernels as trimul
    from evofuse.stages import layer_norm_backward as lnb
    from evofuse.stages import layer_norm_glu as glu
    from evofuse.stages import layer_norm_glu_tma as glu_tma
    from evofuse.stages import layer_norm_linear as lnl
    from evofuse.stages import matmul, pair_heads
    from evofuse.stages.attention import configs as att_configs
    from evofuse.stages.attention import gate as att_gate
    from evofuse.stages.attention import kernels as att

    def cfg(config):
        return config.kwargs, config.num_warps, config.num_stages

    for dtype, precision in (("bf16", "tf32"), ("fp32", "tf32x3")):
        for c in (16, 32, 64):
            if dtype == "fp32":  # the fused contraction, at both precisions
                for fp32_terms in (3, 1):
                    kw, warps, stages = cfg(opm_configs.candidates(c, fp32_terms)[0])
                    yield (f"opm forward fp32 terms={fp32_terms} c={c}", opm.opm_forward_kernel, dtype,
                           dict(C=c, DIVIDE_BIAS=False, EPS=0.0, HAS_COUNTS=True, TERMS=fp32_terms, **kw), warps, stages,
                           {n: "*fp16" for n in ("a_ptr", "b_ptr", "w_ptr")})
            else:  # 16-bit: the product of cuBLAS's outer products with out_proj's weight
                kw, warps, stages = cfg(opm_configs.project_candidates(c, 128)[0])
                yield (f"opm project {dtype} c={c}", opm.opm_project_kernel, dtype,
                       dict(C=c, DIVIDE_BIAS=True, EPS=1e-3, HAS_COUNTS=True, **kw), warps, stages, {})
        kw, warps, stages = cfg(opm_configs.dx_candidates(32)[0])
        yield f"opm dX {dtype}", opm_backward.opm_dx_kernel, dtype, dict(C=32, PRECISION=precision, **kw), warps, stages, {}
        kw, warps, stages = cfg(opm_configs.dw_candidates(32, 2 if dtype == "bf16" else 4)[0])
        yield (f"opm dW {dtype}", opm_backward.opm_dw_kernel, dtype, dict(C=32, ACCUMULATE=True, PRECISION=precision, **kw),
               warps, stages, {})
        yield (f"opm Gs {dtype}", opm_backward.opm_grad_scale_kernel, dtype,
               dict(DIVIDE_BIAS=True, EPS=1e-3, HAS_COUNTS=True, BLOCK_P=128, BLOCK_R=64), 4, 3, {})
        for D, K, group in ((256, 1024, 32), (512, 256, 0), (64, 128, 8), (64, 72, 3), (128, 640, 1)):
            block_d = min(next_pow2(D), lnl.MAX_BLOCK_D)
            lnl_terms = 0 if dtype == "bf16" else 3
            table = lnl.CONFIGS if lnl_terms == 0 else lnl.FLOAT32_CONFIGS
            kw, warps, stages = cfg([c for c in table if lnl._keep(c, K, block_d, lnl_terms, block_d >= D)][0])
            yield (f"layer_norm_linear {dtype} D={D} K={K} group {group}", lnl._layer_norm_linear_kernel, dtype,
                   dict(GROUP=group, HAS_BIAS=True, HAS_MASK=True, WHOLE_ROW=block_d >= D,
                        TERMS=lnl_terms, BLOCK_D=block_d, **kw), warps, stages, {"w_ptr": "*fp16"} if lnl_terms else {})
        for D in (16, 64, 128, 256, 512):  # every linear narrow enough for the pass, and the widest rows
            for K in (0, 8, 64):
                if K and not lnb.projects_on_chip(D, K, 2 if dtype == "bf16" else 4):
                    continue
                block_d, block_k, block_m, warps = lnb.backward_tiles(D, K, K > 0)
                yield (f"layer_norm backward {dtype} D={D} K={K}", lnb._layer_norm_backward_kernel, dtype,
                       dict(HAS_GRAD=True, PROJECT=K > 0, HAS_MASK=K > 0, STORE_XN=K == 0, STORE_DX=True, BLOCK_M=block_m,
                            BLOCK_D=block_d, BLOCK_K=block_k, PRECISION=precision), warps, 3, {"dw_ptr": "*fp32"})
        for P, norm in ((128, True), (32, False)):  # a normed pair (OpenFold's, pair-weighted averaging's), the seed's
            backward_tile = pair_heads.BACKWARD_TILE_BYTES // (2 if dtype == "bf16" else 4)
            yield (f"pair heads {dtype} P={P}", pair_heads.pair_heads_kernel, dtype,
                   dict(P=P, HAS_NORM=norm, HAS_BIAS=not norm, PRECISION=precision,
                        **pair_heads.pair_heads_tiles(384, P, 8, columns=int(norm))), 4, 2, {})
            yield (f"pair heads backward {dtype} P={P}", pair_heads.pair_heads_backward_kernel, dtype,
                   dict(P=P, HAS_NORM=norm, STORE_DX=True, PRECISION=precision,
                        **pair_heads.pair_heads_tiles(384, P, 8, backward_tile)),
                   pair_heads.BACKWARD_WARPS, 2, {"g_ptr": "*fp32", "part_ptr": "*fp32"})
        attention = dict(MASKED=-1e9, HAS_MASK=True, HEAD_DIM=32, BLOCK_D=32, PRECISION=precision)
        kw, warps, stages = cfg(att_configs.FORWARD_CONFIGS[0])
        for additive in (False, True):  # (the seed's replaced masked logits; the models' additive mask)
            yield (f"attention forward {dtype} additive={additive}", att.attention_forward_kernel, dtype,
                   dict(TRAIN=True, ADDITIVE_MASK=additive, **attention, **kw), warps, stages, {})
        yield (f"attention forward {dtype} ring tile", att.attention_forward_kernel, dtype,
               dict(TRAIN=True, ADDITIVE_MASK=True, GATED=False, **attention, **kw), warps, stages, {})
        kw, warps, stages = cfg(att_configs.BACKWARD_CONFIGS[0])
        for kernel in (att.attention_dq_kernel, att.attention_dkdv_kernel, att.attention_dz_kernel):
            for additive in (False, True):
                yield (f"{kernel.__name__} {dtype} additive={additive}", kernel, dtype,
                       dict(ADDITIVE_MASK=additive, **attention, **kw), warps, stages, {})
        yield (f"attention_dq_kernel {dtype} ring tile", att.attention_dq_kernel, dtype,
               dict(ADDITIVE_MASK=True, EXACT_DELTA=False, **attention, **kw), warps, stages, {})
        for head_dim in (32, 8):
            gate = att_configs.gate_launch(8, head_dim)
            warps = gate.pop("num_warps")
            yield (f"gate backward {dtype} head_dim {head_dim}", att_gate.gate_backward_kernel, dtype, gate, warps, 2, {})
        for C in (32, 8):  # Boltz's heads, AF3's
            kw, warps, stages = cfg(pwa_configs.candidates(C, 2 if dtype == "bf16" else 4)[0])
            for heads_fastest in (True, False):
                yield (f"weighted sum {dtype} C {C} heads fastest {heads_fastest}", pwa.weighted_sum_kernel, dtype,
                       dict(C=C, BLOCK_C=C, HEADS_FASTEST=heads_fastest, PRECISION=precision, **kw), warps, stages, {})
            tiles = pwa_op._projection_tiles(1024, 8, C, 64)
            warps = tiles.pop("num_warps")
            yield (f"gated projection {dtype} C {C}", pwa.gated_projection_kernel, dtype,
                   dict(C=C, PRECISION=precision, **tiles), warps, 3, {})
            kw, warps, stages = cfg(pwa_configs.projection_candidates(8 * C, 64, 2 if dtype == "bf16" else 4)[0])
            yield (f"gated projection backward {dtype} C {C}", pwa.gated_projection_backward_kernel, dtype,
                   dict(C=C, BLOCK_O=64, PRECISION=precision, **kw), warps, stages, {"part_ptr": "*fp32"})
        # triangle multiplication's output kernel: the first tile, and every whole-row one (t channel major)
        for k, config in enumerate([(glu.CONFIGS if dtype == "bf16" else glu.FLOAT32_CONFIGS)[0]]
                                   + (glu.ROW_CONFIGS if dtype == "bf16" else glu.FLOAT32_ROW_CONFIGS)):
            kw, warps, stages = cfg(config)
            for grad in (False, True):
                yield (f"triangle multiplication output {dtype} tile {k} grad={grad}", trimul.output_kernel, dtype,
                       dict(HAS_P_BIAS=True, HAS_G_BIAS=True, GRAD=grad, PRECISION=precision, **kw),
                       warps, stages, {})
        # LayerNorm + gated linear and the transition's backward: every tile the autotuner may try (SwiGLU, rows
        # out), the first for ReLU and for triangle multiplication's gate (channel planes out: unit row strides)
        table = glu.CONFIGS if dtype == "bf16" else glu.FLOAT32_CONFIGS
        for k, config in enumerate(table):
            kw, warps, stages = cfg(config)
            for activation in ("swiglu", "relu", "sigmoid") if k == 0 else ("swiglu",):
                planes = dict(stride_hm=1, stride_pm=1) if activation == "sigmoid" else dict(stride_hn=1, stride_pk=1)
                yield (f"layer_norm_glu {dtype} tile {k} {activation}", glu.layer_norm_glu_kernel, dtype,
                       dict(ACTIVATION=activation, HAS_BIAS=True, HAS_MASK=True, STORE_PRE=True, PRECISION=precision,
                            **planes, **kw), warps, stages, {"m_ptr": "*fp32"})
            for gated in (True, False) if k == 0 else (True,):
                yield (f"transition backward {dtype} tile {k} glu={gated}", trans.transition_backward_kernel, dtype,
                       dict(GLU=gated, HAS_BIAS=True, HAS_MASK=True, PRECISION=precision, **kw), warps, stages,
                       {"m_ptr": "*fp32"})
        for k, config in enumerate(glu.ROW_CONFIGS if dtype == "bf16" else glu.FLOAT32_ROW_CONFIGS):
            kw, warps, stages = cfg(config)
            for activation in ("swiglu", "sigmoid") if k == 0 or dtype == "bf16" else ("swiglu",):
                planes = (dict(stride_hm=1, stride_pm=1, PLANES=True) if activation == "sigmoid"
                          else dict(stride_hn=1, stride_pk=1))
                yield (f"layer_norm_glu {dtype} whole-row tile {k} {activation}", glu.layer_norm_glu_kernel, dtype,
                       dict(ACTIVATION=activation, HAS_BIAS=True, HAS_MASK=True, STORE_PRE=True, PRECISION=precision,
                            **planes, **kw), warps, stages, {"m_ptr": "*fp32"})
        # with grad (triangle multiplication's backward: channel planes), the first tile of each kind
        for kind, config in (("tile", table[0]), ("whole-row tile", (glu.ROW_CONFIGS if dtype == "bf16"
                                                                     else glu.FLOAT32_ROW_CONFIGS)[0])):
            kw, warps, stages = cfg(config)
            yield (f"layer_norm_glu {dtype} {kind} 0 sigmoid grad", glu.layer_norm_glu_kernel, dtype,
                   dict(ACTIVATION="sigmoid", HAS_BIAS=True, HAS_MASK=True, STORE_PRE=True, PRECISION=precision,
                        GRAD=True, stride_hm=1, stride_pm=1, PLANES=kind != "tile", **kw), warps, stages,
                   {"m_ptr": "*fp32"})
        if dtype == "bf16":  # LayerNorm + gated linear through tensor descriptors (16-bit rows): every tile, D 128
            for config in glu_tma.CONFIGS:
                kw, warps, stages = cfg(config)
                bm, bn = kw["BLOCK_M"], kw["BLOCK_N"]
                for activation, planes in (("swiglu", False), ("sigmoid", True), ("relu", False)):
                    descs = {"x_desc": [bm, 128], "w_desc": [bn, 128], "h_desc": [bn, bm] if planes else [bm, bn]}
                    yield (f"layer_norm_glu_tma {dtype} {bm}x{bn} stages {stages} {activation}",
                           glu_tma.layer_norm_glu_tma_kernel, dtype,
                           dict(D=128, ACTIVATION=activation, HAS_BIAS=True, HAS_MASK=True, PLANES=planes, **kw), warps,
                           stages, {"m_ptr": "*fp32"} | {n: f"tensordesc<{dtype}[{b[0]}, {b[1]}]>" for n, b in descs.items()})
        if dtype == "bf16":  # the transition's backward through tensor descriptors: every tile, D = C = 128
            for config in trans_tma.CONFIGS:
                kw, warps, stages = cfg(config)
                bm, bn = kw["BLOCK_M"], kw["BLOCK_N"]
                blocks = {"x_desc": [bm, 128], "w_desc": [bn, 128], "g_desc": [bm, 128], "wo_desc": [128, bn],
                          "dpre_desc": [bm, bn], "h_desc": [bm, bn], "xn_desc": [bm, 128], "dx_desc": [bm, 128]}
                for gated in (True, False):
                    yield (f"transition backward tma {dtype} {bm}x{bn} stages {stages} glu={gated}",
                           trans_tma.transition_backward_tma_kernel, dtype,
                           dict(D=128, C=128, GLU=gated, HAS_BIAS=not gated, HAS_MASK=True, **kw), warps, stages,
                           {"m_ptr": "*bf16"} | {n: f"tensordesc<{dtype}[{b[0]}, {b[1]}]>" for n, b in blocks.items()})
        for fill in (True, False):  # global column attention's columns (the extra-MSA stack's 8 heads of 8)
            columns = dict(HEADS=8, BLOCK_H=8, BLOCK_D=8, BLOCK_L=128, FILL=fill, MASK_LOGIT=-1e9, HAS_MASK=True)
            floats = {name: "*fp32" for name in ("m_ptr", "q_ptr", "o_ptr", "do_ptr", "dq_ptr")}
            yield (f"global column attention's columns {dtype} fill={fill}", gcol.columns_kernel, dtype,
                   dict(HAS_QUERY_BIAS=True, **columns), 4, 3, floats)
            yield (f"global column attention's columns backward {dtype} fill={fill}", gcol.columns_backward_kernel,
                   dtype, columns, 4, 3, floats)
        tiles = pwa_op._softmax_tiles(384)
        yield (f"masked softmax {dtype}", pwa.masked_softmax_kernel, dtype,
               dict(HAS_MASK=True, RELATIVE=True, STORE_W=True, STORE_LOW=dtype == "bf16", **tiles), 4, 3,
               {"x_ptr": f"*{dtype}", "w_ptr": "*fp32"})
        yield (f"masked softmax backward {dtype}", pwa.masked_softmax_backward_kernel, dtype, tiles, 4, 3,
               {"w_ptr": "*fp32", "g_ptr": "*fp32"})
    for k, config in enumerate(matmul.CONFIGS):  # the float32 paths' products: every tile the autotuner may try
        kw, warps, stages = cfg(config)
        yield f"matmul tile {k}", matmul._matmul_kernel, "fp32", kw, warps, stages, {}
    yield ("weight halves", lnl._weight_halves_kernel, "fp32",
           dict(HAS_BIAS=True, TERMS=3, BLOCK_K=lnl.SPLIT_BLOCK_K, BLOCK_D=256), 4, 2, {"halves_ptr": "*fp16"})
    for c in (8, 64):
        shape = dict(C=c, BLOCK_M=4096 // (2 * c), BLOCK_W=4096)
        yield f"operand maxima c={c}", opm.operand_maxima_kernel, "fp32", shape, 4, 2, {}
        yield (f"float16 operands c={c}", opm.float16_operands_kernel, "fp32", dict(TERMS=3, BLOCK_P=256, **shape), 4,
               2, {"ab_h_ptr": "*fp16", "w_h_ptr": "*fp16"})


def main() -> int:
    from evofuse._runtime import SHARED_BYTES

    failed = 0
    launches = list(_launches())
    for name, kernel, dtype, consts, warps, stages, pointers in launches:
        try:
            shared = _compile(kernel, dtype, consts, warps, stages, pointers)
        except Exception as err:  # every launch is tried; the failures are reported together
            failed += 1
            print(f"FAIL {name}: {type(err).__name__}: {str(err)[-600:]}", flush=True)
            continue
        over = shared > SHARED_BYTES
        failed += over
        print(f"{'FAIL' if over else 'ok  '} {name}: {shared / 1024:.0f} KiB shared", flush=True)
    import triton

    print(f"{len(launches) - failed} of {len(launches)} compiled for sm_90 with triton {triton.__version__}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
