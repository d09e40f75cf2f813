"""The trainer on small synthetic problems: records, checkpoints and exact resume, NaN guard."""

import json

import numpy as np
import pytest

from tapegrad import nn, optim
from tapegrad.train import Trainer, TrainingDiverged, load_latest, write_csv, write_json


def blobs(n=240, classes=3, seed=0):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, classes, n)
    centers = rng.normal(scale=3.0, size=(classes, 4, 4))
    x = (centers[y] + rng.normal(size=(n, 4, 4))).astype(np.float32)
    return x, y.astype(np.int64)


def make(seed=0, lr=0.05, opt="adam"):
    model = nn.Sequential(
        nn.Flatten(),
        nn.Linear(16, 8, rng=np.random.default_rng(seed)),
        nn.Tanh(),
        nn.Linear(8, 3, rng=np.random.default_rng(seed + 1)),
    )
    cls = optim.Adam if opt == "adam" else optim.SGD
    return model, cls(model.parameters(), lr=lr)


def test_fit_learns_and_records_every_field(capsys):
    x, y = blobs()
    model, opt = make()
    trainer = Trainer(model, opt, seed=0, progress=False)
    records = trainer.fit((x[:200], y[:200]), (x[200:], y[200:]), epochs=3, batch_size=32)
    assert [r.epoch for r in records] == [1, 2, 3]
    assert records[0].first and not records[1].first
    assert records[-1].loss < records[0].loss
    assert records[-1].test_accuracy >= 0.9
    for r in records:
        assert r.steps == 7 and r.seconds > 0 and r.peak_rss_bytes > 0
        assert r.allocated_per_step is not None and r.allocated_per_step > 0
        assert r.allocated_bytes == r.allocated_per_step * r.steps
    out = capsys.readouterr().out
    assert "alloc/epoch" in out and "test acc" in out and "steady-state epoch time" in out
    assert trainer.global_step == 21


def test_max_steps_stops_mid_epoch():
    x, y = blobs()
    model, opt = make()
    trainer = Trainer(model, opt, progress=False, log=None)
    records = trainer.fit((x, y), None, epochs=5, batch_size=32, max_steps=10)
    assert trainer.global_step == 10
    assert [r.steps for r in records] == [8, 2]
    assert records[-1].test_accuracy is None


def _weights(model):
    return {k: v.copy() for k, v in model.state_dict().items()}


@pytest.mark.parametrize("stop_after", [8, 11])  # at an epoch boundary, and mid-epoch
def test_resume_is_bit_identical(tmp_path, stop_after):
    x, y = blobs()
    model, opt = make()
    Trainer(model, opt, seed=3, progress=False, log=None).fit((x, y), None, epochs=3, batch_size=30)
    expected = _weights(model)

    ckpt = tmp_path / "ckpt"
    model, opt = make()
    Trainer(model, opt, seed=3, progress=False, log=None).fit(
        (x, y), None, epochs=3, batch_size=30, max_steps=stop_after, checkpoint_dir=ckpt
    )
    assert load_latest(ckpt) is not None
    model, opt = make(seed=99)  # different initial weights: everything must come from the file
    trainer = Trainer(model, opt, seed=3, progress=False, log=None)
    records = trainer.fit((x, y), None, epochs=3, batch_size=30, checkpoint_dir=ckpt, resume=True)
    assert trainer.global_step == 24
    assert [r.epoch for r in records] == [1, 2, 3]
    got = _weights(model)
    for k in expected:
        np.testing.assert_array_equal(got[k], expected[k], err_msg=k)


def test_resume_without_checkpoint_starts_fresh(tmp_path, capsys):
    x, y = blobs()
    model, opt = make()
    Trainer(model, opt, progress=False).fit(
        (x, y), None, epochs=1, batch_size=60, checkpoint_dir=tmp_path / "none", resume=True
    )
    assert "starting fresh" in capsys.readouterr().out


def test_nan_loss_stops_with_epoch_and_step_and_keeps_checkpoint(tmp_path):
    x, y = blobs()
    model, opt = make(lr=0.01)
    ckpt = tmp_path / "ckpt"
    trainer = Trainer(model, opt, progress=False, log=None)
    trainer.fit((x, y), None, epochs=1, batch_size=30, checkpoint_dir=ckpt)
    before = _weights(model)
    saved = load_latest(ckpt)[2]["path"]
    x_bad = x.copy()
    x_bad[:] = np.nan
    with pytest.raises(TrainingDiverged, match=r"epoch 2, step 1 .*detect_anomaly"):
        trainer.fit((x_bad, y), None, epochs=2, batch_size=30, checkpoint_dir=ckpt, resume=True)
    after = _weights(model)
    for k in before:  # nothing was updated with the NaN loss
        np.testing.assert_array_equal(before[k], after[k])
    assert load_latest(ckpt)[2]["path"] == saved


def test_binary_task_and_reports(tmp_path):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(200, 5)).astype(np.float32)
    y = (x[:, 0] + x[:, 1] > 0).astype(np.int64)
    model = nn.Sequential(nn.Linear(5, 1, rng=rng))
    trainer = Trainer(
        model, optim.Adam(model.parameters(), lr=0.05), task="binary", progress=False, log=None
    )
    records = trainer.fit((x, y), (x, y), epochs=4, batch_size=20)
    assert records[-1].test_accuracy > 0.9
    write_json(tmp_path / "r.json", records, {"preset": "test"})
    write_csv(tmp_path / "r.csv", records)
    data = json.loads((tmp_path / "r.json").read_text())
    assert data["preset"] == "test" and len(data["epochs"]) == 4
    assert set(data["epochs"][0]) >= {
        "seconds",
        "allocated_bytes",
        "peak_rss_bytes",
        "loss",
        "train_accuracy",
        "test_accuracy",
        "first",
    }
    assert (tmp_path / "r.csv").read_text().count("\n") == 5


def test_plot_writes_png(tmp_path):
    from tapegrad.train import plot

    x, y = blobs()
    model, opt = make()
    records = Trainer(model, opt, progress=False, log=None).fit(
        (x, y), (x, y), epochs=2, batch_size=60
    )
    plot(tmp_path / "p.png", records, title="blobs")
    assert (tmp_path / "p.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bad_task():
    model, opt = make()
    with pytest.raises(ValueError, match="task"):
        Trainer(model, opt, task="ranking")


def test_progress_bar_shows_loss_and_speed_on_a_terminal(monkeypatch):
    # tqdm leaves ``disable`` None on a terminal; the postfix must still be set
    postfixes = []

    class Bar:
        disable = None

        def update(self, n):
            pass

        def set_postfix(self, **kw):
            postfixes.append(kw)

        def close(self):
            pass

    x, y = blobs()
    model, opt = make()
    trainer = Trainer(model, opt, progress=True, log=None)
    monkeypatch.setattr(trainer, "_bar", lambda *a: Bar())
    trainer.fit((x, y), None, epochs=1, batch_size=10)
    assert postfixes and set(postfixes[0]) == {"loss", "samples_s"}


def test_table_stays_aligned_for_huge_losses():
    from dataclasses import replace

    from tapegrad.train import EpochRecord, table_header, table_row

    r = EpochRecord(1, 10, 1.5, 100.0, 1024, 100, 2**30, 0.25, 0.9, 0.3, 0.91, 0.1, True)
    widths = {len(table_header())}
    for loss in (0.25, 123.4567, 8.5e9, float("inf"), float("nan")):
        widths.add(len(table_row(replace(r, loss=loss))))
    assert len(widths) == 1, widths
    assert "8.50e+09" in table_row(replace(r, loss=8.5e9))


def test_plot_epoch_ticks_are_whole_numbers(tmp_path, monkeypatch):
    import matplotlib.pyplot as plt

    from tapegrad.train import plot

    figures = []
    monkeypatch.setattr(plt, "close", figures.append)
    x, y = blobs()
    model, opt = make()
    records = Trainer(model, opt, progress=False, log=None).fit(
        (x, y), (x, y), epochs=2, batch_size=60
    )
    plot(tmp_path / "p.png", records)
    fig = figures[0]
    fig.canvas.draw()
    for ax in fig.axes:
        ticks = [t for t in ax.get_xticks() if ax.get_xlim()[0] <= t <= ax.get_xlim()[1]]
        assert ticks and all(float(t).is_integer() for t in ticks), ticks
    plt.close(fig)


def test_regression_task_reports_mse_and_no_accuracy():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(300, 3)).astype(np.float32)
    y = (x @ np.array([1.0, -2.0, 0.5], np.float32) + 1).astype(np.float32)
    model = nn.Sequential(nn.Linear(3, 1, rng=rng))
    trainer = Trainer(
        model, optim.Adam(model.parameters(), lr=0.1), task="regression", progress=False, log=None
    )
    records = trainer.fit((x, y), (x, y), epochs=20, batch_size=30)
    assert records[-1].train_accuracy is None and records[-1].test_accuracy is None
    assert records[-1].test_loss < 1e-3 < records[0].loss
