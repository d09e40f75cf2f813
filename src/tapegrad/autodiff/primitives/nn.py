"""Neural-network primitives (convolution, pooling, embedding, fused losses). Filled in by the
nn-primitives work; each registered with forward, VJP rule, NumPy reference and samples."""

__all__: list[str] = []
