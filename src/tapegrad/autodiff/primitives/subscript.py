"""``x[idx]`` and ``x[idx] = v`` with the index's integer and bool arrays as inputs of the
operation (``index_get``, ``index_put``, the in-place ``index_put_``), ``masked_fill``,
``masked_select``, ``nonzero``, and :func:`getitem`, the front end of ``x[index]`` that picks
between them and the basic slicing of ``shape.py``.

Index arrays are inputs, never attributes, so a compiled plan reads those of every call.
"""

from __future__ import annotations

import numpy as np

from ..backend import asarray, is_array, to_host, ufunc_at, xp_of
from ..core.state import _TRACING
from ..errors import DTypeError, ShapeError
from . import samples as S
from .args import dtype_of, is_tensor, plain, shape_of
from .elementwise import where
from .indexing import _last_writes, _size
from .registry import Sample, primitive, run
from .shape import _data, _index_part, _read_each_call, basic_getitem, broadcast_to, sum_to

# -- x[idx] and x[idx] = v with index arrays as inputs -------------------------------------------
ARRAY = "array"
"""The place of an index array (an input of the primitive) in an index template."""


def build_index(template: tuple, arrays) -> tuple:
    it = iter(arrays)
    return tuple(next(it) if isinstance(p, str) else p for p in template)


def _dims_of_parts(template: tuple, arrays, ndim: int) -> list[int]:
    it = iter(arrays)
    sizes: list = []
    for p in template:
        if isinstance(p, str):
            a = next(it)
            sizes.append(a.ndim if a.dtype.kind == "b" else 1)
        elif p is None:
            sizes.append(0)
        elif p is Ellipsis:
            sizes.append(None)
        else:
            sizes.append(1)
    fixed = sum(s for s in sizes if s)
    return [ndim - fixed if s is None else s for s in sizes]


def _may_repeat(shape: tuple, template: tuple, arrays) -> bool:
    """Whether the index arrays address some entry twice (then writes need an order)."""
    if not any(a.dtype.kind in "iu" for a in arrays):
        return False  # masks and slices never repeat
    comps, dims, d = [], [], 0
    it = iter(arrays)
    for p, k in zip(template, _dims_of_parts(template, arrays, len(shape))):
        if isinstance(p, str):
            a = next(it)
            if a.dtype.kind == "b":
                comps += list(np.nonzero(a))
                dims += list(shape[d : d + k])
            else:
                if shape[d] == 0:
                    return False  # nothing to address: indexing raises
                comps.append(np.mod(a, shape[d]))
                dims.append(shape[d])
        d += k
    flat = np.ravel_multi_index(np.broadcast_arrays(*comps), dims).reshape(-1)
    return np.unique(flat).size < flat.size


def write_at(res: np.ndarray, v, template: tuple, arrays, accumulate: bool) -> None:
    """``res[index] = v`` (or ``+=`` with repeats accumulating), in place; with repeated
    integer indices the last write in C order wins."""
    idx = build_index(template, arrays)
    v = v if is_array(v) else asarray(v, like=res)
    if v.dtype != res.dtype:
        v = v.astype(res.dtype)
    if accumulate:
        ufunc_at(np.add, res, idx, v)
    elif _may_repeat(res.shape, template, arrays):
        pos = xp_of(res).arange(res.size).reshape(res.shape)[idx]
        flat = pos.reshape(-1)
        last = _last_writes(flat)
        res.reshape(-1)[flat[last]] = np.broadcast_to(v, pos.shape).reshape(-1)[last]
    else:
        res[idx] = v


def _index_get_fwd(x, *arrays, template, fixed_shape=None):
    out = x[build_index(template, arrays)]
    if fixed_shape is not None and out.shape != fixed_shape:
        raise ShapeError(
            f"index_get: the mask selects {out.size} entries now and selected "
            f"{_size(fixed_shape)} when the compiled function was traced; a plan has fixed "
            f"shapes, so compute data-dependent selections outside compiled functions"
        )
    return out


def _index_get_vjp(g, out, needs, x, *arrays, template, fixed_shape=None):
    gx = run(
        _index_put, xp_of(g).zeros(x.shape, g.dtype), g, *arrays, template=template, accumulate=True
    )
    return [gx] + [None] * len(arrays)


def _index_samples(rng, with_value: bool):
    x = S.values(rng, (4, 3))
    cases = [
        ((ARRAY,), [np.array([0, 2, 2, 3])]),
        ((slice(None), ARRAY), [np.array([[1, 1], [0, 2]])]),
        ((ARRAY, ARRAY), [np.array([3, 0, 3]), np.array([1, 1, 1])]),
        ((ARRAY,), [x[:, 0] > 0]),
        ((ARRAY,), [x > 0]),
        ((1, ARRAY), [np.array([2, 0])]),
        ((ARRAY, None, slice(0, 2)), [np.array([-1, 0])]),
    ]
    out = []
    for template, arrays in cases:
        if with_value:
            sel = x[build_index(template, arrays)]
            v = S.values(rng, sel.shape[-1:] if sel.ndim else ())
            out.append(Sample((x, v, *arrays), {"template": template, "accumulate": False}))
            out.append(Sample((x, v, *arrays), {"template": template, "accumulate": True}))
        else:
            out.append(Sample((x, *arrays), {"template": template}))
    return out


_index_get = primitive(
    "index_get",
    _index_get_fwd,
    _index_get_vjp,
    reference=lambda x, *arrays, template, fixed_shape=None: np.array(x.tolist())[
        build_index(template, arrays)
    ],
    samples=lambda rng: _index_samples(rng, False),
    doc="x[index] where the index's integer or bool arrays are inputs (ARRAY in the template "
    "marks each); the VJP adds back into the selected entries (repeats accumulate).",
)


def _index_put_fwd(x, v, *arrays, template, accumulate):
    res = xp_of(x).array(x, order="C", copy=True)
    write_at(res, v, template, arrays, accumulate)
    return res


def _index_put_vjp(g, out, needs, x, v, *arrays, template, accumulate):
    gx = gv = None
    if needs[0]:  # overwritten entries no longer depend on x
        gx = (
            g
            if accumulate
            else run(
                _index_put,
                g,
                xp_of(g).zeros((), g.dtype),
                *arrays,
                template=template,
                accumulate=False,
            )
        )
    if needs[1]:
        r = run(_index_get, g, *arrays, template=template)
        if not accumulate and any(a.dtype.kind in "iu" for a in arrays):
            # repeated indices: only the value written last at an entry gets its gradient
            ids = xp_of(g).arange(_size(r.shape), dtype=np.int64).reshape(r.shape)
            writer = run(
                _index_put,
                xp_of(g).full(x.shape, -1, np.int64),
                ids,
                *arrays,
                template=template,
                accumulate=False,
            )
            r = r * (run(_index_get, writer, *arrays, template=template) == ids)
        gv = r if r.shape == tuple(v.shape) else run(sum_to, r, shape=tuple(v.shape))
    return [gx, gv] + [None] * len(arrays)


def _index_put_reference(x, v, *arrays, template, accumulate):
    out = np.array(x, dtype=np.float64)
    pos = np.arange(out.size).reshape(out.shape)[build_index(template, arrays)]
    vals = np.broadcast_to(v, pos.shape)
    for k in np.ndindex(*pos.shape):
        out.flat[pos[k]] = (out.flat[pos[k]] if accumulate else 0.0) + vals[k]
    return out


_index_put = primitive(
    "index_put",
    _index_put_fwd,
    _index_put_vjp,
    reference=_index_put_reference,
    samples=lambda rng: _index_samples(rng, True),
    doc="x with v (broadcast) written at index (accumulate: added, repeats accumulating); the "
    "index's arrays are inputs. With repeated indices the last write in C order wins and only "
    "it gets a gradient.",
)


def _index_put_inplace_fwd(target, v, *arrays, template):
    write_at(target, v, template, arrays, accumulate=False)
    return target


_index_put_inplace = primitive(
    "index_put_",
    _index_put_inplace_fwd,
    None,
    reference=lambda target, v, *arrays, template: _index_put_reference(
        target, v, *arrays, template=template, accumulate=False
    ),
    samples=lambda rng: [
        Sample(s.args, {"template": s.attrs["template"]})
        for s in _index_samples(rng, True)
        if not s.attrs["accumulate"]
    ],
    effect=True,
    doc="target[index] = v written into target's array in place (x[idx] = v under no_grad, on a "
    "leaf); compiled plans replay it. Not differentiable.",
)


# -- nonzero -------------------------------------------------------------------------------------
def _nonzero_fwd(x, fixed_shape=None):
    out = np.argwhere(x).astype(np.int64, copy=False)
    if fixed_shape is not None and out.shape != fixed_shape:
        raise ShapeError(
            f"nonzero: found {out.shape[0]} nonzero entries now and {fixed_shape[0]} when the "
            f"compiled function was traced; a plan has fixed shapes, so compute data-dependent "
            f"selections outside compiled functions"
        )
    return out


_nonzero = primitive(
    "nonzero",
    _nonzero_fwd,
    None,
    reference=lambda x, fixed_shape=None: np.array(
        [k for k in np.ndindex(*x.shape) if x[k] != 0], dtype=np.int64
    ).reshape(-1, x.ndim),
    samples=lambda rng: [
        Sample((np.where(S.values(rng, s) > 0.5, S.values(rng, s), 0.0),))
        for s in [(5,), (3, 4), (2, 2, 3), (0, 2)]
    ],
    doc="The indices of the nonzero entries, one row each in C order ((n, ndim) int64).",
)


def split_index(op: str, index) -> tuple[tuple, list]:
    """An index (anything ``x[index]`` takes) as (template, arrays): integer and bool arrays
    become inputs (Tensors stay Tensors, so compiled plans read them), the rest the template."""
    parts = index if isinstance(index, tuple) else (index,)
    template, arrays = [], []
    for p in parts:
        if is_tensor(p) or isinstance(p, list) or is_array(p) or (isinstance(p, (bool, np.bool_))):
            a = p if is_tensor(p) or is_array(p) else np.asarray(p)
            if dtype_of(a).kind not in "iub":
                raise IndexError(f"{op}: index arrays must be integer or bool, got {dtype_of(a)}")
            template.append(ARRAY)
            arrays.append(a)
        elif isinstance(p, (int, np.integer)):
            template.append(int(p))
        elif p is None or p is Ellipsis or isinstance(p, slice):
            template.append(p)
        else:
            raise IndexError(f"{op}: cannot index with a {type(p).__name__}")
    return tuple(template), arrays


def _fixed(out_shape: tuple):
    return tuple(out_shape) if _TRACING.active is not None else None


def index_get(x, index):
    """``x[index]`` with the index's integer and bool arrays as inputs of the operation (a
    compiled plan reads their values on every call)."""
    template, arrays = split_index("index_get", index)
    if not arrays:
        return basic_getitem(x, index)
    out_shape = np.empty(shape_of(x), np.bool_)[
        build_index(template, [to_host(plain(a)) for a in arrays])
    ].shape
    fixed = _fixed(out_shape) if any(dtype_of(a).kind == "b" for a in arrays) else None
    return _index_get(x, *arrays, template=template, fixed_shape=fixed)


def _is_int(p) -> bool:
    return isinstance(p, (int, np.integer)) and not isinstance(p, (bool, np.bool_))


def _split_ints(index):
    """(integers only, the rest) for an index tuple holding both integers and index arrays;
    None otherwise."""
    if not isinstance(index, tuple) or not any(_is_int(p) for p in index):
        return None
    if not any(isinstance(p, list) or np.ndim(_data(p)) > 0 for p in index):
        return None
    first, rest = [], []
    for p in index:
        if _is_int(p):
            first.append(p)
        elif p is None:
            first.append(None)
            rest.append(slice(None))
        elif p is Ellipsis or isinstance(p, slice):
            first.append(Ellipsis if p is Ellipsis else slice(None))
            rest.append(p)
        else:  # an index array: a bool mask spans as many axes as it has
            part = _index_part(p)
            first.extend([slice(None)] * (part.ndim if part.dtype == np.bool_ else 1))
            rest.append(p)
    return tuple(first), tuple(rest)


def getitem(x, index):
    """``x[index]``: basic slicing, integer arrays (repeats accumulate) and boolean masks.
    Index arrays given as Tensors are inputs of the operation (``index_get``), so a compiled
    step reads them on every call; other index values are attributes.

    Integers select first, as in PyTorch: ``x[1, :, idx]`` keeps idx's axes where idx stands
    (NumPy would count the 1 as an index array and move them to the front)."""
    split = _split_ints(index)
    if split is not None:
        return getitem(getitem(x, split[0]), split[1])
    if any(_read_each_call(p) for p in (index if isinstance(index, tuple) else (index,))):
        return index_get(x, index)
    return basic_getitem(x, index)


def index_put(x, index, values, accumulate: bool = False):
    """``x`` with ``values`` (broadcast) written at ``index`` (out of place; ``accumulate``:
    added, repeats accumulating). With repeated indices the last write wins."""
    template, arrays = split_index("index_put", index)
    return _index_put(x, values, *arrays, template=template, accumulate=bool(accumulate))


def masked_fill(x, mask, value):
    """``x`` with ``value`` where the bool ``mask`` (broadcastable to ``x``'s shape) is true;
    ``value`` is a number or a 0-d tensor (then differentiable)."""
    xs, ms = shape_of(x), shape_of(mask)
    if dtype_of(mask).kind != "b":
        raise DTypeError(f"masked_fill: the mask must be bool, got dtype {dtype_of(mask)}")
    try:
        full = np.broadcast_shapes(xs, ms)
    except ValueError:
        full = None
    if full != xs:
        raise ShapeError(f"masked_fill: mask shape {ms} does not broadcast to input shape {xs}")
    if shape_of(value) != ():
        raise ShapeError(f"masked_fill: value must be a number or 0-d, got shape {shape_of(value)}")
    return where(mask, value, x)


def masked_select(x, mask):
    """The entries of ``x`` where the bool ``mask`` is true, as a 1-d tensor (both broadcast
    to one shape). Its length depends on the mask: inside a compiled function a call whose
    mask selects a different number of entries than the traced one raises."""
    if dtype_of(mask).kind != "b":
        raise DTypeError(f"masked_select: the mask must be bool, got dtype {dtype_of(mask)}")
    try:
        full = np.broadcast_shapes(shape_of(x), shape_of(mask))
    except ValueError:
        raise ShapeError(
            f"masked_select: mask shape {shape_of(mask)} and input shape {shape_of(x)} do not "
            f"broadcast"
        ) from None
    if shape_of(x) != full:
        x = broadcast_to(x, full)
    if shape_of(mask) != full:
        mask = broadcast_to(mask, full)
    n = int(np.count_nonzero(plain(mask)))
    return _index_get(x, mask, template=(ARRAY,), fixed_shape=_fixed((n,)))


def nonzero(x, as_tuple: bool = False):
    """The indices of the nonzero entries: an ``(n, ndim)`` int64 tensor, or with
    ``as_tuple`` one 1-d tensor per axis (what ``x[...]`` takes). Its length depends on the
    values: inside a compiled function a call with another count than the traced one raises."""
    a = plain(x)
    a = a if is_array(a) else np.asarray(a)
    n = int(np.count_nonzero(a))
    out = _nonzero(x, fixed_shape=_fixed((n, a.ndim)))
    if not as_tuple:
        return out
    return tuple(out[:, d] for d in range(a.ndim))
