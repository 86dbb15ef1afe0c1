"""One package per operation: its own kernels, configs and custom op, composed of `evofuse.stages`."""
