"""One package per operation (its kernels, configs and custom op) and the shared LayerNorm + linear kernel."""
