"""Optimisers, gradient clipping and learning-rate schedulers (in-place updates)."""
