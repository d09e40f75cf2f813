"""The presets' documented choices: text data options, embedding scaling and init, variants."""

import numpy as np
import pytest

from tapegrad.data import STOPWORDS
from tapegrad.models import PRESETS, build_model, get_preset, unit_rows


def test_unit_rows_scales_each_row_and_keeps_zero_rows():
    m = np.array([[0.0, 0.0], [3.0, 4.0], [-2.0, 0.0]], dtype=np.float64)
    out = unit_rows(m)
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, [[0, 0], [0.6, 0.8], [-1, 0]], rtol=1e-6)
    np.testing.assert_array_equal(m[1], [3.0, 4.0])  # the caller's table is not touched


def test_text_cnn_fine_tunes_unit_length_glove_rows():
    rng = np.random.default_rng(0)
    table = (4.7 * rng.standard_normal((30, 50)) / np.sqrt(50)).astype(np.float32)
    table[0] = 0.0  # <pad>
    model = build_model("text-cnn", seed=0, vocab_size=30, embedding=table)
    weight = model[0].weight
    assert weight.requires_grad
    norms = np.linalg.norm(weight.data, axis=1)
    assert norms[0] == 0.0
    np.testing.assert_allclose(norms[1:], 1.0, rtol=1e-5)
    # directions are GloVe's: each row is its GloVe row over that row's length
    np.testing.assert_allclose(
        weight.data[1:] * np.linalg.norm(table[1:], axis=1, keepdims=True), table[1:], rtol=1e-5
    )


def test_text_cnn_learned_draws_rows_with_std_one_tenth():
    model = build_model("text-cnn-learned", seed=0, vocab_size=5000)
    w = model[0].weight.data
    assert w.shape == (5000, 50) and model[0].weight.requires_grad
    assert 0.099 < w.std() < 0.101 and abs(w.mean()) < 0.002


@pytest.mark.parametrize("name", ["text-cnn", "text-cnn-learned"])
def test_text_presets_leave_out_function_words_and_unknown_words(name):
    extra = get_preset(name).extra
    assert extra == {"vocab_size": 5000, "stopwords": STOPWORDS, "oov": "drop"}


def test_seed_rnn_keeps_the_papers_settings_and_its_variant_changes_only_lr():
    paper, variant = get_preset("seed-rnn"), get_preset("seed-rnn-lr0.2")
    assert (paper.optimizer, paper.lr, paper.batch_size, paper.epochs) == ("sgd", 0.015, 100, 5)
    assert (variant.optimizer, variant.lr) == ("sgd", 0.2)
    for field in ("datasets", "build", "task", "batch_size", "epochs", "extra"):
        assert getattr(variant, field) == getattr(paper, field), field
    a, b = build_model(paper, seed=3), build_model(variant, seed=3)
    for (na, pa), (nb, pb) in zip(a.named_parameters(), b.named_parameters()):
        assert na == nb
        np.testing.assert_array_equal(pa.data, pb.data)


def test_every_preset_documents_its_choices():
    for p in PRESETS.values():
        assert len(p.description) > 80, p.name
