"""``tapegrad.func``: PyTorch's ``torch.func`` transformations over tapegrad's tape.

``grad``, ``grad_and_value``, ``vjp``, ``jvp``, ``jacrev``/``jacfwd``, ``hessian``, ``vmap`` and
``functional_call``, with PyTorch's signatures (``argnums``, ``has_aux``, ``in_dims``,
``out_dims``). Arguments may be pytrees: Tensors (or arrays, numbers) inside dicts, lists and
tuples, such as a model's ``dict(model.named_parameters())``; results are Tensors in the same
structure. They compose (``vmap(grad(f))`` for per-example gradients, ``grad(grad(f))``): a
transformation called on Tensors that already require grad records its derivatives so the
outer one can differentiate them.

``vmap`` runs the function once per slice of the mapped axis and stacks the results (same
values as a vectorised map; the cost grows with the batch). ``jvp`` transposes the linearised
VJP (two reverse passes). ``tapegrad.grad``/``tapegrad.vjp`` (JAX-style, returning ndarrays)
stay as they are.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping

import numpy as np

from .autodiff import Tensor, enable_grad, gradients, ops
from .autodiff.functional import _argnums

__all__ = [
    "grad",
    "grad_and_value",
    "vjp",
    "jvp",
    "jacrev",
    "jacfwd",
    "hessian",
    "vmap",
    "functional_call",
]


# -- pytrees ---------------------------------------------------------------------------------------
def tree_flatten(tree) -> tuple[list, Callable]:
    """The leaves of ``tree`` (anything that is not a dict, list or tuple) in order, and a
    function that builds the same structure from new leaves."""
    if isinstance(tree, Mapping):
        keys = list(tree)
        parts = [tree_flatten(tree[k]) for k in keys]
        return _join(parts, lambda vals: type(tree)(zip(keys, vals)) if type(tree) is not dict
                     else dict(zip(keys, vals)))  # fmt: skip
    if isinstance(tree, (list, tuple)):
        parts = [tree_flatten(v) for v in tree]
        if isinstance(tree, tuple) and hasattr(tree, "_fields"):
            return _join(parts, lambda vals: type(tree)(*vals))
        return _join(parts, type(tree))
    return [tree], lambda leaves: leaves[0]


def _join(parts, build) -> tuple[list, Callable]:
    leaves, sizes = [], []
    for leaf_list, _ in parts:
        leaves.extend(leaf_list)
        sizes.append(len(leaf_list))

    def unflatten(new):
        out, at = [], 0
        for (_, rebuild), n in zip(parts, sizes):
            out.append(rebuild(list(new[at : at + n])))
            at += n
        return build(out)

    return leaves, unflatten


def tree_map(fn, tree):
    leaves, unflatten = tree_flatten(tree)
    return unflatten([fn(x) for x in leaves])


# -- grad and friends ------------------------------------------------------------------------------
def _nested(x) -> bool:
    return isinstance(x, Tensor) and x.requires_grad


def _track(x) -> Tensor:
    """``x`` as a leaf to differentiate with respect to (itself when an outer transformation
    already tracks it, so its derivatives can be differentiated again)."""
    if _nested(x):
        return x
    t = Tensor(x.data if isinstance(x, Tensor) else x)
    if t.data.dtype.kind != "f":
        raise TypeError(f"func: can only differentiate with respect to float inputs, got {t.dtype}")
    return t.requires_grad_()


def _prepare(args, nums):
    """args with the differentiated ones replaced by tracked leaves; their flat leaves and
    rebuild functions; whether this call is nested inside another transformation."""
    args = list(args)
    nested = False
    flat = []
    for a in nums:
        leaves, unflatten = tree_flatten(args[a])
        nested = nested or any(_nested(x) for x in leaves)
        tracked = [_track(x) for x in leaves]
        args[a] = unflatten(tracked)
        flat.append((tracked, unflatten))
    return args, flat, nested


def _out(x, nested: bool):
    return x if nested or not isinstance(x, Tensor) else x.detach()


def grad_and_value(func: Callable, argnums=0, has_aux: bool = False) -> Callable:
    """``(gradient, value)`` of a scalar-valued ``func`` with respect to ``args[argnums]``
    (pytrees allowed); with ``has_aux``, ``func`` returns ``(value, aux)`` and the result is
    ``(gradient, (value, aux))``."""

    @functools.wraps(func)
    def wrapped(*args, **kwargs):
        nums, single = _argnums(argnums, len(args))
        with enable_grad():
            args2, flat, nested = _prepare(args, nums)
            out = func(*args2, **kwargs)
            value, aux = out if has_aux else (out, None)
            if not isinstance(value, Tensor) or value.data.size != 1:
                shape = getattr(value, "shape", type(value).__name__)
                raise ValueError(
                    f"func.grad: the function must return a scalar Tensor, got {shape}"
                )
            leaves = [t for tracked, _ in flat for t in tracked]
            gs = gradients(value, leaves, create_graph=nested, allow_unused=True)
        gs = [_out(g, nested) for g in gs]
        grads, at = [], 0
        for tracked, unflatten in flat:
            grads.append(unflatten(gs[at : at + len(tracked)]))
            at += len(tracked)
        g = grads[0] if single else tuple(grads)
        value = _out(value, nested)
        return (g, (value, tree_map(lambda a: _out(a, nested), aux))) if has_aux else (g, value)

    return wrapped


def grad(func: Callable, argnums=0, has_aux: bool = False) -> Callable:
    """The gradient of a scalar-valued ``func`` with respect to ``args[argnums]``, in its
    structure (a Tensor, a dict of Tensors, ...); ``(gradient, aux)`` with ``has_aux``."""
    inner = grad_and_value(func, argnums, has_aux)

    @functools.wraps(func)
    def wrapped(*args, **kwargs):
        g, value = inner(*args, **kwargs)
        return (g, value[1]) if has_aux else g

    return wrapped


def vjp(func: Callable, *primals, has_aux: bool = False):
    """``(output, vjp_fn)``: ``vjp_fn(cotangent)`` returns the tuple of ``cotangent^T J`` with
    respect to each primal (pytrees allowed); ``(output, vjp_fn, aux)`` with ``has_aux``."""
    with enable_grad():
        args, flat, nested = _prepare(primals, range(len(primals)))
        out = func(*args)
    out, aux = out if has_aux else (out, None)
    out_leaves, _ = tree_flatten(out)
    leaves = [t for tracked, _ in flat for t in tracked]

    def vjp_fn(cotangents):
        cot, _ = tree_flatten(cotangents)
        if len(cot) != len(out_leaves):
            raise ValueError(f"vjp: {len(cot)} cotangents for {len(out_leaves)} outputs")
        graph = nested or any(_nested(c) for c in cot)
        with enable_grad():
            gs = gradients(out_leaves, leaves, grad_outputs=[_tensor(c) for c in cot],
                           retain_graph=True, create_graph=graph, allow_unused=True)  # fmt: skip
        gs = [_out(g, graph) for g in gs]
        res, at = [], 0
        for tracked, unflatten in flat:
            res.append(unflatten(gs[at : at + len(tracked)]))
            at += len(tracked)
        return tuple(res)

    out = tree_map(lambda a: _out(a, nested), out)
    return (out, vjp_fn, aux) if has_aux else (out, vjp_fn)


def _tensor(x) -> Tensor:
    return x if isinstance(x, Tensor) else Tensor(x)


def jvp(func: Callable, primals, tangents, *, has_aux: bool = False):
    """``(func(*primals), J @ tangents)``: the forward-mode derivative along ``tangents`` (one
    per primal, same structures), by transposing the VJP."""
    primals, tangents = tuple(primals), tuple(tangents)
    if len(primals) != len(tangents):
        raise ValueError(f"jvp: {len(primals)} primals but {len(tangents)} tangents")
    with enable_grad():
        args, flat, nested = _prepare(primals, range(len(primals)))
        out = func(*args)
        out, aux = out if has_aux else (out, None)
        out_leaves, unflatten_out = tree_flatten(out)
        us = [Tensor(np.zeros_like(o.data)).requires_grad_() for o in out_leaves]
        leaves = [t for tracked, _ in flat for t in tracked]
        gs = gradients(out_leaves, leaves, grad_outputs=us, create_graph=True, allow_unused=True)
        vs = [v for t in tangents for v in tree_flatten(t)[0]]
        dot = None
        for g, v in zip(gs, vs):
            term = ops.sum(g * _tensor(v))
            dot = term if dot is None else dot + term
        jv = gradients(dot, us, create_graph=nested, allow_unused=True)
    res = (
        tree_map(lambda a: _out(a, nested), out),
        unflatten_out([_out(j, nested) for j in jv]),
    )
    return (*res, aux) if has_aux else res


def jacrev(func: Callable, argnums=0, has_aux: bool = False) -> Callable:
    """The Jacobian of ``func`` with respect to the Tensor ``args[argnums]``: shape
    ``output.shape + input.shape`` (one reverse pass per output entry)."""

    @functools.wraps(func)
    def wrapped(*args, **kwargs):
        (a,), _ = _argnums(argnums, len(args))
        with enable_grad():
            args2, flat, nested = _prepare(args, (a,))
            out = func(*args2, **kwargs)
            out, aux = out if has_aux else (out, None)
            x = flat[0][0]
            if len(x) != 1:
                raise TypeError("jacrev: the differentiated argument must be one Tensor")
            x = x[0]
            rows = []
            flat_out = ops.reshape(out, (-1,))
            for i in range(int(np.prod(out.shape, dtype=np.int64))):
                (g,) = gradients(flat_out[i], [x], retain_graph=True, create_graph=nested,
                                 allow_unused=True)  # fmt: skip
                rows.append(g)
            jac = ops.reshape(ops.stack(rows), tuple(out.shape) + tuple(x.shape)) if rows else (
                Tensor(np.zeros(tuple(out.shape) + tuple(x.shape), x.dtype)))  # fmt: skip
        jac = _out(jac, nested)
        return (jac, aux) if has_aux else jac

    return wrapped


jacfwd = jacrev  # the same Jacobian (computed by reverse passes)


def hessian(func: Callable, argnums=0) -> Callable:
    """The Hessian of a scalar ``func`` with respect to the Tensor ``args[argnums]``: shape
    ``x.shape + x.shape`` (the Jacobian of the gradient)."""
    return jacrev(grad(func, argnums), argnums)


# -- vmap ------------------------------------------------------------------------------------------
def _slice(x, dim, i):
    if dim is None:
        return x
    if isinstance(x, Tensor):
        return x[(slice(None),) * (dim % x.ndim) + (i,)]
    arr = np.asarray(x)
    return np.take(arr, i, axis=dim)


def _size(x, dim):
    return None if dim is None else np.shape(x.data if isinstance(x, Tensor) else x)[dim]


def vmap(func: Callable, in_dims=0, out_dims=0, randomness: str = "error", *,
         chunk_size=None) -> Callable:  # fmt: skip
    """``func`` mapped over an axis of its arguments: ``in_dims`` says which (an int for all,
    or one entry per argument: an int, None for an unmapped argument, or a pytree matching
    it); the results are stacked along ``out_dims`` (an int, or one per output)."""

    @functools.wraps(func)
    def wrapped(*args, **kwargs):
        dims = in_dims if isinstance(in_dims, (tuple, list)) else (in_dims,) * len(args)
        if len(dims) != len(args):
            raise ValueError(f"vmap: in_dims has {len(dims)} entries for {len(args)} arguments")
        flat_args, flat_dims, rebuilds = [], [], []
        for a, d in zip(args, dims):
            leaves, rebuild = tree_flatten(a)
            ds = tree_flatten(d)[0] if isinstance(d, (Mapping, list, tuple)) else [d] * len(leaves)
            flat_args.append(leaves)
            flat_dims.append(ds)
            rebuilds.append(rebuild)
        sizes = {_size(x, d) for ls, ds in zip(flat_args, flat_dims) for x, d in zip(ls, ds)} - {
            None
        }
        if len(sizes) != 1:
            raise ValueError(f"vmap: the mapped axes must have one size, got {sorted(sizes)}")
        (n,) = sizes
        results = []
        for i in range(n):
            call = [
                rb([_slice(x, d, i) for x, d in zip(ls, ds)])
                for ls, ds, rb in zip(flat_args, flat_dims, rebuilds)
            ]
            results.append(func(*call, **kwargs))
        leaves0, rebuild_out = tree_flatten(results[0])
        per = [tree_flatten(r)[0] for r in results]
        od = out_dims if isinstance(out_dims, (tuple, list)) else (out_dims,) * len(leaves0)
        stacked = [ops.stack([_tensor(p[k]) for p in per], axis=od[k]) for k in range(len(leaves0))]
        return rebuild_out(stacked)

    return wrapped


# -- functional_call -------------------------------------------------------------------------------
def functional_call(module, parameter_and_buffer_dicts, args=(), kwargs=None, *,
                    tie_weights: bool = True, strict: bool = False):  # fmt: skip
    """Call ``module`` with its parameters and buffers replaced by the Tensors in
    ``parameter_and_buffer_dicts`` (a dict of dotted names, or a tuple of dicts), so gradients
    flow to those Tensors; the module's own are put back afterwards."""
    from .nn.utils.stateless import swapped

    dicts = parameter_and_buffer_dicts
    if isinstance(dicts, Mapping):
        dicts = (dicts,)
    values = {}
    for d in dicts:
        clash = set(values) & set(d)
        if clash:
            raise ValueError(f"functional_call: {sorted(clash)} given in more than one dict")
        values.update(d)
    args = args if isinstance(args, tuple) else (args,)
    with swapped(module, values, tie_weights=tie_weights, strict=strict):
        return module(*args, **(kwargs or {}))
