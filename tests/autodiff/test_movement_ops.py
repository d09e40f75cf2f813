"""Movement operations and einsum against PyTorch: flip, roll, repeat, tile, repeat_interleave,
tril/triu, diag/diagonal, split/chunk/unbind, meshgrid, unfold, cat, pad modes, einsum (values,
gradients, second derivatives, float32), compiled == eager, and the errors."""

import numpy as np
import pytest
import torch
import torch.nn.functional as TF
from ops_vs_torch import assert_compiled_equals_eager, compare_with_torch

import tapegrad as tg

RNG = np.random.default_rng(5)
X = RNG.standard_normal((3, 4, 5))


@pytest.mark.parametrize(
    "name, tg_fn, torch_fn",
    [
        ("flip0", lambda x: x.flip(0), lambda x: x.flip(0)),
        ("flip02", lambda x: x.flip(0, 2), lambda x: x.flip(0, 2)),
        ("flip_dims", lambda x: tg.flip(x, (1, -1)), lambda x: torch.flip(x, (1, -1))),
        ("roll", lambda x: x.roll(2, 1), lambda x: x.roll(2, 1)),
        ("roll_many", lambda x: tg.roll(x, (-1, 7), (0, 2)), lambda x: x.roll((-1, 7), (0, 2))),
        ("roll_flat", lambda x: tg.roll(x, 9), lambda x: torch.roll(x, 9)),
        ("repeat", lambda x: x.repeat(2, 1, 3), lambda x: x.repeat(2, 1, 3)),
        ("repeat_more", lambda x: x.repeat(2, 1, 1, 2), lambda x: x.repeat(2, 1, 1, 2)),
        ("tile", lambda x: tg.tile(x, (2, 1)), lambda x: torch.tile(x, (2, 1))),
        ("tile_method", lambda x: x.tile(2), lambda x: x.tile((2,))),
        (
            "interleave",
            lambda x: x.repeat_interleave(2, dim=1),
            lambda x: x.repeat_interleave(2, 1),
        ),
        (
            "interleave_counts",
            lambda x: tg.repeat_interleave(x, np.array([1, 0, 3]), 0),
            lambda x: torch.repeat_interleave(x, torch.tensor([1, 0, 3]), 0),
        ),
        ("interleave_flat", lambda x: x.repeat_interleave(2), lambda x: x.repeat_interleave(2)),
        ("tril", lambda x: x.tril(), lambda x: x.tril()),
        ("tril_k", lambda x: tg.tril(x, -1), lambda x: torch.tril(x, -1)),
        ("triu_k", lambda x: x.triu(2), lambda x: x.triu(2)),
        ("diagonal", lambda x: x.diagonal(), lambda x: x.diagonal()),
        ("diagonal_k", lambda x: tg.diagonal(x, 1, 1, 2), lambda x: x.diagonal(1, 1, 2)),
        ("diagonal_neg", lambda x: x.diagonal(-2, -1, 0), lambda x: x.diagonal(-2, -1, 0)),
        ("diag_of_matrix", lambda x: x[0].diag(1), lambda x: x[0].diag(1)),
        ("diag_of_vector", lambda x: tg.diag(x[0, 0], -2), lambda x: torch.diag(x[0, 0], -2)),
        ("unfold", lambda x: x.unfold(2, 2, 1), lambda x: x.unfold(2, 2, 1)),
        ("unfold_step", lambda x: x.unfold(1, 3, 2), lambda x: x.unfold(1, 3, 2)),
        ("unfold_all", lambda x: x.unfold(0, 3, 3), lambda x: x.unfold(0, 3, 3)),
        ("cat", lambda x: tg.cat([x, x * 2], dim=1), lambda x: torch.cat([x, x * 2], dim=1)),
        ("concat", lambda x: tg.concat([x, x], 2), lambda x: torch.concat([x, x], 2)),
    ],
)
def test_movement_ops_match_torch(name, tg_fn, torch_fn):
    compare_with_torch(tg_fn, torch_fn, [X])


@pytest.mark.parametrize(
    "tg_fn, torch_fn",
    [
        (lambda x: x.split(2, dim=1), lambda x: x.split(2, dim=1)),
        (lambda x: tg.split(x, [1, 3, 1], -1), lambda x: torch.split(x, [1, 3, 1], -1)),
        (lambda x: x.chunk(2, 2), lambda x: x.chunk(2, 2)),
        (lambda x: tg.chunk(x, 4, 1), lambda x: torch.chunk(x, 4, 1)),
        (lambda x: x.unbind(1), lambda x: x.unbind(1)),
        (lambda x: tg.unbind(x), lambda x: torch.unbind(x)),
    ],
)
def test_split_chunk_unbind_match_torch(tg_fn, torch_fn):
    compare_with_torch(tg_fn, torch_fn, [X])
    assert len(tg.chunk(tg.zeros(0, 2), 3)) == len(torch.chunk(torch.zeros(0, 2), 3))


@pytest.mark.parametrize("indexing", ["ij", "xy"])
def test_meshgrid_matches_torch(indexing):
    a, b, c = RNG.standard_normal(3), RNG.standard_normal(4), RNG.standard_normal(2)
    compare_with_torch(
        lambda *xs: tg.meshgrid(*xs, indexing=indexing),
        lambda *xs: torch.meshgrid(*xs, indexing=indexing),
        [a, b, c],
    )


@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular", "constant"])
def test_pad_modes_match_torch(mode):
    # PyTorch's F.pad lists (before, after) from the last axis backwards; tapegrad one per axis
    x = RNG.standard_normal((2, 3, 4, 5))
    compare_with_torch(
        lambda t: tg.pad(t, ((0, 0), (0, 0), (1, 2), (3, 1)), mode=mode, value=0.5),
        lambda t: TF.pad(
            t, (3, 1, 1, 2), mode=mode, **({"value": 0.5} if mode == "constant" else {})
        ),
        [x],
    )


@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular", "constant"])
@pytest.mark.parametrize(
    "shape,widths",  # the ranks PyTorch's non-constant modes take for each number of pairs
    [((2, 3, 5), (3, 1)), ((2, 3, 4, 5), (3, 1, 1, 2)), ((2, 2, 3, 4, 5), (1, 0, 2, 1, 0, 1))],
)
def test_functional_pad_takes_torchs_form(mode, shape, widths):
    x = RNG.standard_normal(shape)
    value = {"value": 0.5} if mode == "constant" else {}
    compare_with_torch(
        lambda t: tg.nn.functional.pad(t, widths, mode=mode, **value),
        lambda t: TF.pad(t, widths, mode=mode, **value),
        [x],
    )


def test_functional_pad_names_bad_widths():
    x = tg.tensor(np.zeros((2, 3)))
    with pytest.raises(tg.ShapeError, match=r"pad: \(1, 1, 1\) must be \(before, after\) pairs"):
        tg.nn.functional.pad(x, (1, 1, 1))
    with pytest.raises(tg.ShapeError, match="at most the 2 axes"):
        tg.nn.functional.pad(x, (1, 1, 1, 1, 1, 1))
    with pytest.raises(tg.ShapeError, match="crops a tensor of shape"):
        tg.nn.functional.pad(x, (-2, -1))
    with pytest.raises(tg.ShapeError, match="only in constant mode"):
        tg.nn.functional.pad(x, (-1, 1), mode="reflect")


def test_pad_synonyms_and_limits():
    x = tg.tensor(np.arange(4.0))
    np.testing.assert_array_equal(tg.pad(x, (2, 1), mode="edge").data, [0, 0, 0, 1, 2, 3, 3])
    np.testing.assert_array_equal(tg.pad(x, (2, 1), mode="wrap").data, [2, 3, 0, 1, 2, 3, 0])
    np.testing.assert_array_equal(
        tg.pad(x, (3, 3), mode="reflect").data, np.pad(x.data, 3, "reflect")
    )
    with pytest.raises(tg.ShapeError, match=r"pad: reflect padding \(4, 0\) must be smaller than"):
        tg.pad(x, (4, 0), mode="reflect")
    with pytest.raises(tg.ShapeError, match=r"circular padding \(0, 5\) must be at most"):
        tg.pad(x, (0, 5), mode="circular")
    with pytest.raises(ValueError, match="pad: mode must be one of"):
        tg.pad(x, 1, mode="symmetric")


EINSUMS = [
    ("ij,jk->ik", [(3, 4), (4, 5)]),
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("ij,ij->ij", [(3, 4), (3, 4)]),
    ("ij,ij->i", [(3, 4), (3, 4)]),
    ("ij->ji", [(3, 4)]),
    ("ij->", [(3, 4)]),
    ("ii->i", [(4, 4)]),
    ("ii", [(4, 4)]),
    ("i,j->ij", [(3,), (4,)]),
    ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 2)]),
    ("...ij,...jk->...ik", [(2, 1, 3, 4), (5, 4, 2)]),
    ("b...d,bd->b...", [(2, 3, 4, 5), (2, 5)]),
    ("bhqd,bhkd->bhqk", [(2, 3, 4, 5), (2, 3, 6, 5)]),
    ("ijk,ikl->jl", [(2, 3, 4), (2, 4, 5)]),
    ("i,i->", [(5,), (5,)]),
    ("ij,kj", [(3, 4), (2, 4)]),
    ("iij->j", [(3, 3, 2)]),
    ("ij,j->ij", [(3, 4), (1,)]),
]


@pytest.mark.parametrize("spec, shapes", EINSUMS, ids=[s for s, _ in EINSUMS])
def test_einsum_matches_torch(spec, shapes):
    args = [RNG.standard_normal(s) for s in shapes]
    compare_with_torch(lambda *xs: tg.einsum(spec, *xs), lambda *xs: torch.einsum(spec, *xs), args)


def test_einsum_routes_contractions_to_matmul():
    a, b = tg.tensor(X), tg.tensor(RNG.standard_normal((3, 5, 2)))
    y = tg.einsum("bij,bjk->bik", a, b)
    assert y._node is None  # no graph without requires_grad; check the recorded op instead
    a.requires_grad_()
    y = tg.einsum("bij,bjk->bik", a, b)
    ops, stack = set(), [y]
    while stack:
        t = stack.pop()
        if t._node is not None:
            ops.add(t._node.prim.name)
            stack += [p for p in t._node.parents if p is not None]
    assert "matmul" in ops and "mul" not in ops


def test_compiled_movement_and_einsum_equal_eager():
    w = tg.tensor(RNG.standard_normal((4, 6)).astype(np.float32), requires_grad=True)

    def step(x):
        h = tg.tensor(x) @ w  # (5, 6)
        parts = h.split(2, dim=1)
        loss = (
            tg.einsum("ij,kj->ik", h, h).tril().sum()
            + h.flip(0).roll(1, 1)[0].sum()
            + h.repeat(2, 1).unfold(0, 3, 2).sum()
            + tg.pad(h, ((1, 1), (2, 0)), mode="reflect").mean()
            + tg.pad(h, 1, mode="circular").std()
            + parts[1].sum() * parts[0].mean()
            + h.diagonal(1).sum()
            + tg.repeat_interleave(h, 2, 0).var()
        )
        w.grad = None
        loss.backward()
        return loss

    calls = [(RNG.standard_normal((5, 4)).astype(np.float32),) for _ in range(3)]
    assert_compiled_equals_eager(step, [w], calls)


def test_errors_name_the_operation_and_shapes():
    x = tg.tensor(X)
    with pytest.raises(tg.ShapeError, match=r"repeat: 2 repeat counts \(2, 1\) for a tensor of 3"):
        x.repeat(2, 1)
    with pytest.raises(tg.ShapeError, match=r"split: sizes \[1, 1\] must be >= 0 and sum to 4"):
        x.split([1, 1], 1)
    with pytest.raises(tg.ShapeError, match=r"unfold: size 6 does not fit axis 2 of length 5"):
        x.unfold(2, 6, 1)
    with pytest.raises(tg.ShapeError, match="tril: needs at least 2 axes"):
        tg.tril(tg.tensor(np.ones(3)))
    with pytest.raises(
        tg.ShapeError, match=r"diag: needs a 1-d or 2-d tensor, got shape \(3, 4, 5\)"
    ):
        tg.diag(x)
    with pytest.raises(tg.ShapeError, match="repeat_interleave: 2 repeat counts for 3 entries"):
        tg.repeat_interleave(x, np.array([1, 2]), 0)
    with pytest.raises(tg.ShapeError, match=r"einsum: label 'j' has sizes 5 and 4"):
        tg.einsum("ij,jk->ik", x[0], x[0])
    with pytest.raises(ValueError, match="einsum: 'ij,jk->ik' names 2 operands but 1 were given"):
        tg.einsum("ij,jk->ik", x[0])
    with pytest.raises(ValueError, match="output label 'z' is in no operand"):
        tg.einsum("ij->z", x[0])
    with pytest.raises(tg.ShapeError, match="roll: 2 shifts for 1 axes"):
        x.roll((1, 2), 0)
    with pytest.raises(ValueError, match="meshgrid: indexing must be"):
        tg.meshgrid(x[0, 0], indexing="ji")
