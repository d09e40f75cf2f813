"""The train command parses into one RunConfig that train/ consumes: every option has a field,
the checks speak in one line, and nothing in train/ reaches back into the CLI."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

from tapegrad.cli import build_parser
from tapegrad.models import find_preset
from tapegrad.train.config import RunConfig, UserError

TRAIN = Path(__file__).resolve().parents[2] / "src" / "tapegrad" / "train"


def _train_dests() -> set[str]:
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    return {a.dest for a in sub.choices["train"]._actions if a.dest != "help"}


def test_every_train_option_is_a_field_of_the_run_config():
    fields = {f.name for f in dataclasses.fields(RunConfig)}
    assert _train_dests() == fields - {"argv"}


def test_the_parsed_command_line_becomes_the_config():
    argv = ["train", "mlp", "--lr", "0.5", "--scheduler", "step", "--step-every", "2", "--eager"]
    args = build_parser().parse_args(argv)
    args.argv = argv[1:]
    config = RunConfig.from_namespace(args)
    assert (config.preset, config.lr, config.scheduler, config.eager) == ("mlp", 0.5, "step", True)
    assert config.scheduler_spec(epochs=3) == {"name": "step", "every": 2, "gamma": 0.1}
    assert config.resume_command() == (
        "tapegrad train mlp --lr 0.5 --scheduler step --step-every 2 --eager --resume"
    )
    assert config.facts()["command"] == "train" and "argv" not in config.facts()


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"momentum": 0.9}, "--momentum applies to sgd and rmsprop; adam (the mlp default)"),
        ({"step_every": 2}, "--step-every sets the step schedule's decay interval"),
        ({"resume": True}, "--resume needs --checkpoint-dir"),
        ({"dataset": "imdb"}, "preset mlp trains on mnist or fashion-mnist, not 'imdb'"),
    ],
)
def test_the_checks_refuse_in_one_line(changes, message):
    config = RunConfig("mlp", **changes)
    with pytest.raises(UserError) as e:
        config.check(find_preset("mlp"))
    assert str(e.value).startswith(message) and "\n" not in str(e.value)


def test_nothing_in_train_imports_the_cli():
    for path in sorted(TRAIN.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                names = [node.module or ""] + [a.name for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            assert not any(n == "cli" or n.endswith(".cli") or ".cli." in n for n in names), (
                f"{path.name} imports the CLI"
            )
