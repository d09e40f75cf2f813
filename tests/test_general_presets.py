"""The general workloads' presets, char-lm and resnet: their models compiled and eager agree bit
for bit, char-lm's loss is PyTorch's from the same weights, the character corpus draws its
windows by (seed, epoch), and ``tapegrad train`` runs both (small settings: seconds each)."""

from __future__ import annotations

import dataclasses
import json
from functools import partial

import numpy as np
import pytest

import tapegrad as tg
from tapegrad import models, nn
from tapegrad.cli import main
from tapegrad.data.chars import CharWindows, encode_chars, windows_at
from tapegrad.models import PRESETS, build_model
from tapegrad.train import Trainer
from tapegrad.train.experiment import make_optimizer

VOCAB = 23


def _tiny_char_lm(seed: int = 0, dropout: float = 0.1):
    rng = np.random.default_rng(seed)
    return models.CharLM(VOCAB, 8, d_model=16, heads=4, layers=2, dropout=dropout, rng=rng)


def _tiny_resnet(seed: int = 0):
    return models._resnet(np.random.default_rng(seed), widths=(4, 8, 8))


def _batch(kind: str):
    rng = np.random.default_rng(1)
    if kind == "char-lm":
        x = rng.integers(0, VOCAB, (3, 8))
        return x, rng.integers(0, VOCAB, (3, 8))
    return rng.random((4, 784), dtype=np.float32), rng.integers(0, 10, 4)


@pytest.mark.parametrize("kind", ["char-lm", "resnet"])
def test_compiled_steps_equal_eager_steps_bit_for_bit(kind):
    """Two steps (forward, backward, the preset's optimiser) of the same model from the same
    seed, eager and compiled: the same losses, weights and (char-lm) dropout masks."""
    build = _tiny_char_lm if kind == "char-lm" else _tiny_resnet
    preset = PRESETS[kind]
    x, y = _batch(kind)
    results = []
    for mode in ("eager", "compiled"):
        model = build()
        opt = make_optimizer(
            preset.optimizer, model.parameters(), preset.lr, preset.momentum, preset.weight_decay
        )
        trainer = Trainer(model, opt, preset.task, log=None, progress=False, mode=mode)
        losses = [trainer.train_step(x, y)[0] for _ in range(2)]
        results.append((losses, model.state_dict()))
    (eager_losses, eager_state), (compiled_losses, compiled_state) = results
    assert eager_losses == compiled_losses
    assert eager_losses[0] != eager_losses[1]  # the step changed the weights
    for name, value in eager_state.items():
        np.testing.assert_array_equal(compiled_state[name], value, err_msg=name)


def test_char_lm_dropout_is_active_in_training_only():
    model = _tiny_char_lm()
    x = tg.Tensor(_batch("char-lm")[0])
    a, b = model(x).data, model(x).data
    assert not np.array_equal(a, b)  # fresh masks each call
    model.eval()
    np.testing.assert_array_equal(model(x).data, model(x).data)


def test_char_lm_loss_and_gradients_match_pytorch_in_float64():
    torch = pytest.importorskip("torch")
    from tapegrad.bench.torch_runner import build as torch_build

    model = _tiny_char_lm(dropout=0.0).double()
    weights = {k: np.asarray(v) for k, v in model.state_dict().items()}
    ref = torch_build("char-lm", weights).double().eval()  # dropout off, as the model here
    ref.load_state_dict({k: torch.from_numpy(v.copy()) for k, v in weights.items()})
    x, y = _batch("char-lm")
    logits = model(tg.Tensor(x))
    loss = nn.functional.cross_entropy(logits.reshape((-1, VOCAB)), y.reshape(-1))
    loss.backward()
    t_logits = ref(torch.from_numpy(x))
    t_loss = torch.nn.functional.cross_entropy(
        t_logits.reshape(-1, VOCAB), torch.from_numpy(y).reshape(-1)
    )
    t_loss.backward()
    assert loss.item() == pytest.approx(t_loss.item(), rel=1e-12)
    grads = dict(ref.named_parameters())
    for name, p in model.named_parameters():
        np.testing.assert_allclose(p.grad, grads[name].grad.numpy(), rtol=1e-9, atol=1e-12)


def test_resnet_has_the_stated_shape():
    model = build_model("resnet")
    convs = [m for m in model.modules() if isinstance(m, nn.Conv2d)]
    assert [c.out_channels for c in convs] == [16, 16, 16, 32, 32, 32, 64, 64, 64]
    assert sum(isinstance(m, nn.BatchNorm2d) for m in model.modules()) == 9
    assert model(tg.Tensor(np.zeros((2, 784), np.float32))).shape == (2, 10)
    preset = PRESETS["resnet"]
    assert (preset.optimizer, preset.momentum, preset.weight_decay) == ("sgd", 0.9, 5e-4)


def test_char_windows_depend_on_seed_and_epoch_only():
    text = np.arange(1000, dtype=np.int64) % 251
    source = CharWindows(text, context=16, windows=40)
    batches = source.batches(8, seed=3)
    assert len(batches) == 5
    epoch2 = list(batches.epoch(2))
    again = list(source.batches(8, seed=3).epoch(2, start=3))
    np.testing.assert_array_equal(again[0][0], epoch2[3][0])  # a resume sees the same batch
    other = next(source.batches(8, seed=4).epoch(2))
    assert not np.array_equal(other[0], epoch2[0][0])
    for x, y in epoch2:  # each target is the next character
        assert x.shape == y.shape == (8, 16)
        np.testing.assert_array_equal(x[:, 1:], y[:, :-1])
        np.testing.assert_array_equal(y[:, -1], text[x[:, 0] + 16])


def test_characters_outside_the_vocabulary_become_id_zero():
    vocab = np.array([0, ord(" "), ord("a"), ord("b")], np.uint32)
    np.testing.assert_array_equal(encode_chars("ab é", vocab), [2, 3, 1, 0])
    x, y = windows_at(np.array([5, 6, 7, 8]), np.array([1]), 2)
    assert x.tolist() == [[6, 7]] and y.tolist() == [[7, 8]]


@pytest.fixture
def small_char_lm(monkeypatch):
    """char-lm with a 2-block d_model 32 model, 128 windows (4 steps) an epoch and 16
    validation windows: the CLI's wiring in seconds."""
    small = dataclasses.replace(
        PRESETS["char-lm"],
        build=partial(models._char_lm, d_model=32, layers=2),
        extra={"context": 64, "windows": 128, "val_windows": 16},
    )
    monkeypatch.setitem(PRESETS, "char-lm", small)


@pytest.mark.parametrize("mode", [[], ["--eager"]])
def test_train_char_lm_reports_train_and_validation_loss(
    mode, small_char_lm, real_data, tmp_path, capsys
):
    out, saved = tmp_path / "run.json", tmp_path / "m.st"
    args = ["train", "char-lm", "--max-steps", "3", "--data-dir", str(real_data), *mode]
    args += ["--json", str(out), "--csv", str(tmp_path / "run.csv"), "--save", str(saved)]
    assert main(args) == 0
    text = capsys.readouterr().out
    assert "train loss" in text and "val loss" in text and "16 validation windows" in text
    run = json.loads(out.read_text())
    (epoch,) = run["epochs"]
    assert epoch["steps"] == 3 and epoch["train_accuracy"] is None
    assert epoch["test_accuracy"] is None and run["evaluated_on"] == "validation"
    assert 0 < epoch["test_loss"] < np.log(180)  # below a uniform guess
    assert run["weight_decay"] == 0.01 and run["optimizer"] == "adamw"
    # the saved weights evaluate to the run's last validation loss
    assert main(["evaluate", str(saved), "--data-dir", str(real_data)]) == 0
    line = capsys.readouterr().out
    assert (
        f"char-lm on imdb-chars validation set (16 windows): loss {epoch['test_loss']:.4f}" in line
    )


def test_train_char_lm_resumes_to_the_uninterrupted_weights(small_char_lm, real_data, tmp_path):
    """Dropout's generators are checkpointed: a run stopped after 2 steps and resumed ends
    with the weights of one that ran its 4 steps through."""
    base = ["train", "char-lm", "--data-dir", str(real_data)]
    base += ["--epochs", "1"]
    assert main([*base, "--save", str(tmp_path / "full.st")]) == 0
    ck = ["--checkpoint-dir", str(tmp_path / "ck")]
    assert main([*base, *ck, "--max-steps", "2"]) == 0
    assert main([*base, *ck, "--resume", "--save", str(tmp_path / "resumed.st")]) == 0
    full, _ = tg.serialization.load_arrays(tmp_path / "full.st")
    resumed, _ = tg.serialization.load_arrays(tmp_path / "resumed.st")
    for name, value in full.items():
        np.testing.assert_array_equal(resumed[name], value, err_msg=name)


def test_train_resnet_three_steps(tmp_path, capsys):
    from cli_helpers import write_blobs

    data = write_blobs(tmp_path / "blobs.npz", classes=10, features=784, n=120)
    out = tmp_path / "run.json"
    args = ["train", "resnet", "--dataset", str(data), "--max-steps", "3", "--batch-size", "8"]
    assert main([*args, "--json", str(out)]) == 0
    assert "momentum 0.9, weight decay 0.0005" in capsys.readouterr().out
    run = json.loads(out.read_text())
    assert run["epochs"][0]["steps"] == 3 and run["momentum"] == 0.9
    assert 0.0 <= run["epochs"][0]["test_accuracy"] <= 1.0
