"""``tapegrad train`` and ``evaluate`` on the paths around the happy one: outputs in folders that
do not exist yet, an output that fails while the others are written and the weights are kept,
settings reported as used, checkpoints evaluated, user data (.npz) for classification and
regression, schedules, help and version."""

from __future__ import annotations

import json

import numpy as np
import pytest
from cli_helpers import write_blobs

import tapegrad as tg
from tapegrad.cli import EXIT_OUTPUT, main
from tapegrad.train.checkpoint import list_checkpoints


@pytest.fixture
def blobs(tmp_path):
    return write_blobs(tmp_path / "blobs.npz", classes=4, features=6)


@pytest.fixture
def line(tmp_path):
    """y = x @ w + 0.5 plus a little noise: a regression with two targets."""
    rng = np.random.default_rng(1)
    x = rng.normal(size=(600, 5)).astype(np.float32)
    w = rng.normal(size=(5, 2)).astype(np.float32)
    y = x @ w + 0.5 + 0.01 * rng.normal(size=(600, 2)).astype(np.float32)
    path = tmp_path / "line.npz"
    np.savez(path, x_train=x[:500], y_train=y[:500], x_test=x[500:], y_test=y[500:])
    return path


def test_outputs_go_into_new_folders_and_say_where(blobs, tmp_path, capsys):
    out = {k: tmp_path / "new" / k / f"r.{k}" for k in ("json", "csv", "png", "safetensors")}
    args = ["train", "linear", "--dataset", str(blobs), "--epochs", "2"]
    args += ["--json", str(out["json"]), "--csv", str(out["csv"]), "--plot", str(out["png"])]
    args += ["--save", str(out["safetensors"]), "--checkpoint-dir", str(tmp_path / "a" / "ck")]
    assert main(args) == 0
    printed = capsys.readouterr().out
    for flag, path in zip(("json", "csv", "plot", "save"), out.values()):
        assert path.is_file() and f"{flag}: wrote {path}" in printed
    assert list_checkpoints(tmp_path / "a" / "ck")


def test_a_failing_output_does_not_stop_the_others_nor_lose_the_weights(
    blobs, tmp_path, capsys, monkeypatch
):
    import tapegrad.train as train

    def broken(*a, **k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(train, "write_json", broken)
    import tapegrad.serialization as serialization

    monkeypatch.setattr(serialization, "save_object", _fail_first(serialization.save_object))
    ck, saved = tmp_path / "ck", tmp_path / "m.safetensors"
    args = ["train", "linear", "--dataset", str(blobs), "--epochs", "1", "--checkpoint-dir"]
    args += [str(ck), "--json", str(tmp_path / "r.json"), "--csv", str(tmp_path / "r.csv")]
    assert main([*args, "--save", str(saved)]) == EXIT_OUTPUT
    captured = capsys.readouterr()
    assert "could not write --json" in captured.err and "No space left" in captured.err
    assert "could not write --save" in captured.err
    assert (tmp_path / "r.csv").is_file()  # written although --json failed before it
    fallback = [p for p in ck.iterdir() if p.name.startswith("linear-weights-")]
    assert len(fallback) == 1 and f"the trained weights are in {fallback[0]}" in captured.out
    assert tg.load(fallback[0]).keys() == {"1.weight", "1.bias"}


def _fail_first(save):
    calls = []

    def flaky(model, path, **kw):
        calls.append(path)
        if len(calls) == 1:
            raise PermissionError(13, "Permission denied", str(path))
        return save(model, path, **kw)

    return flaky


def test_header_and_json_report_the_settings_used(blobs, tmp_path, capsys):
    out = tmp_path / "r.json"
    args = ["train", "linear", "--dataset", str(blobs), "--epochs", "2", "--batch-size"]
    args += ["100000", "--optimizer", "sgd", "--momentum", "0.9", "--weight-decay", "0.001"]
    args += ["--scheduler", "cosine", "--lr", "0.05", "--json", str(out), "--threads", "1"]
    assert main(args) == 0
    header = capsys.readouterr().out.splitlines()[0]
    assert "sgd lr 0.05, momentum 0.9, weight decay 0.001, cosine schedule over 2 epochs" in header
    assert "batch 400 (the whole training set; 100000 asked)" in header
    result = json.loads(out.read_text())
    assert result["batch_size"] == 400 and result["batch_size_asked"] == 100000
    assert result["momentum"] == 0.9 and result["weight_decay"] == 0.001
    assert result["scheduler"] == {"name": "cosine", "epochs": 2} and result["threads"] == 1
    assert [e["steps"] for e in result["epochs"]] == [1, 1]


@pytest.mark.parametrize("scheduler", ["step", "cosine", "onecycle"])
def test_schedules_resume_exactly(blobs, tmp_path, scheduler, capsys):
    base = ["train", "linear", "--dataset", str(blobs), "--epochs", "3", "--batch-size", "64"]
    base += ["--scheduler", scheduler]
    assert main([*base, "--save", str(tmp_path / "full.safetensors")]) == 0
    ck = ["--checkpoint-dir", str(tmp_path / "ck"), "--save", str(tmp_path / "r.safetensors")]
    assert main([*base, *ck, "--max-steps", "10"]) == 0
    assert main([*base, *ck, "--resume"]) == 0
    a, b = tg.load(tmp_path / "full.safetensors"), tg.load(tmp_path / "r.safetensors")
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])
    capsys.readouterr()


def test_regression_trains_and_evaluates_with_mse(line, tmp_path, capsys):
    saved = tmp_path / "line.safetensors"
    args = ["train", "linear", "--dataset", str(line), "--epochs", "30", "--lr", "0.05"]
    assert main([*args, "--save", str(saved)]) == 0
    out = capsys.readouterr().out
    assert "(regression)" in out.splitlines()[0] and "train MSE" in out and "test MSE" in out
    last = [r for r in out.splitlines() if r.strip().startswith("30")][0].split()
    assert float(last[-1]) < 0.01  # test MSE: the line is learned
    assert main(["evaluate", str(saved), "--dataset", str(line)]) == 0
    shown = capsys.readouterr().out
    assert "linear on line.npz test set (100 samples): MSE " in shown
    assert abs(float(shown.split("MSE ")[1]) - float(last[-1])) < 1e-4


def test_a_preset_shaped_to_user_data(blobs, tmp_path, capsys):
    saved = tmp_path / "m.safetensors"
    args = ["train", "mlp", "--dataset", str(blobs), "--epochs", "3", "--save", str(saved)]
    assert main(args) == 0
    assert tg.load(saved)["3.weight"].shape == (4, 128)  # 4 classes from 6 features
    assert main(["evaluate", str(saved), "--dataset", str(blobs)]) == 0
    assert "accuracy" in capsys.readouterr().out


def test_evaluate_reads_a_checkpoint(real_data, tmp_path, capsys):
    ck = tmp_path / "ck"
    args = ["train", "mlp", "--max-steps", "50", "--data-dir", str(real_data)]
    assert main([*args, "--checkpoint-dir", str(ck), "--save", str(tmp_path / "m.st")]) == 0
    capsys.readouterr()
    assert main(["evaluate", str(list_checkpoints(ck)[-1]), "--data-dir", str(real_data)]) == 0
    from_ckpt = capsys.readouterr().out
    assert main(["evaluate", str(tmp_path / "m.st"), "--data-dir", str(real_data)]) == 0
    assert capsys.readouterr().out == from_ckpt  # the same weights: the same line
    assert "mlp on mnist test set (10000 samples)" in from_ckpt


def test_version_and_help_show_defaults(capsys):
    from tapegrad.cli import build_parser

    train = build_parser()._subparsers._group_actions[0].choices["train"]
    for action in train._actions:  # every flag says what it does and its default
        if action.dest != "help":
            assert "default" in (action.help or ""), action.dest
    with pytest.raises(SystemExit):
        build_parser().parse_args(["train", "--help"])
    text = capsys.readouterr().out
    for flag in ("--weight-decay", "--scheduler", "--threads", "--momentum", "--resume"):
        assert flag in text
    assert "seed-cnn" in text and "lr 0.003" in text and "batch 100" in text
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.startswith(f"tapegrad {tg.__version__}")
