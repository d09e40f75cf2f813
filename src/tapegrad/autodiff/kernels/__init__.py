"""Kernels: one namespace per device, the same names and signatures in each.

* ``cpu/``: numba loops over NumPy arrays, each with a plain-NumPy reference that the tests
  compare it with (and that serves when numba is not importable). Kernels are cached on disk
  (``cached_jit`` of ``jit.py``), so compilation (about a second each) is paid once per machine.
* ``cuda/``: numba-cuda kernels for CuPy arrays; where CUDA has no kernel of its own, the name
  is bound to array-generic code (``generic.py``), so every name exists on every device.
* ``dispatch.py``: ``kernels_for(*arrays)``, the namespace of the arrays' device: a primitive's
  forward calls ``kernels_for(x).name(...)`` and never chooses between devices itself.
* ``common.py``: helpers both devices' kernels share (no kernel).
"""
