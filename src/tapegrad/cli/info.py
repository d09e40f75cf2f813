"""``tapegrad info``: versions, threads, BLAS, CUDA, and where each dataset was found."""

from __future__ import annotations

import os
import platform

from ..train.run import versions


def add_parser(sub) -> None:
    i = sub.add_parser("info", help="versions, threads, and where each dataset was found")
    i.add_argument("--data-dir", help="the folder to report on (default: the usual places)")
    i.set_defaults(func=cmd_info)


def cmd_info(args) -> int:
    from .. import data
    from ..autodiff.kernels.cpu.gemm import describe as describe_convolutions
    from ..autodiff.kernels.cpu.products import describe as describe_products
    from ..blas import describe as describe_blas
    from ..blas import describe_idle

    for k, v in versions().items():
        print(f"{k:<10} {v}")
    try:
        import numba

        threads = numba.get_num_threads()
    except Exception:  # pragma: no cover - numba always importable here
        threads = "?"
    print(f"{'cpus':<10} {os.cpu_count()} (numba threads {threads})")
    print(f"{'machine':<10} {platform.machine()} {platform.system()}")
    print(f"{'blas':<10} {describe_blas()}")
    print(f"{'idle':<10} {describe_idle()}")
    print(f"{'matmul':<10} {describe_products()}")
    print(f"{'conv':<10} {describe_convolutions()}")
    print(f"{'cuda':<10} {_cuda_status()}")
    print("datasets:")
    for name, where in data.describe(args.data_dir).items():
        print(f"  {name:<14} {where if where else 'not found'}")
    return 0


def _cuda_status() -> str:
    """``--device cuda``'s status here: the GPU it would use, or why it cannot."""
    from ..cuda import unavailable_reason

    reason = unavailable_reason()
    if reason is not None:
        return f"not available: {reason}"
    import cupy

    props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
    return f"{props['name'].decode()} (CuPy {cupy.__version__})"
