"""arborl.kernels."""
