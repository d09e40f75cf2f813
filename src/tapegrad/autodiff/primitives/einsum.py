"""``einsum``: Einstein summation, composed of diagonals, sums, transposes, reshapes,
broadcasting products and matrix products, so it is differentiable to any order and compiles.

The plan for ``"bij,bjk->bik"`` and the like: each operand first takes the diagonal of a label it
repeats (``"ii->i"``) and sums out the labels no one else needs; then operands are combined left
to right, each pair by one matrix product (the labels both share and still need are a batch, the
shared ones no longer needed are contracted) or, when nothing is contracted, by a broadcasting
product; last, the result's leftover labels are summed and its axes put in the output's order.
Labels (letters) of size 1 broadcast against the same label of another size, and ``...`` stands
for broadcasting leading axes, as in NumPy.
"""

from __future__ import annotations

import numpy as np

from ..errors import ShapeError
from .args import is_tensor, shape_of
from .elementwise import mul
from .linalg import matmul
from .movement import diagonal
from .reduce import sum as _reduce_sum
from .shape import permute, reshape


def _parse(subscripts: str, shapes: list[tuple]) -> tuple[list[list], list]:
    """Each operand's labels (``...`` expanded into ``("...", k)`` labels counted from the right,
    so broadcasting aligns them) and the output's."""
    spec = subscripts.replace(" ", "")
    if "->" in spec:
        lhs, rhs = spec.split("->", 1)
        if "->" in rhs:
            raise ValueError(f"einsum: more than one '->' in {subscripts!r}")
    else:
        lhs, rhs = spec, None
    terms = lhs.split(",")
    if len(terms) != len(shapes):
        raise ValueError(
            f"einsum: {subscripts!r} names {len(terms)} operands but {len(shapes)} were given"
        )
    labels, width = [], 0
    for k, (term, shape) in enumerate(zip(terms, shapes)):
        letters = term.replace("...", "")
        bad = [c for c in letters if not c.isalpha()]
        if bad or term.count("...") > 1:
            raise ValueError(
                f"einsum: operand {k}'s subscripts {term!r} are not letters (and one ...)"
            )
        if "..." in term:
            n_ell = len(shape) - len(letters)
            if n_ell < 0:
                raise ShapeError(
                    f"einsum: operand {k} has {len(shape)} axes (shape {shape}), fewer than the "
                    f"{len(letters)} labels of {term!r}"
                )
            head, tail = term.split("...")
            ell = [("...", n_ell - 1 - i) for i in range(n_ell)]
            labels.append(list(head) + ell + list(tail))
            width = max(width, n_ell)
        else:
            if len(letters) != len(shape):
                raise ShapeError(
                    f"einsum: operand {k} has {len(shape)} axes (shape {shape}) but "
                    f"{term!r} names {len(letters)}"
                )
            labels.append(list(term))
    ell_out = [("...", width - 1 - i) for i in range(width)]
    if rhs is None:
        counts: dict = {}
        for ls in labels:
            for lab in ls:
                if isinstance(lab, str):
                    counts[lab] = counts.get(lab, 0) + 1
        out = ell_out + sorted(lab for lab, c in counts.items() if c == 1)
    else:
        letters = rhs.replace("...", "")
        if any(not c.isalpha() for c in letters) or rhs.count("...") > 1:
            raise ValueError(f"einsum: output subscripts {rhs!r} are not letters (and one ...)")
        if len(set(letters)) != len(letters):
            raise ValueError(f"einsum: output subscripts {rhs!r} repeat a label")
        if "..." in rhs:
            head, tail = rhs.split("...")
            out = list(head) + ell_out + list(tail)
        else:
            out = list(rhs)  # ellipsis axes left out of the output are summed, as in NumPy
        known = {lab for ls in labels for lab in ls}
        for lab in out:
            if isinstance(lab, str) and lab not in known:
                raise ValueError(f"einsum: output label {lab!r} is in no operand of {subscripts!r}")
    return labels, out


def _sizes(labels, shapes, subscripts) -> dict:
    size: dict = {}
    for ls, shape in zip(labels, shapes):
        for lab, n in zip(ls, shape):
            m = size.get(lab, n)
            if m != n and 1 not in (m, n):
                name = "..." if isinstance(lab, tuple) else lab
                raise ShapeError(
                    f"einsum: label {name!r} has sizes {m} and {n} in {subscripts!r} (operand "
                    f"shapes {shapes}); they must match or be 1"
                )
            size[lab] = max(m, n) if 1 in (m, n) else n
    return size


def _prepare(x, labs: list, size: dict, needed: set):
    """One operand: diagonals of repeated labels, broadcast size-1 labels dropped, and labels no
    one else needs summed."""
    labs = list(labs)
    while len(set(labs)) != len(labs):
        lab = next(lab for lab in labs if labs.count(lab) > 1)
        i = labs.index(lab)
        j = labs.index(lab, i + 1)
        x = diagonal(x, 0, i, j)
        labs = [m for k, m in enumerate(labs) if k not in (i, j)] + [lab]
    shape = shape_of(x)
    drop = [k for k, lab in enumerate(labs) if shape[k] == 1 and size[lab] != 1]
    if drop:
        x = reshape(x, tuple(n for k, n in enumerate(shape) if k not in drop))
        labs = [lab for k, lab in enumerate(labs) if k not in drop]
    extra = tuple(k for k, lab in enumerate(labs) if lab not in needed)
    if extra:
        x = _reduce_sum(x, extra)
        labs = [lab for k, lab in enumerate(labs) if k not in extra]
    return x, labs


def _arrange(x, labs: list, order: list):
    perm = tuple(labs.index(lab) for lab in order)
    return x if perm == tuple(range(len(labs))) else permute(x, perm)


def _combine(a, la: list, b, lb: list, size: dict, needed: set):
    """Two operands into one, over the labels still ``needed`` afterwards."""
    shared = [lab for lab in la if lab in lb]
    batch = [lab for lab in shared if lab in needed]
    contract = [lab for lab in shared if lab not in needed]
    a_only = [lab for lab in la if lab not in lb]
    b_only = [lab for lab in lb if lab not in la]
    if not contract:  # a broadcasting product
        out = batch + a_only + b_only
        a2 = reshape(
            _arrange(a, la, batch + a_only),
            tuple(size[lab] for lab in batch + a_only) + (1,) * len(b_only),
        )
        b2 = reshape(
            _arrange(b, lb, batch + b_only),
            tuple(size[lab] for lab in batch)
            + (1,) * len(a_only)
            + tuple(size[lab] for lab in b_only),
        )
        return mul(a2, b2), out
    nb = int(np.prod([size[lab] for lab in batch], dtype=np.int64))
    m = int(np.prod([size[lab] for lab in a_only], dtype=np.int64))
    k = int(np.prod([size[lab] for lab in contract], dtype=np.int64))
    n = int(np.prod([size[lab] for lab in b_only], dtype=np.int64))
    a2 = reshape(_arrange(a, la, batch + a_only + contract), (nb, m, k) if batch else (m, k))
    b2 = reshape(_arrange(b, lb, batch + contract + b_only), (nb, k, n) if batch else (k, n))
    out = batch + a_only + b_only
    return reshape(matmul(a2, b2), tuple(size[lab] for lab in out)), out


def einsum(subscripts: str, *operands):
    """Einstein summation (``einsum("bij,bjk->bik", a, b)``): NumPy's and PyTorch's notation,
    with implicit output (the labels used once, sorted), ``...`` broadcasting, repeated labels
    (diagonals) and size-1 broadcasting. Contractions run as matrix products."""
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    if not operands:
        raise ValueError("einsum: needs at least one operand")
    shapes = [shape_of(x) for x in operands]
    labels, out = _parse(subscripts, shapes)
    size = _sizes(labels, shapes, subscripts)
    for ls, shape in zip(labels, shapes):  # a label repeated within an operand: one size
        for lab in set(ls):
            dims = {shape[k] for k, m in enumerate(ls) if m == lab}
            if len(dims) > 1:
                raise ShapeError(
                    f"einsum: label {lab!r} repeats within an operand with sizes {sorted(dims)} "
                    f"in {subscripts!r}"
                )
    prepared = []
    for k, (x, ls) in enumerate(zip(operands, labels)):
        needed = set(out).union(*(set(m) for j, m in enumerate(labels) if j != k))
        prepared.append(_prepare(x, ls, size, needed))
    acc, la = prepared[0]
    for k in range(1, len(prepared)):
        b, lb = prepared[k]
        needed = set(out).union(*(set(m) for _, m in prepared[k + 1 :]))
        extra_a = tuple(i for i, lab in enumerate(la) if lab not in needed and lab not in lb)
        if extra_a:
            acc = _reduce_sum(acc, extra_a)
            la = [lab for i, lab in enumerate(la) if i not in extra_a]
        acc, la = _combine(acc, la, b, lb, size, needed)
    extra = tuple(i for i, lab in enumerate(la) if lab not in out)
    if extra:
        acc = _reduce_sum(acc, extra)
        la = [lab for i, lab in enumerate(la) if i not in extra]
    result = _arrange(acc, la, out)
    if not is_tensor(result):  # one constant array, unchanged: still a Tensor
        result = reshape(result, shape_of(result))
    return result
