"""README's examples run as written, its sample output is what the command prints, its CLI
synopsis names every flag, and it points at no path outside a fresh clone.

``python tests/test_readme.py --update`` reruns the sample's command and rewrites the block.
"""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys

README = pathlib.Path(__file__).resolve().parents[1] / "README.md"
SAMPLE = re.compile(
    r"(<!-- sample-output:.*?-->\n```\n\$ (?P<cmd>[^\n]+)\n)(?P<out>.*?)(```)", re.S
)
# the columns that measure this machine at this moment: their format is checked, not their value
ROW = re.compile(
    r"^ +(?P<epoch>\d+[* ]) +\d+\.\d\ds +[\d.]+ (B|KiB|MiB|GiB) +[\d.]+ (B|KiB|MiB|GiB)"
    r"(?P<rest> +\S+ +\S+% +\S+%)$"
)


def test_readme_python_blocks_run():
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    assert blocks, "README has no Python example"
    for block in blocks:
        exec(compile(block, str(README), "exec"), {})


# The sample's losses and accuracies are the same bits on every x86-64 machine only if its
# kernels round the same. OpenBLAS picks its kernels for the CPU it finds (Haswell's on this AMD
# Zen 5, SkylakeX's on AVX-512 Intel chips) and splits a product by its thread count; another
# choice of either moves the figures of the second epoch (97.45% test accuracy with SkylakeX's
# kernels, 97.34% with Haswell's; one thread moves the first epoch's too). numba compiles for the
# CPU it finds too, and the few-channel weight gradient's dots (``kernels/cpu/few_channels.py``)
# are summed in vector lanes whose count LLVM picks for that CPU: the sample made on a Zen 3 moved
# in the first epoch's third decimal on a Zen 4 (and came back exactly with numba told to compile
# for Zen 3). So the sample is made and checked with both pinned: OpenBLAS's Haswell kernels and
# numba compiling for a Haswell (its features only: ``NUMBA_CPU_FEATURES`` empty), which every
# x86-64 CPU with AVX2 and FMA runs. Products of 2 MFLOP and more are cut into a piece per numba
# thread (``kernels/cpu/products.py``), so numba's thread count is pinned too (two: the sample's
# machine). NumPy's own loops measured the same bits with its AVX-512 loops disabled.
PINNED = {
    "OPENBLAS_CORETYPE": "Haswell",
    "OPENBLAS_NUM_THREADS": "2",
    "NUMBA_NUM_THREADS": "2",
    "NUMBA_CPU_NAME": "haswell",
    "NUMBA_CPU_FEATURES": "",
}
_BLAS_CORE = """
import ctypes
import numpy
libs = {line.split()[-1] for line in open("/proc/self/maps") if "openblas" in line.lower()}
names = ("scipy_openblas_get_corename64_", "openblas_get_corename64_", "openblas_get_corename")
for lib in map(ctypes.CDLL, sorted(libs)):
    for f in (getattr(lib, n, None) for n in names):
        if f is not None:
            f.restype = ctypes.c_char_p
            print(f().decode())
"""


def _check_blas_pin(env: dict[str, str]) -> None:
    """The pin holds: the CPU runs Haswell's kernels (AVX2 and FMA) and NumPy's OpenBLAS
    takes them."""
    flags = set(
        re.findall(r"^flags\s*:(.*)$", pathlib.Path("/proc/cpuinfo").read_text(), re.M)[0].split()
    )
    assert {"avx2", "fma"} <= flags, (
        "the sample is checked with OpenBLAS's Haswell kernels, which need AVX2 and FMA"
    )
    r = subprocess.run([sys.executable, "-c", _BLAS_CORE], capture_output=True, text=True, env=env)
    core = PINNED["OPENBLAS_CORETYPE"]
    assert r.stdout.split()[:1] == [core], (
        f"NumPy's BLAS did not take {core}'s kernels: {r.stdout or r.stderr}"
    )


def _run(command: str) -> str:
    root = README.parent
    shared = root.parent / "shared" / "data"  # where tests/conftest.py looks too
    env = {
        **os.environ,
        **PINNED,
        "CI": "true",
        "TAPEGRAD_DATA": os.environ.get("TAPEGRAD_DATA", str(shared)),
    }
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(root / "src"), env.get("PYTHONPATH")]))
    argv = command.split()
    assert argv[0] == "tapegrad"
    _check_blas_pin(env)
    r = subprocess.run(
        [sys.executable, "-m", "tapegrad", *argv[1:]],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr
    return r.stdout


def _shape(text: str) -> list[str]:
    """The lines with the machine-dependent columns (time, memory, steady time) blanked."""
    out = []
    for line in text.splitlines():
        m = ROW.match(line)
        if m:
            line = f"{m['epoch']} <time> <alloc> <rss>{m['rest']}"
        line = re.sub(r"median \d+\.\d\ds over", "median <time> over", line)
        out.append(line)
    return out


def test_readme_sample_output_is_what_the_command_prints():
    m = SAMPLE.search(README.read_text())
    assert m, "README has no generated sample output"
    printed = _run(m["cmd"])
    shown = m["out"]
    assert all(ROW.match(r) for r in shown.splitlines() if r.strip()[:1].isdigit())
    assert _shape(shown) == _shape(printed), (
        "README's sample output is stale: run `python tests/test_readme.py --update`"
    )


def test_readme_synopsis_names_every_train_flag():
    from tapegrad.cli import build_parser

    text = README.read_text()
    train = build_parser()._subparsers._group_actions[0].choices["train"]
    flags = [s for a in train._actions for s in a.option_strings if s.startswith("--")]
    missing = [f for f in flags if f != "--help" and f"[{f}" not in text]
    assert not missing, f"README's train synopsis lacks {missing}"


def test_readme_names_no_path_outside_the_clone():
    assert "../" not in README.read_text()


def update() -> None:
    text = README.read_text()
    m = SAMPLE.search(text)
    printed = _run(m["cmd"])
    README.write_text(text[: m.start("out")] + printed + text[m.end("out") :])
    print(f"README sample output regenerated from `{m['cmd']}`")


if __name__ == "__main__":
    if sys.argv[1:] == ["--update"]:
        update()
    else:
        sys.exit("usage: python tests/test_readme.py --update")
