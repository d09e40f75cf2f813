"""``tapegrad bench``: the harness end to end on a few steps, the correctness guard (planted
mismatch and unit cases), the peers' architectures against tapegrad's, the FLOP formulas
against hand counts, and the report. No timing assertions: benchmarks are not tests."""

from __future__ import annotations

import importlib.util
import json
import math

import numpy as np
import pytest

import tapegrad as tg
from tapegrad import nn
from tapegrad.bench import count_flops
from tapegrad.bench.harness import check_agreement
from tapegrad.cli import main
from tapegrad.models import build_model

PEERS = ["torch"] + (["jax"] if importlib.util.find_spec("jax") else [])


# -- FLOPs: hand counts ---------------------------------------------------------------------------
class _TinyRNN(nn.Module):
    def __init__(self, cell=nn.RNN):
        super().__init__()
        rng = np.random.default_rng(0)
        self.rnn = cell(3, 2, batch_first=True, rng=rng)
        self.head = nn.Linear(2, 1, rng=rng)

    def forward(self, x):
        _, h = self.rnn(x)  # h_n (1, N, 2), or (h_n, c_n)
        return self.head((h[0] if isinstance(h, tuple) else h)[0])


def test_flops_linear_stack_hand_count():
    rng = np.random.default_rng(0)
    model = nn.Sequential(nn.Linear(3, 4, rng=rng), nn.ReLU(), nn.Linear(4, 2, rng=rng))
    c = count_flops(model, np.zeros(3, np.float32))
    # forward 3*4 + 4*2 = 20 MACs; weight grads 20; input grad only for the second layer (8)
    assert (c.forward_macs, c.backward_macs) == (20, 28)
    assert c.train_flops_per_sample == 96 and c.per_epoch(10) == 960
    assert all("forward" not in vars(m) for m in model.modules())  # instrumentation removed


def test_flops_conv_hand_count():
    rng = np.random.default_rng(0)
    model = nn.Sequential(
        nn.Conv2d(1, 2, 3, rng=rng), nn.Flatten(), nn.Linear(2 * 3 * 3, 2, rng=rng)
    )
    c = count_flops(model, np.zeros((1, 5, 5), np.float32))
    # conv: 3x3 outputs * 2 channels * (1 * 3 * 3) = 162 MACs, no input grad (the data);
    # linear 18 * 2 = 36 MACs with an input grad
    assert [(lf.forward, lf.weight_grad, lf.input_grad) for lf in c.layers] == [
        (162, 162, 0),
        (36, 36, 36),
    ]
    assert c.train_flops_per_sample == 2 * (162 * 2 + 36 * 3)


@pytest.mark.parametrize("cell,gates", [(nn.RNN, 1), (nn.GRU, 3), (nn.LSTM, 4)])
def test_flops_recurrent_hand_count(cell, gates):
    c = count_flops(_TinyRNN(cell), np.zeros((4, 3), np.float32))
    rnn, head = c.layers
    # T=4 steps, H=2, I=3: forward 4*G*2*(3+2); hidden-state grads for 3 steps: 3*G*2*2
    assert (rnn.forward, rnn.weight_grad, rnn.input_grad) == (40 * gates, 40 * gates, 12 * gates)
    assert (head.forward, head.weight_grad, head.input_grad) == (2, 2, 2)


@pytest.mark.parametrize(
    "preset,kwargs,sample,per_sample",
    [
        # conv 26*26*6*9 = 36504, dense 1014*84 = 85176, 84*10 = 840 MACs:
        # 2 * (3 * (36504 + 85176 + 840) - 36504)
        ("seed-cnn", {}, np.zeros((28, 28), np.float32), 662112),
        # rnn 4*64*(196+64) = 66560, head 640 MACs; hidden grads 3*64*64:
        # 2 * (2 * 66560 + 3 * 4096 + 3 * 640)
        ("seed-rnn", {}, np.zeros((28, 28), np.float32), 294656),
        # conv1d 128 positions * 8 * 50 * 3 = 153600, dense 128; all need input grads
        ("text-cnn", {"vocab_size": 50, "maxlen": 130}, np.zeros(130, np.int64), 922368),
        # 784*128 = 100352 (no input grad), 128*10 = 1280
        ("mlp", {}, np.zeros((28, 28), np.float32), 409088),
    ],
)
def test_flops_of_the_presets(preset, kwargs, sample, per_sample):
    model = build_model(preset, seed=0, **kwargs)
    assert count_flops(model, sample).train_flops_per_sample == per_sample


# -- the peers compute the same function from the same weights -----------------------------------
@pytest.mark.parametrize("preset", ["seed-cnn", "seed-rnn", "text-cnn", "mlp"])
def test_peer_architectures_match_tapegrad(preset):
    kwargs = {"vocab_size": 40, "maxlen": 130} if preset == "text-cnn" else {}
    model = build_model(preset, seed=3, **kwargs)
    weights = model.state_dict()
    rng = np.random.default_rng(1)
    if preset == "text-cnn":
        x = rng.integers(0, 40, size=(5, 130)).astype(np.int32)
    else:
        x = rng.random((5, 28, 28), dtype=np.float32)
    with tg.no_grad():
        expected = model(tg.tensor(x)).data

    import torch

    from tapegrad.bench import torch_runner

    tm = torch_runner.build(preset, weights)
    torch_runner.load_tapegrad_weights(tm, weights)
    with torch.no_grad():
        np.testing.assert_allclose(tm(torch.from_numpy(x)).numpy(), expected, rtol=2e-5, atol=2e-6)
    if "jax" in PEERS:
        from tapegrad.bench import jax_runner

        got = np.asarray(jax_runner.forward(preset)(weights, x))
        np.testing.assert_allclose(got, expected, rtol=2e-5, atol=2e-6)


@pytest.mark.parametrize("preset", ["char-lm", "resnet"])
def test_general_peer_architectures_match_tapegrad(preset):
    """char-lm in evaluation mode (no dropout), resnet in training mode (batch statistics):
    the PyTorch and JAX models compute tapegrad's logits from its weights."""
    lm = preset == "char-lm"
    model = build_model(preset, seed=3, **({"vocab_size": 40} if lm else {}))
    model.train(not lm)
    weights = {k: np.asarray(v).copy() for k, v in model.state_dict().items()}
    rng = np.random.default_rng(1)
    x = rng.integers(0, 40, size=(3, 64)) if lm else rng.random((5, 784), dtype=np.float32)
    with tg.no_grad():
        expected = model(tg.tensor(x)).data

    import torch

    from tapegrad.bench import torch_runner

    tm = torch_runner.build(preset, weights)
    torch_runner.load_tapegrad_weights(tm, weights)
    tm.train(not lm)
    with torch.no_grad():
        got = tm(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(got, expected, rtol=2e-4, atol=2e-5)
    if "jax" in PEERS:
        from tapegrad.bench.jax_general import APPLY, split_buffers

        params, buffers = split_buffers(weights)
        got, _ = APPLY[preset](params, buffers, x, not lm, None)
        np.testing.assert_allclose(np.asarray(got), expected, rtol=2e-4, atol=2e-5)


def test_guard_compares_dropout_workloads_on_the_reference_loss_and_a_language_model_on_loss():
    def lm(first, reference, val):
        return {"first_loss": first, "reference_loss": reference, "test_accuracy": None,
                "test_loss": val}  # fmt: skip

    ok = {"tapegrad": lm(5.1, 5.19, 2.00), "torch": lm(5.3, 5.19, 2.04)}
    assert check_agreement(ok, band_points=1.5) == []  # first losses differ: dropout
    bad = {"tapegrad": lm(5.1, 5.19, 2.00), "torch": lm(5.1, 5.20, 2.10)}
    failures = check_agreement(bad, band_points=1.5)
    assert len(failures) == 2
    assert "tapegrad 5.19 vs torch 5.2" in failures[0]
    assert "tapegrad 2.0000 vs torch 2.1000" in failures[1] and "0.05-nat band" in failures[1]


# -- the guard ------------------------------------------------------------------------------------
def _summary(loss, acc):
    return {"first_loss": loss, "test_accuracy": acc}


def test_guard_passes_agreeing_frameworks():
    s = {"tapegrad": _summary(2.3025851, 0.9712), "torch": _summary(2.3025853, 0.9650)}
    assert check_agreement(s, band_points=1.5) == []


def test_guard_names_both_values_on_disagreement():
    s = {
        "tapegrad": _summary(2.302585, 0.9712),
        "torch": _summary(2.302585, 0.9501),  # 2.11 points apart
        "jax": _summary(2.3026, 0.9712),  # 6.5e-6 relative: fine
        "other": _summary(2.31, 0.9712),  # 3.2e-3 relative: not
    }
    failures = check_agreement(s, band_points=1.5)
    assert len(failures) == 2
    assert "tapegrad 97.12% vs torch 95.01%" in failures[0] and "1.5-point" in failures[0]
    assert "tapegrad 2.302585 vs other 2.31" in failures[1] and "> 1e-05" in failures[1]


def test_guard_fails_on_nan():
    s = {"tapegrad": _summary(2.3, 0.9), "torch": _summary(math.nan, math.nan)}
    assert len(check_agreement(s, band_points=1.5)) == 2


# -- end to end: a tiny smoke run and a planted mismatch ------------------------------------------
@pytest.fixture(scope="module")
def smoke(real_data, tmp_path_factory):
    path = tmp_path_factory.mktemp("bench") / "mlp.json"
    argv = ["bench", "mlp", "--vs", ",".join(PEERS), "--steps", "5", "--repeats", "1"]
    argv += ["--threads", "1", "--data-dir", str(real_data), "--json", str(path)]
    rc = main(argv)
    return rc, json.loads(path.read_text())


def test_smoke_run_reports_every_field(smoke):
    rc, result = smoke
    assert result["guard"]["passed"], result["guard"]
    # five steps on a shared machine may well miss the 10% band: the exit status must say so
    assert rc == (0 if result["self_check"]["passed"] else 6), result["self_check"]
    assert result["frameworks"] == ["tapegrad", *PEERS] and result["unit"] == "step"
    assert result["threads"] == 1 and result["command"].startswith("tapegrad bench mlp")
    for fw in result["frameworks"]:
        s = result["summary"][fw]
        run = result["runs"][fw][0]
        assert run["steps"] == 5 and len(run["step_seconds"]) == 5
        assert s["first"]["median"] > 0 and s["steady"]["n"] == 4
        assert s["peak_rss"] > 50 * 2**20
        assert 0 <= s["test_accuracy"] <= 1 and math.isfinite(s["final_loss"])
        assert s["alloc_per_epoch"] is None or s["alloc_per_epoch"] > 0, s["alloc_method"]
    assert result["summary"]["tapegrad"]["alloc_per_epoch"] > 0  # tracemalloc always works
    assert result["summary"]["tapegrad"]["mode"] == "compiled"
    # tapegrad's one repeat started from an empty kernel cache: its first step is the cold one
    assert result["runs"]["tapegrad"][0]["kernel_cache"] == "cold"
    assert result["summary"]["tapegrad"]["first_cold"]["n"] == 1
    assert all(result["summary"][p]["first_cold"] is None for p in PEERS)
    for peer in PEERS:
        assert result["ratios"][peer]["steady"]["n"] == 1
        assert result["ratios"][f"{peer}-plain"]["steady"]["n"] == 1
        plain = result["plain"][peer]
        assert plain["steady"]["n"] == 4 and plain["mode"] == "plain loop"
        # the plain loop trained the same model from the same weights on the same batch
        assert plain["first_loss"] == pytest.approx(
            result["summary"]["tapegrad"]["first_loss"], rel=1e-5
        )
        check = result["self_check"]["checks"][peer]
        assert check["plain"] == pytest.approx(plain["steady"]["median"])
        assert check["worker"] == pytest.approx(result["summary"][peer]["steady"]["median"])
        assert check["passed"] == (abs(check["ratio"] - 1) <= 0.10)
    # one thread: one busy core at most (CPU time over wall time, a little over for start-up)
    for s in [*result["summary"].values(), *result["plain"].values()]:
        assert 0 < s["cores_busy"] < 1.3
    assert result["summary"]["tapegrad"]["busy_threads"] >= 1
    assert all(r["cpus"] == result["runs"]["tapegrad"][0]["cpus"] for r in result["runs"]["torch"])
    assert len(result["runs"]["tapegrad"][0]["cpus"]) == 1
    assert result["allocator"] == "keep"
    floor = result["floor"]
    assert floor["gemm_flops_per_second"] > 1e8
    assert floor["step_seconds"] == pytest.approx(409088 * 100 / floor["gemm_flops_per_second"])


def test_planted_mismatch_fails_loudly(real_data, tmp_path, capsys):
    path = tmp_path / "bad.json"
    argv = ["bench", "mlp", "--vs", "torch", "--steps", "2", "--repeats", "1", "--threads", "1"]
    argv += ["--data-dir", str(real_data), "--json", str(path), "--perturb-peer"]
    assert main(argv) == 4
    err = capsys.readouterr().err
    assert "frameworks disagree: first-step loss: tapegrad" in err and "vs torch" in err
    assert json.loads(path.read_text())["guard"]["passed"] is False


@pytest.mark.parametrize(
    "args,message",
    [
        (["--vs", "tensorflow"], "unknown peer(s) ['tensorflow']"),
        (["--threads", "999"], "--threads must be in 1.."),
        (["--repeats", "0"], "--repeats must be at least 1"),
        (["--threads", "1,x"], "--threads takes numbers or 'all'"),
        (["--threads", "1,1"], "--threads names a setting twice"),
        (["--batch-size", "0"], "--batch-size must be at least 1"),
        (["--width", "4", "--vs", "torch"], None),  # mlp has a wider variant: no error here
    ],
)
def test_bad_options_are_one_line_errors(args, message, capsys, monkeypatch):
    if message is None:  # a valid option: stop the run where it would start measuring
        from tapegrad.bench import harness

        def stop(*a, **k):
            raise harness.BenchError("stopped before measuring")

        monkeypatch.setattr(harness, "prepare", stop)
        message = "stopped before measuring"
    assert main(["bench", "mlp", *args]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


def test_width_only_for_models_that_have_a_wider_variant(capsys):
    assert main(["bench", "seed-rnn", "--width", "4"]) == 2
    assert (
        "--width: seed-rnn has no wider variant; seed-cnn and mlp have" in capsys.readouterr().err
    )


def test_parse_threads():
    from tapegrad.bench.harness import BenchError, parse_threads

    assert parse_threads(None, cpus=2) == [2]
    assert parse_threads("all,1", cpus=2) == [2, 1]
    assert parse_threads("1", cpus=2) == [1] and parse_threads(2, cpus=2) == [2]
    with pytest.raises(BenchError, match="must be in 1..2"):
        parse_threads("3", cpus=2)
    with pytest.raises(BenchError, match="numbers or 'all'"):
        parse_threads("two", cpus=2)


# -- the report -----------------------------------------------------------------------------------
def test_report_renders_tables_and_charts(smoke, tmp_path):
    from tapegrad.bench import report

    _, result = smoke
    text = report.markdown([result], commands=["tapegrad bench mlp ..."])
    assert "### mlp" in text and "| tapegrad (compiled) |" in text and "Floor:" in text
    for peer in PEERS:
        assert f"| {peer} (" in text
    assert "Guard: passed" in text and "micro" in text
    paths = report.charts([result], tmp_path)
    assert [p.name for p in paths] == ["time_per_epoch.png", "memory_per_epoch.png", "accuracy.png"]
    assert all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in paths)


def test_first_epoch_note_separates_cold_and_warm_kernel_caches():
    from tapegrad.bench.harness import first_epoch_note, summarise

    def run(first, cache):
        return {
            "epoch_seconds": [first, 1.0, 1.1],
            "step_seconds": [0.01] * 6,
            "batches_per_epoch": 2,
            "kernel_cache": cache,
            **{k: 1 for k in ("peak_rss", "rss_before_training", "final_loss", "test_loss")},
            **{k: 1 for k in ("alloc_per_epoch", "alloc_per_step", "alloc_method")},
            **{k: 1 for k in ("first_loss", "test_accuracy", "mode", "notes", "versions")},
        }

    s = summarise([run(9.0, "cold"), run(1.5, "warm"), run(1.7, "warm")], steps_mode=False)
    assert s["first_cold"]["median"] == 9.0 and s["first"]["median"] == 1.6
    note = first_epoch_note({"unit": "epoch", "summary": {"tapegrad": s}})
    assert note.startswith(
        "First epoch of tapegrad: 1.60s with a warm kernel cache (2 run(s)), 9.00s"
    )
    assert "+0.55s over a steady epoch, cold +7.95s" in note


def test_first_epoch_note_needs_a_warm_run():
    # with one repeat the only run is the cold one: the table's first epoch falls back to it,
    # and the note must not present that cold epoch as the warm-cache one
    from tapegrad.bench.harness import first_epoch_note, summarise

    run = {
        "epoch_seconds": [9.0, 1.0, 1.1],
        "step_seconds": [0.01] * 6,
        "batches_per_epoch": 2,
        "kernel_cache": "cold",
        **{k: 1 for k in ("peak_rss", "rss_before_training", "final_loss", "test_loss")},
        **{k: 1 for k in ("alloc_per_epoch", "alloc_per_step", "alloc_method")},
        **{k: 1 for k in ("first_loss", "test_accuracy", "mode", "notes", "versions")},
    }
    s = summarise([run], steps_mode=False)
    assert s["first"]["median"] == 9.0 and s["first_cold"]["median"] == 9.0
    assert first_epoch_note({"unit": "epoch", "summary": {"tapegrad": s}}) is None


def test_a_short_run_is_judged_on_its_mean_training_loss_not_its_test_accuracy():
    """Under an epoch the test accuracy hangs on rounding (resnet: one ulp moved it 11 points),
    so a short run compares the mean training loss over the run, within 2% relative."""

    def run(acc, mean_loss):
        return {"first_loss": 2.3025851, "test_accuracy": acc, "final_loss": mean_loss}

    apart = {"tapegrad": run(0.5459, 1.3597), "torch": run(0.4255, 1.3557)}
    assert len(check_agreement(apart, band_points=1.5)) == 1  # a whole-epoch run: accuracy
    assert check_agreement(apart, band_points=1.5, short=True) == []
    off = {"tapegrad": run(0.5459, 1.3597), "torch": run(0.5459, 1.40)}  # 2.9% apart
    (failure,) = check_agreement(off, band_points=1.5, short=True)
    assert "tapegrad 1.3597 vs torch 1.4000" in failure and "> 2%" in failure
    nan = {"tapegrad": run(0.5, 1.3597), "torch": run(0.5, math.nan)}
    assert len(check_agreement(nan, band_points=1.5, short=True)) == 1
