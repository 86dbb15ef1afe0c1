"""MSA global column attention (AF2 Algorithm 19): `op` (the custom op with its fake and its backward) on the shared
LayerNorm + projection kernel and batched products; it has no kernels of its own."""
