"""Checkpoints at the edges: damaged, foreign and mismatched ones, rotation, and a stop mid-epoch.

Documented behaviour (``tapegrad/train/checkpoint.py``): a damaged checkpoint is named in a
warning and skipped in favour of the newest valid one; only damaged ones is a
``CheckpointError``, never a fresh start; rotation keeps the newest valid checkpoints; one from
another model, optimiser or configuration is refused in one line naming the difference.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from tapegrad import nn, optim
from tapegrad.train import Trainer
from tapegrad.train.checkpoint import CheckpointError, find_latest, list_checkpoints
from tapegrad.train.trainer import TrainingInterrupted


def blobs(n=240, seed=0):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 3, n)
    x = (rng.normal(scale=3.0, size=(3, 8))[y] + rng.normal(size=(n, 8))).astype(np.float32)
    return x, y.astype(np.int64)


def make(opt="adam", hidden=6, seed=0, config=None, **kw):
    rng = np.random.default_rng(seed)
    model = nn.Sequential(nn.Linear(8, hidden, rng=rng), nn.Tanh(), nn.Linear(hidden, 3, rng=rng))
    o = (
        optim.Adam(model.parameters(), lr=0.02)
        if opt == "adam"
        else optim.SGD(model.parameters(), lr=0.05)
    )
    warnings: list[str] = []
    trainer = Trainer(
        model, o, progress=False, log=None, seed=1, config=config, warn=warnings.append, **kw
    )
    return trainer, warnings


def weights(trainer):
    return {k: v.copy() for k, v in trainer.model.state_dict().items()}


def assert_same(a, b):
    assert a.keys() == b.keys()
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)


def three_checkpoints(folder):
    """Checkpoints after epochs 1, 2 (rotation keeps 2) of a 3-epoch run stopped by max_steps."""
    x, y = blobs()
    trainer, _ = make()
    trainer.fit((x, y), None, epochs=3, batch_size=40, max_steps=12, checkpoint_dir=folder)
    return list_checkpoints(folder)


def damage(path, how, rng):
    blob = bytearray(path.read_bytes())
    if how == "truncated":
        del blob[int(rng.integers(1, len(blob))) :]
    elif how == "flipped":
        i = int(rng.integers(0, len(blob)))
        blob[i] ^= 1 << int(rng.integers(0, 8))
    elif how == "zeroed":
        blob[:] = bytes(len(blob))
    path.write_bytes(bytes(blob))


@pytest.mark.parametrize("how", ["truncated", "flipped", "zeroed"])
@pytest.mark.parametrize("seed", range(4))
def test_damaged_newest_is_named_and_skipped(tmp_path, how, seed):
    old, new = three_checkpoints(tmp_path)
    damage(new, how, np.random.default_rng(seed))
    found = find_latest(tmp_path, warn=(warned := []).append)
    if found is None or found[2]["path"] != str(old):
        # a flip inside padding bytes the reader never uses is harmless only if verified
        assert how == "flipped" and found[2]["path"] == str(new)
        return
    assert len(warned) == 1 and str(new) in warned[0] and "corrupt" in warned[0]


@pytest.mark.parametrize("how", ["truncated", "flipped"])
def test_only_damaged_checkpoints_refuse_instead_of_starting_fresh(tmp_path, how):
    for path in three_checkpoints(tmp_path):
        damage(path, how, np.random.default_rng(1))
    trainer, warnings = make()
    x, y = blobs()
    with pytest.raises(CheckpointError, match="no valid checkpoint") as info:
        trainer.fit((x, y), None, epochs=3, batch_size=40, checkpoint_dir=tmp_path, resume=True)
    assert "\n" not in str(info.value)
    assert trainer.global_step == 0  # nothing trained


def test_rotation_never_deletes_the_last_valid_checkpoint(tmp_path):
    x, y = blobs()
    old, new = three_checkpoints(tmp_path)
    damage(new, "truncated", np.random.default_rng(0))
    trainer, warnings = make()
    # resume from `old` (epoch 2 start); a run of one more step writes one new checkpoint
    trainer.fit(
        (x, y), None, epochs=3, batch_size=40, max_steps=7, checkpoint_dir=tmp_path, resume=True
    )
    assert any(str(new) in w for w in warnings)
    left = list_checkpoints(tmp_path)
    assert old in left  # with the newest damaged, `old` is one of the two newest valid ones
    trainer, _ = make()
    trainer.fit((x, y), None, epochs=3, batch_size=40, checkpoint_dir=tmp_path, resume=True)
    assert trainer.global_step == 18


def test_checkpoint_of_another_model_or_optimiser_is_refused_in_one_line(tmp_path):
    x, y = blobs()
    three_checkpoints(tmp_path)
    for trainer, words in (
        (make(hidden=7)[0], "holds another model: 0.weight is float32[6, 8], not float32[7, 8]"),
        (make(opt="sgd")[0], "holds Adam optimiser state; this run uses SGD"),
    ):
        with pytest.raises(CheckpointError, match=re.escape(words)) as info:
            trainer.fit((x, y), None, epochs=3, batch_size=40, checkpoint_dir=tmp_path, resume=True)
        assert "\n" not in str(info.value) and trainer.global_step == 0


def test_other_settings_are_named_each(tmp_path):
    x, y = blobs()
    trainer, _ = make(config={"preset": "p", "lr": 0.02, "optimizer": "adam"})
    trainer.fit((x, y), None, epochs=2, batch_size=40, max_steps=3, checkpoint_dir=tmp_path)
    trainer, _ = make(config={"preset": "q", "lr": 0.1, "optimizer": "adam"})
    with pytest.raises(CheckpointError) as info:
        trainer.fit((x, y), None, epochs=2, batch_size=30, checkpoint_dir=tmp_path, resume=True)
    msg = str(info.value)
    for piece in ("batch size 40 (checkpoint) vs 30 (now)", "lr 0.02 (checkpoint) vs 0.1 (now)",
                  "preset p (checkpoint) vs q (now)"):  # fmt: skip
        assert piece in msg, msg


class StopAt(Trainer):
    """Asks to stop after global step ``at``, as the SIGINT handler would."""

    at = 0

    def train_step(self, x, y):
        out = super().train_step(x, y)
        if self.global_step + 1 == self.at:
            self.request_stop()
        return out


@pytest.mark.parametrize("scheduler", [None, "onecycle"])
def test_stop_mid_epoch_then_resume_is_bit_identical(tmp_path, scheduler):
    x, y = blobs()

    def run(cls=Trainer, **kw):
        rng = np.random.default_rng(0)
        model = nn.Sequential(nn.Linear(8, 6, rng=rng), nn.Tanh(), nn.Linear(6, 3, rng=rng))
        o = optim.Adam(model.parameters(), lr=0.02)
        sched = optim.OneCycleLR(o, 0.02, total_steps=18) if scheduler else None
        t = cls(model, o, progress=False, log=None, seed=1, scheduler=sched)
        t.fit((x, y), None, epochs=3, batch_size=40, **kw)
        return t

    expected = weights(run())
    StopAt.at = 9  # epoch 2, batch 3 of 6
    with pytest.raises(TrainingInterrupted) as info:
        run(StopAt, checkpoint_dir=tmp_path)
    stop = info.value
    assert (stop.epoch, stop.batch) == (2, 3) and stop.checkpoint.exists()
    assert find_latest(tmp_path)[2]["start"] == 3
    resumed = run(checkpoint_dir=tmp_path, resume=True)
    assert resumed.global_step == 18
    assert_same(weights(resumed), expected)


def test_another_version_is_resumed_with_a_warning(tmp_path):
    x, y = blobs()
    trainer, _ = make(config={"preset": "p", "tapegrad": "0.0.1"})
    trainer.fit((x, y), None, epochs=2, batch_size=40, max_steps=3, checkpoint_dir=tmp_path)
    trainer, warnings = make(config={"preset": "p", "tapegrad": "0.1.0"})
    trainer.fit((x, y), None, epochs=2, batch_size=40, checkpoint_dir=tmp_path, resume=True)
    assert trainer.global_step == 12
    assert len(warnings) == 1 and "written by tapegrad 0.0.1, this is 0.1.0" in warnings[0]


def test_weights_under_a_layers_older_names_fit():
    # seed-rnn's recurrent layer was saved as weight_ih/weight_hh before layers took PyTorch's
    # per-layer names (weight_ih_l0); load_state_dict accepts the old names, so the checkpoint
    # and --save checks must too
    from tapegrad.models import build_model
    from tapegrad.train.trainer import _state_problems

    model = build_model("seed-rnn", seed=0)
    old = {k.replace("_l0", ""): v for k, v in model.state_dict().items()}
    assert old.keys() != model.state_dict().keys()
    assert _state_problems(model, old) == ""
    assert "no " in _state_problems(model, {k: v for k, v in list(old.items())[1:]})
