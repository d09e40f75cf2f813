"""The ``tapegrad`` command: the printed table, result files, model files, and one-line errors."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from tapegrad.cli import main


def run_cli(*args, env=None):
    return subprocess.run(
        [sys.executable, "-m", "tapegrad", *args],
        capture_output=True,
        text=True,
        env={**os.environ, "CI": "true", **(env or {})},
        timeout=300,
    )


@pytest.mark.parametrize(
    "args,message",
    [
        (["train", "nope"], "unknown preset 'nope'"),
        (["train", "mlp", "--dataset", "imdb"], "preset mlp trains on mnist or fashion-mnist"),
        (["train", "mlp", "--epochs", "0"], "argument --epochs: must be positive, got 0"),
        (["train", "mlp", "--resume"], "--resume needs --checkpoint-dir"),
    ],
)
def test_user_mistakes_give_one_line_and_status_2(args, message, capsys):
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err


def test_missing_dataset_says_where_to_put_it(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("TAPEGRAD_DATA", str(tmp_path / "empty"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("TAPEGRAD_OFFLINE", "1")
    (tmp_path / "empty-folder").mkdir()
    assert main(["train", "mlp", "--data-dir", str(tmp_path / "empty-folder")]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "mnist" in err and "train-images-idx3-ubyte.gz" in err
    assert "--data-dir" in err and "data_dir=" not in err


def test_unknown_option_is_a_usage_error_without_traceback():
    r = run_cli("train", "mlp", "--bogus")
    assert r.returncode == 2 and "Traceback" not in r.stderr and "--bogus" in r.stderr


def test_train_prints_table_writes_results_and_evaluate_reads_the_model(
    real_data, tmp_path, capsys
):
    out_json, out_csv = tmp_path / "r.json", tmp_path / "r.csv"
    model_file, png = tmp_path / "mlp.safetensors", tmp_path / "r.png"
    assert (
        main(
            [
                "train",
                "mlp",
                "--max-steps",
                "120",
                "--data-dir",
                str(real_data),
                "--json",
                str(out_json),
                "--csv",
                str(out_csv),
                "--plot",
                str(png),
                "--save",
                str(model_file),
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    for column in ("epoch", "time", "alloc/epoch", "peak RSS", "loss", "train acc", "test acc"):
        assert column in out
    rows = [line for line in out.splitlines() if line.strip().startswith("1*")]
    assert len(rows) == 1 and rows[0].rstrip().endswith("%")
    result = json.loads(out_json.read_text())
    assert result["preset"] == "mlp" and result["global_steps"] == 120
    assert result["mode"] == "compiled"
    epoch = result["epochs"][0]
    assert epoch["steps"] == 120 and epoch["first"] is True
    assert epoch["test_accuracy"] > 0.85  # 120 Adam steps of the MLP already reach ~90%
    assert epoch["allocated_bytes"] > 0 and epoch["peak_rss_bytes"] > 0
    assert out_csv.read_text().startswith("epoch,steps,seconds")
    assert png.read_bytes()[:4] == b"\x89PNG"

    assert main(["evaluate", str(model_file), "--data-dir", str(real_data)]) == 0
    line = capsys.readouterr().out
    assert "mlp on mnist test set (10000 samples)" in line
    acc = float(line.rsplit("accuracy", 1)[1].strip().rstrip("%"))
    assert abs(acc - 100 * epoch["test_accuracy"]) < 1e-6


def test_evaluate_rejects_a_corrupt_model_file(tmp_path, capsys):
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json at all")
    assert main(["evaluate", str(bad)]) == 2
    err = capsys.readouterr().err
    assert str(bad) in err and err.count("\n") == 1


def test_info_lists_versions_and_datasets(real_data, capsys):
    assert main(["info", "--data-dir", str(real_data)]) == 0
    out = capsys.readouterr().out
    assert "numpy" in out and "numba" in out and "datasets:" in out
    cuda = next(line for line in out.splitlines() if line.startswith("cuda "))
    assert tg_cuda_available() or "pip install cupy-cuda12x" in cuda
    assert str(real_data) in out
    from tapegrad.blas import core

    blas = next(line for line in out.splitlines() if line.startswith("blas "))
    assert f"OpenBLAS, {core()} kernels" in blas
    from tapegrad.autodiff.kernels.cpu import gemm

    conv = next(line for line in out.splitlines() if line.startswith("conv "))
    assert ("image by image" in conv) == gemm.AVAILABLE
    matmul = next(line for line in out.splitlines() if line.startswith("matmul "))
    assert ("a piece per numba thread" in matmul) == gemm.AVAILABLE


def test_eager_flag_trains_the_same_model(real_data, tmp_path, capsys):
    files = []
    for flags in ([], ["--eager"]):
        out = tmp_path / f"r{len(files)}.safetensors"
        assert (
            main(
                [
                    "train",
                    "seed-rnn",
                    "--max-steps",
                    "30",
                    "--data-dir",
                    str(real_data),
                    "--save",
                    str(out),
                    *flags,
                ]
            )
            == 0
        )
        files.append(out)
    import tapegrad as tg

    a, b = (tg.load(f) for f in files)
    for k in a:  # compiled and eager runs end with bit-identical weights
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)


def tg_cuda_available() -> bool:
    import tapegrad as tg

    return tg.cuda.is_available()
