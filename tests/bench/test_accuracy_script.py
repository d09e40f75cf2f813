"""benchmarks/accuracy.py: its targets cover every preset and its rows say what was measured."""

import importlib.util
from pathlib import Path

import pytest

from tapegrad.models import PRESETS

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "accuracy.py"


@pytest.fixture(scope="module")
def accuracy():
    spec = importlib.util.spec_from_file_location("accuracy_script", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_preset_has_a_target(accuracy):
    assert set(accuracy.TARGETS) == set(PRESETS)


def test_row_reports_final_epoch_mean_range_and_whether_met(accuracy):
    runs = [
        {"test_accuracy": [0.90, 0.95, 0.9440]},
        {"test_accuracy": [0.99, 0.9430]},  # the best epoch does not count, the last does
        {"test_accuracy": [0.9452]},
    ]
    row = accuracy.row("seed-rnn", runs)
    assert row.startswith("| `seed-rnn` | MNIST, 5 | **94.41%** [94.30-94.52] |")
    assert row.endswith("| 94.4% (Flux in 002, 5 epochs) | yes |")
    short = accuracy.row("seed-rnn", [{"test_accuracy": [0.9430]}])
    assert short.endswith("| **no** |")
    assert "IMDB 25k/25k, 5" in accuracy.row("text-cnn", [{"test_accuracy": [0.88]}])


def test_replace_table_rewrites_only_between_the_markers(accuracy):
    readme = f"intro\n{accuracy.BEGIN}\nold | row\n{accuracy.END}\noutro\n"
    out = accuracy.replace_table(readme, "new table")
    assert out == f"intro\n{accuracy.BEGIN}\nnew table\n{accuracy.END}\noutro\n"
    with pytest.raises(SystemExit, match="markers"):
        accuracy.replace_table("no markers here", "t")


def test_unknown_preset_fails_before_training(accuracy):
    with pytest.raises(ValueError, match="unknown preset"):
        accuracy.main(["--presets", "no-such-preset", "--json", ""])


def test_a_language_model_row_gives_its_validation_loss(accuracy):
    runs = [{"test_accuracy": [None, None], "test_loss": [2.5, 1.9]}]
    runs.append({"test_accuracy": [None], "test_loss": [2.1]})
    row = accuracy.row("char-lm", runs)
    assert row.startswith("| `char-lm` | IMDB characters, 5 | validation loss **2.000** ")
    assert "[1.900-2.100]" in row and row.endswith("| - |")
