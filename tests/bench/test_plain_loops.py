"""Every seed workload's plain PyTorch and JAX loops (the bench's self-check references) load the
weights tapegrad exports and train the same model: their first loss is tapegrad's.

The plain scripts import nothing of tapegrad, so a renamed parameter breaks them only when they
run; the bench's smoke test runs one workload (mlp), this the others, for two steps."""

from __future__ import annotations

import importlib.util
import json

import pytest

from tapegrad.bench import harness, selfcheck

PEERS = ["torch"] + (["jax"] if importlib.util.find_spec("jax") else [])
WORKLOADS = ["seed-cnn", "seed-rnn", "text-cnn"]  # mlp: test_harness.py's smoke run


@pytest.fixture(scope="module", params=WORKLOADS)
def prepared(request, real_data, tmp_path_factory):
    folder = tmp_path_factory.mktemp(request.param)
    spec, _ = harness.prepare(request.param, folder, data_dir=real_data)
    spec.update(steps=2, threads=1, allocator="keep", mode="compiled", gemm_n=64)
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
    assert result["first_loss"] == pytest.approx(tapegrad["first_loss"], rel=1e-5), spec["preset"]
