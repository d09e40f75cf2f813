"""Every workload's plain PyTorch and JAX loops (the bench's self-check references) load the
weights tapegrad exports and train the same model: their first loss is tapegrad's (char-lm,
whose dropout masks differ by framework: the first batch's loss in evaluation mode as well).

The plain scripts import nothing of tapegrad, so a renamed parameter breaks them only when they
run; the bench's smoke test runs one workload (mlp), this the others, for two steps. The general
workloads' test sets are cut to 64 samples here: tapegrad's worker evaluates them."""

from __future__ import annotations

import importlib.util
import json

import numpy as np
import pytest

from tapegrad.bench import harness, selfcheck

PEERS = ["torch"] + (["jax"] if importlib.util.find_spec("jax") else [])
WORKLOADS = ["seed-cnn", "seed-rnn", "text-cnn", "char-lm", "resnet"]  # mlp: test_harness.py


@pytest.fixture(scope="module", params=WORKLOADS)
def prepared(request, real_data, tmp_path_factory):
    folder = tmp_path_factory.mktemp(request.param)
    spec, _ = harness.prepare(request.param, folder, data_dir=real_data)
    spec.update(steps=2, threads=1, allocator="keep", mode="compiled", gemm_n=64)
    if request.param in ("char-lm", "resnet"):
        for name in ("test_x", "test_y"):
            np.save(spec["data"][name], np.load(spec["data"][name])[:64])
    path = folder / "spec.json"
    path.write_text(json.dumps(spec))
    tapegrad = harness.run_worker("tapegrad", spec, path, timeout=300)
    return spec, path, tapegrad


@pytest.mark.parametrize("peer", PEERS)
def test_plain_loop_trains_the_exported_model(prepared, peer):
    spec, path, tapegrad = prepared
    result = harness.launch(
        f"plain {peer} loop",
        selfcheck.command(peer, path),
        harness.thread_env(1),
        harness.cpus_for(1, 0),
        timeout=300,
    )
    assert len(result["step_seconds"]) == 2
    if spec["stochastic"]:  # dropout: first training losses differ by framework, not by much
        assert spec["preset"] == "char-lm"
        assert result["reference_loss"] == pytest.approx(tapegrad["reference_loss"], rel=1e-5)
        assert result["first_loss"] == pytest.approx(tapegrad["first_loss"], rel=1e-2)
    else:
        assert result["reference_loss"] is None
        assert result["first_loss"] == pytest.approx(tapegrad["first_loss"], rel=1e-5)


@pytest.mark.parametrize("peer", PEERS)
def test_bench_worker_trains_the_exported_model(prepared, peer):
    """The bench's own PyTorch and JAX workers (beside the plain loops) start where tapegrad
    does: the general workloads' optimisers, BatchNorm buffers and dropout are wired."""
    spec, path, tapegrad = prepared
    if spec["preset"] not in ("char-lm", "resnet"):
        pytest.skip("the seed workloads' workers: test_harness.py and the bench's runs")
    result = harness.run_worker(peer, spec, path, timeout=300)
    key = "reference_loss" if spec["stochastic"] else "first_loss"
    assert result[key] == pytest.approx(tapegrad[key], rel=1e-5)
    assert result["test_loss"] == pytest.approx(tapegrad["test_loss"], rel=0.05)
