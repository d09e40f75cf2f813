"""Datasets: resolution of local copies, checksummed downloads, loaders, batch iterators."""
