"""The fused stages that the operations compose: LayerNorm + linear and its backward, LayerNorm + GLU, the LayerNorm's
on-chip arithmetic, the pair's projection to the heads, float32 on float16 tensor cores, and the float32 paths'
matrix products. A stage knows no operation; `evofuse.ops` imports stages, never the other way."""
