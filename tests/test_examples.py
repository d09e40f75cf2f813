"""The programs in examples/ (PyTorch's own examples, written with tapegrad) train on small
data, eagerly and compiled, with the same results both ways, and learn something."""

from __future__ import annotations

import importlib
import math
import sys
from pathlib import Path

import numpy as np
import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


@pytest.fixture(scope="module")
def examples():
    sys.path.insert(0, str(EXAMPLES))
    try:
        yield lambda name: importlib.import_module(name)
    finally:
        sys.path.remove(str(EXAMPLES))


def _both(module, args):
    """The example's result eagerly and compiled (the same seed: the same run)."""
    eager = module.main([*args, "--eager", "--quiet"])
    compiled = module.main([*args, "--quiet"])
    assert eager["history"] == compiled["history"]  # every logged number, bit for bit
    for (name, a), (_, b) in zip(
        eager["model"].state_dict().items(), compiled["model"].state_dict().items()
    ):
        np.testing.assert_array_equal(a, b, err_msg=name)
    return compiled["history"]


def test_mnist_cnn(examples):
    args = "--train-size 64 --test-size 32 --batch-size 32 --test-batch-size 32 --epochs 2"
    history = _both(examples("mnist_cnn"), args.split())
    assert history[-1]["test_loss"] < history[0]["test_loss"] < math.log(10)
    assert history[-1]["test_accuracy"] > 0.3  # ten classes: chance is 0.1
    assert history[1]["lr"] == pytest.approx(0.7 * history[0]["lr"])  # StepLR, gamma 0.7


def test_vae(examples):
    history = _both(examples("vae"), ["--train-size", "512", "--test-size", "128", "--epochs", "2"])
    assert history[1]["test_loss"] < history[0]["test_loss"] < 543.4  # 784 * log 2: p = 1/2


def test_word_language_model_with_tied_weights(examples, tmp_path):
    rng = np.random.default_rng(0)
    words = "the cat dog sat on mat ran far red blue big small and then".split()
    # a text with structure to learn: every sentence has the same grammar
    lines = [
        " ".join([rng.choice(words[:3]), rng.choice(words[3:6]), "the", rng.choice(words[6:10])])
        for _ in range(300)
    ]
    (tmp_path / "corpus.txt").write_text("\n".join(lines))
    module = examples("word_language_model")
    history = _both(
        module,
        [
            "--text",
            str(tmp_path / "corpus.txt"),
            "--epochs",
            "2",
            "--emsize",
            "16",
            "--nhid",
            "16",
            "--lr",
            "5",
            "--bptt",
            "10",
        ],
    )
    assert history[-1]["val_ppl"] < 0.8 * 15  # below the uniform guess over the words seen
    model = module.main(
        [
            "--text",
            str(tmp_path / "corpus.txt"),
            "--epochs",
            "1",
            "--emsize",
            "8",
            "--nhid",
            "8",
            "--eager",
            "--quiet",
        ]
    )["model"]
    assert model.decoder.weight is model.encoder.weight
    assert "decoder.weight" in model.state_dict() and len(list(model.parameters())) == 1 + 8 + 1


def test_time_sequence_prediction_with_lbfgs(examples):
    history = _both(
        examples("time_sequence_prediction"),
        ["--waves", "5", "--length", "16", "--steps", "2", "--future", "4"],
    )
    assert history[-1]["loss"] < 0.5 * history[0]["loss"] and math.isfinite(history[-1]["loss"])
