"""Benchmarks of tapegrad against PyTorch, JAX and HIPS autograd."""
