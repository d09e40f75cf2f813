"""examples/pytorch_pairs (issue 26): each PyTorch program there has a tapegrad twin that
differs only in its import lines, and both, started from the same weights, print the same
losses.

Every pair runs in this one process (imports paid once): the PyTorch file with ``--save-init``
writes its initial weights to an ``.npz``, the tapegrad file reads them with ``--load-init``,
and every number the two print is compared.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import re
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import tapegrad as tg  # noqa: E402

# importing torch.func makes PyTorch warn about its own torch.jit
pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated")

PAIRS = Path(__file__).resolve().parents[1] / "examples" / "pytorch_pairs"
NAMES = sorted(p.name[: -len("_torch.py")] for p in PAIRS.glob("*_torch.py"))

# run -> (the arguments of both runs, the relative tolerance on every printed number).
# float64 runs: the two frameworks round differently (other summation orders, other BLAS
# kernels) by ~1e-16 per operation; a few training steps amplify that to ~1e-12 at most, so
# 1e-9 still catches any real difference (a wrong formula moves the numbers by > 1e-4).
F64 = 1e-9
# float32 runs (the MNIST CNN and the regression's layer, float32 as written): float32
# rounds at ~6e-8 per operation, a few training steps amplify it to ~1e-6 (measured over
# every program run without --double: 3e-7 at most), so 1e-5. The other programs run in
# float64 only, to keep this file fast (PyTorch's first float32 call of a kind costs ~1 s).
F32 = 1e-5
# L-BFGS on an LSTM amplifies float64 round-off about threefold per inner iteration
# (measured between the two frameworks: 1e-15 over the first step's 20 evaluations, then
# growing smoothly to 1e-8 by the 40th, no jump), so its two steps are held to 1e-6.
LBFGS = 1e-6
WLM = "--epochs 2 --log-interval 2 --dropout 0 --sentences 60 --double"
RUNS = {
    "char_transformer": ("--steps 6 --double", F64),
    "resnet": ("--epochs 2 --train-size 32 --double", F64),
    "wgan_gp": ("--iterations 3 --critic-iters 3 --double", F64),
    "per_example_grads": ("--steps 3 --double", F64),
    "seq2seq_gru": ("--steps 3 --double", F64),
    "mnist_cnn": (
        "--train-size 48 --test-size 32 --batch-size 16 --log-interval 1 --dropout 0 0 "
        "--data-dir {data}/mnist",
        F32,
    ),
    "regression": ("--max-steps 40 --log-interval 5", F32),
    "vae": (
        "--train-size 48 --test-size 32 --batch-size 16 --log-interval 1 --double "
        "--data-dir {data}/mnist",
        F64,
    ),
    "time_sequence_prediction": ("--steps 2 --waves 8 --length 30 --future 5", LBFGS),
    "word_language_model": (f"--model LSTM {WLM}", F64),
    "word_language_model[Transformer]": (f"--model Transformer {WLM}", F64),
}


def _twin_line(line: str) -> str:
    """The tapegrad twin of a PyTorch import line (other lines are their own twin)."""
    m = re.fullmatch(r"import torch(\.[\w.]+)? as (\w+)", line)
    if m:
        return f"import tapegrad{m[1] or ''} as {m[2]}"
    if line == "import torch":
        return "import tapegrad as torch"
    m = re.fullmatch(r"from torch(\.[\w.]+)? import (.+)", line)
    if m:
        return f"from tapegrad{m[1] or ''} import {m[2]}"
    return line


def test_every_program_is_run():
    assert NAMES and sorted({run.split("[")[0] for run in RUNS}) == NAMES


@pytest.mark.parametrize("name", NAMES)
def test_pair_differs_only_in_imports(name):
    a = (PAIRS / f"{name}_torch.py").read_text().splitlines()
    b = (PAIRS / f"{name}_tapegrad.py").read_text().splitlines()
    assert len(a) == len(b), f"{name}: the files have {len(a)} and {len(b)} lines"
    changed = 0
    for i, (x, y) in enumerate(zip(a, b), 1):
        assert _twin_line(x) == y, f"{name}_tapegrad.py:{i}: {y!r} is not the twin of {x!r}"
        changed += x != y
    assert changed, f"{name}: the twin imports nothing from tapegrad"


def _run(path: Path, args: list[str]) -> list[str]:
    spec = importlib.util.spec_from_file_location(f"pair_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            spec.loader.exec_module(module)
            module.main(args)
    finally:
        torch.set_default_dtype(torch.float32)
        tg.set_default_dtype(tg.float32)
    return out.getvalue().splitlines()


_NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|nan|inf")


def _compare(name: str, ours: list[str], theirs: list[str], rtol: float) -> None:
    assert len(ours) == len(theirs) and theirs, (name, ours, theirs)
    for a, b in zip(ours, theirs):
        assert _NUMBER.sub("#", a) == _NUMBER.sub("#", b), f"{name}: {a!r} against {b!r}"
        x = np.array([float(v) for v in _NUMBER.findall(a)])
        y = np.array([float(v) for v in _NUMBER.findall(b)])
        np.testing.assert_allclose(x, y, rtol=rtol, atol=0, err_msg=f"{name}: {a!r} vs {b!r}")


@pytest.fixture(scope="module")
def one_thread():
    """PyTorch on one thread: tiny tensors gain nothing from more, and its OpenMP threads
    spin for seconds on a machine busy with other work."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.mark.parametrize("run", sorted(RUNS))
def test_pair_prints_pytorchs_losses(run, tmp_path, real_data, one_thread):
    args, rtol = RUNS[run]
    args = args.format(data=real_data).split()
    name = run.split("[")[0]
    init = str(tmp_path / "init.npz")
    theirs = _run(PAIRS / f"{name}_torch.py", [*args, "--save-init", init])
    ours = _run(PAIRS / f"{name}_tapegrad.py", [*args, "--load-init", init])
    _compare(name, ours, theirs, rtol)
