"""Gradient micro-benchmarks: every framework computes the same gradients, the run returns the
documented structure, the report renders, and a wrong gradient stops the run before timing.

No timing assertions: benchmarks are not tests.
"""

from __future__ import annotations

import dataclasses
import gc
import importlib
import importlib.util
import json
import os

import numpy as np
import pytest

from tapegrad.bench import micro

INSTALLED = [
    fw
    for fw, spec in micro.FRAMEWORKS.items()
    if all(importlib.util.find_spec(m) is not None for m in spec.requires)
]


@pytest.fixture(scope="module", autouse=True)
def _older_objects_frozen():
    """micro.run collects before each timed sample; the objects alive before this module and the
    frameworks' modules (PyTorch, JAX, ...) are left out of those collections (``gc.freeze``),
    which then free the benchmarks' own garbage as before without walking the whole heap each
    time (three quarters of this module's time without it)."""
    # frozen objects are hidden from gc.get_referrers too, which tapegrad's in-place checks use
    # to find graph nodes: every tensor and graph here is made after the freeze
    for fw in INSTALLED:  # imported first, so that their modules are among the frozen
        for module in micro.FRAMEWORKS[fw].requires:
            importlib.import_module(module)
    gc.collect()
    gc.freeze()
    yield
    gc.unfreeze()


def _inputs(name: str) -> dict[str, np.ndarray]:
    return micro.BENCHMARKS[name].make_inputs(np.random.default_rng(0))


def test_a_peer_is_installed():
    # torch is a test dependency: without a peer the agreement test below would compare
    # tapegrad with itself only. (jax and autograd come with the bench extra.)
    assert INSTALLED[0] == "tapegrad" and "torch" in INSTALLED


@pytest.mark.parametrize("name", list(micro.BENCHMARKS))
def test_gradients_agree_across_frameworks(name):
    bench = micro.BENCHMARKS[name]
    inputs = _inputs(name)
    steps = {fw: micro.FRAMEWORKS[fw].build(bench, inputs) for fw in INSTALLED}
    grads = micro.check_gradients(steps, bench)  # raises GradientMismatchError on disagreement
    assert set(grads) == set(INSTALLED)
    for fw, gs in grads.items():
        assert len(gs) == len(bench.wrt)
        for arg, g in zip(bench.wrt, gs):
            assert g.shape == inputs[arg].shape, (fw, arg)
            assert g.dtype == np.float32, (fw, arg, g.dtype)
            assert np.all(np.isfinite(g))
    # Not trivially zero: every gradient has a nonzero entry.
    assert all(np.any(g != 0) for g in grads["tapegrad"])


def _closed_form(name: str, inp: dict[str, np.ndarray]) -> list[np.ndarray]:
    """Hand-derived gradients in float64, independent of every framework."""
    f64 = {k: v.astype(np.float64) if v.dtype.kind == "f" else v for k, v in inp.items()}
    if name == "sincos":
        x = f64["x"]
        return [-np.cos(np.cos(x)) * np.sin(x)]
    if name == "loop":
        x, n = f64["x"], micro.LOOP_ITERATIONS
        return [n * np.sin(x) ** (n - 1) * np.cos(x)]
    if name == "logsumexp":
        e = np.exp(f64["x"])
        return [e / e.sum()]
    if name == "logistic_regression":
        w, b, X, y = f64["w"], f64["b"], f64["X"], f64["y"]
        s = 1.0 / (1.0 + np.exp(y * (X @ w + b)))  # d/dz softplus(-y z) = -y * sigmoid(-y z)
        d = -y * s / len(y)
        return [X.T @ d, np.asarray(d.sum())]
    if name == "mlp":
        W1, b1, W2, b2, x, labels = (f64[k] for k in ("W1", "b1", "W2", "b2", "x", "labels"))
        pre = x @ W1.T + b1
        h = np.maximum(pre, 0.0)
        z = h @ W2.T + b2
        p = np.exp(z - z.max(axis=1, keepdims=True))
        p /= p.sum(axis=1, keepdims=True)
        dz = p.copy()
        dz[np.arange(len(labels)), labels] -= 1.0
        dz /= len(labels)
        dh = (dz @ W2) * (pre > 0)
        return [dh.T @ x, dh.sum(0), dz.T @ h, dz.sum(0)]
    raise AssertionError(name)


@pytest.mark.parametrize("name", list(micro.BENCHMARKS))
def test_tapegrad_matches_closed_form_gradients(name):
    # The reference everyone is checked against is itself right.
    bench = micro.BENCHMARKS[name]
    inputs = _inputs(name)
    got = micro.check_gradients(
        {"tapegrad": micro.FRAMEWORKS["tapegrad"].build(bench, inputs)}, bench
    )
    micro.compare_gradients(bench, "closed form", _closed_form(name, inputs), got["tapegrad"])


def test_mismatch_names_benchmark_framework_argument_and_values():
    bench = micro.BENCHMARKS["logistic_regression"]
    ref = [np.array([1.0, 2.0, 3.0], np.float32), np.asarray(np.float32(0.5))]
    micro.compare_gradients(bench, "peer", [r.copy() for r in ref], ref)  # equal: no error
    wrong = [np.array([1.0, 2.01, 3.0], np.float32), ref[1]]
    with pytest.raises(
        micro.GradientMismatchError, match=r"logistic_regression.*peer.*wrt w.*\(1,\)"
    ):
        micro.compare_gradients(bench, "peer", wrong, ref)
    with pytest.raises(micro.GradientMismatchError, match="wrt b has shape"):
        micro.compare_gradients(bench, "peer", [ref[0], np.zeros(2, np.float32)], ref)
    with pytest.raises(micro.GradientMismatchError, match="returned 1 gradients"):
        micro.compare_gradients(bench, "peer", ref[:1], ref)
    with pytest.raises(micro.GradientMismatchError, match="wrt w"):
        micro.compare_gradients(bench, "peer", [np.array([1.0, np.nan, 3.0]), ref[1]], ref)


def _planted(name: str, build) -> micro.Framework:
    return micro.Framework(name, ("numpy",), build, "numpy")


def test_run_stops_on_a_planted_wrong_gradient_before_timing(monkeypatch):
    timed = []

    def wrong_build(bench, inputs):
        right = micro.FRAMEWORKS["tapegrad"].build(bench, inputs)

        def step():
            timed.append(1)
            return [g * 1.01 for g in right()]

        return step

    monkeypatch.setitem(micro.FRAMEWORKS, "planted", _planted("planted", wrong_build))
    with pytest.raises(micro.GradientMismatchError, match="'sincos': planted's gradient wrt x"):
        micro.run(["tapegrad", "planted"], repeats=1, quick=True, benchmarks=["sincos"])
    assert len(timed) == 1  # the check ran it once; nothing was timed


def test_missing_peer_is_skipped_with_a_note(monkeypatch):
    absent = micro.Framework("absent", ("no_such_module_tapegrad_test",), None, "absent")
    monkeypatch.setitem(micro.FRAMEWORKS, "absent", absent)
    result = micro.run(["tapegrad", "absent"], repeats=1, quick=True, benchmarks=["sincos"])
    assert result["frameworks"] == ["tapegrad"]
    assert "no_such_module_tapegrad_test" in result["skipped"]["absent"]
    assert any("absent skipped" in n for n in result["notes"])
    assert set(result["benchmarks"]["sincos"]) == {"tapegrad"}
    assert "absent skipped" in micro.markdown(result)


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="unknown framework.*tensorflow"):
        micro.run(["tensorflow"])
    with pytest.raises(ValueError, match="unknown benchmark.*conv"):
        micro.run(["tapegrad"], benchmarks=["conv"])
    with pytest.raises(ValueError, match="repeats must be >= 1"):
        micro.run(["tapegrad"], repeats=0)


@pytest.fixture(scope="module")
def quick_result():
    before = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    result = micro.run(INSTALLED, repeats=2, quick=True)
    if before is not None:
        assert os.sched_getaffinity(0) == before  # pinning is undone afterwards
    return result


def test_quick_run_has_the_documented_structure(quick_result):
    r = quick_result
    assert set(r["benchmarks"]) == set(micro.BENCHMARKS)
    assert r["definitions"] == {n: b.definition for n, b in micro.BENCHMARKS.items()}
    assert r["threads"] == 1
    assert r["frameworks"] == INSTALLED
    assert r["skipped"] == {}
    assert r["repeats"] == 2
    for name, row in r["benchmarks"].items():
        assert set(row) == set(INSTALLED), name
        for fw, t in row.items():
            assert 0 < t["min_us"] <= t["median_us"] <= t["max_us"], (name, fw, t)
            assert t["calls"] >= 1
    json.dumps(r)  # serialisable as is (the CLI writes it with --json)


def test_markdown_renders_every_benchmark_and_ratio(quick_result):
    text = micro.markdown(quick_result)
    header = text.splitlines()[2]
    for fw in INSTALLED:
        assert f"{fw} (µs)" in header
    for peer in ("torch", "jax", "autograd"):
        assert f"tapegrad/{peer}" in header
    for name, definition in quick_result["definitions"].items():
        row = next(line for line in text.splitlines() if line.startswith(f"| `{name}` |"))
        assert row.count("|") == header.count("|")
        assert definition in text
    assert "1 thread(s)" in text
    assert "quick smoke run" in text


def test_main_prints_the_table_and_writes_json(tmp_path, capsys):
    path = tmp_path / "micro.json"
    code = micro.main(
        ["--quick", "--frameworks", "tapegrad", "--benchmarks", "sincos,loop", "--json", str(path)]
    )
    assert code == 0
    out = capsys.readouterr().out
    assert "| `sincos` |" in out and "| `loop` |" in out
    saved = json.loads(path.read_text())
    assert set(saved["benchmarks"]) == {"sincos", "loop"}
    assert saved["benchmarks"]["loop"]["tapegrad"]["median_us"] > 0


def test_a_framework_entry_is_all_a_new_variant_needs(monkeypatch):
    # The hook a compiled tapegrad will use: the tapegrad functions with a transform.
    wrapped = []

    def transform(g):
        wrapped.append(g)
        return g

    variant = dataclasses.replace(
        micro.FRAMEWORKS["tapegrad"],
        name="tapegrad-variant",
        build=lambda b, i: micro._tapegrad_build(b, i, transform=transform),
    )
    monkeypatch.setitem(micro.FRAMEWORKS, "tapegrad-variant", variant)
    result = micro.run(["tapegrad", "tapegrad-variant"], repeats=1, quick=True, benchmarks=["loop"])
    assert wrapped and set(result["benchmarks"]["loop"]) == {"tapegrad", "tapegrad-variant"}
