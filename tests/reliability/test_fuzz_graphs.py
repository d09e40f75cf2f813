"""Random computation graphs, built at once in tapegrad and PyTorch (float64), must agree.

A small generator of well-typed graphs: it keeps a pool of nodes with known shapes and grows it
by drawing operations whose operands fit: elementwise functions, binary operations with
broadcasting (a partner is taken from the pool when its shape broadcasts, else made as a new
leaf with a broadcast-compatible shape), Python-number operands on either side, reductions
(sum/mean/max/min/logsumexp with None, int, negative and tuple axes, keepdims),
softmax/log_softmax, indexing (slices with steps, integers, integer arrays with repeats, boolean
masks), reshape/permute/transpose/expand_dims/squeeze/flatten/broadcast_to/pad, concatenate and
stack, and matmul (vector, matrix and batched with broadcasting). The loss is a weighted sum of
*every* node, so each intermediate's gradient matters and fan-out accumulates. Every node's
value and every leaf's gradient are compared with PyTorch's; ties in max/maximum/relu/abs/clip
follow the same conventions in both (shared equally; 0 at the kink), so no case is excluded.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import tapegrad as tg

MAX_NODES = 9


@dataclass
class Node:
    t: tg.Tensor
    p: torch.Tensor
    desc: str

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.t.shape)


class Builder:
    """Grows the pool of nodes; ``draw`` is hypothesis's ``data.draw``."""

    def __init__(self, draw, rng: np.random.Generator):
        self.draw, self.rng = draw, rng
        self.leaves: list[Node] = []
        self.nodes: list[Node] = []
        self.ops: list[str] = []

    # -- leaves ----------------------------------------------------------------------------------
    def leaf(self, shape: tuple[int, ...]) -> Node:
        a = self.rng.uniform(-2, 2, size=shape)
        node = Node(
            tg.tensor(a, requires_grad=True),
            torch.tensor(a, dtype=torch.float64, requires_grad=True),
            f"leaf{len(self.leaves)}{shape}",
        )
        self.leaves.append(node)
        self.nodes.append(node)
        return node

    def random_shape(self, min_dims=0, max_dims=3) -> tuple[int, ...]:
        n = self.draw(st.integers(min_dims, max_dims))
        return tuple(self.draw(st.integers(1, 4)) for _ in range(n))

    def pick(self, ok=lambda n: True) -> Node | None:
        cands = [n for n in self.nodes if ok(n)]
        return cands[self.int_draw(0, len(cands) - 1)] if cands else None

    def add(self, t, p, desc) -> Node:
        node = Node(t, p, desc)
        self.nodes.append(node)
        return node

    def int_draw(self, lo, hi) -> int:
        return self.draw(st.integers(lo, hi))

    # -- operations ------------------------------------------------------------------------------
    def op_unary(self, x: Node):
        name = self.draw(st.sampled_from(sorted(UNARY)))
        f_tg, f_pt = UNARY[name]
        return self.add(f_tg(x.t), f_pt(x.p), f"{name}({x.desc})")

    def partner(self, shape) -> Node:
        def fits(n):
            try:
                np.broadcast_shapes(shape, n.shape)
            except ValueError:
                return False
            return True

        if self.draw(st.booleans()):
            found = self.pick(fits)
            if found is not None:
                return found
        # a new leaf: a suffix of shape with some dims set to 1, maybe with new leading dims
        k = self.int_draw(0, len(shape))
        dims = [1 if self.draw(st.booleans()) else s for s in shape[len(shape) - k :]]
        lead = [self.int_draw(1, 3) for _ in range(self.int_draw(0, 1 if k == len(shape) else 0))]
        return self.leaf(tuple(lead + dims))

    def op_binary(self, x: Node):
        name = self.draw(st.sampled_from(sorted(BINARY)))
        f_tg, f_pt = BINARY[name]
        if self.draw(st.integers(0, 4)) == 0:  # a Python number on one side
            c = self.draw(st.sampled_from([-1.5, 0.5, 2.0, 3.0]))
            if self.draw(st.booleans()):
                return self.add(f_tg(x.t, c), f_pt(x.p, c), f"{name}({x.desc}, {c})")
            return self.add(f_tg(c, x.t), f_pt(c, x.p), f"{name}({c}, {x.desc})")
        y = self.partner(x.shape)
        if self.draw(st.booleans()):
            x, y = y, x
        return self.add(f_tg(x.t, y.t), f_pt(x.p, y.p), f"{name}({x.desc}, {y.desc})")

    def op_where(self, x: Node):
        y = self.partner(x.shape)
        cond = np.asarray(x.t.data > y.t.data)  # one mask for both libraries
        return self.add(
            tg.where(cond, x.t, y.t * 2.0),
            torch.where(torch.from_numpy(cond), x.p, y.p * 2.0),
            f"where({x.desc} > {y.desc})",
        )

    def axes(self, ndim: int, single=False):
        kind = self.draw(
            st.sampled_from(["int", "neg"] if single else ["none", "int", "neg", "tuple"])
        )
        if kind == "none":
            return None, tuple(range(ndim))
        if kind in ("int", "neg"):
            a = self.int_draw(0, ndim - 1)
            return (a - ndim if kind == "neg" else a), (a,)
        chosen = sorted(
            set(self.draw(st.lists(st.integers(0, ndim - 1), min_size=1, max_size=ndim)))
        )
        return tuple(chosen), tuple(chosen)

    def op_reduce(self, x: Node):
        if x.t.ndim == 0:
            return None
        name = self.draw(st.sampled_from(["sum", "mean", "max", "min", "logsumexp"]))
        axis, dims = self.axes(x.t.ndim)
        keep = self.draw(st.booleans())
        t = getattr(tg, name)(x.t, axis=axis, keepdims=keep)
        pt = {
            "sum": lambda: torch.sum(x.p, dim=dims, keepdim=keep),
            "mean": lambda: torch.mean(x.p, dim=dims, keepdim=keep),
            "max": lambda: torch.amax(x.p, dim=dims, keepdim=keep),
            "min": lambda: torch.amin(x.p, dim=dims, keepdim=keep),
            "logsumexp": lambda: torch.logsumexp(x.p, dim=dims, keepdim=keep),
        }[name]()
        return self.add(t, pt, f"{name}({x.desc}, axis={axis}, keepdims={keep})")

    def op_softmax(self, x: Node):
        if x.t.ndim == 0:
            return None
        axis, (dim,) = self.axes(x.t.ndim, single=True)
        if self.draw(st.booleans()):
            return self.add(tg.softmax(x.t, axis), torch.softmax(x.p, dim), f"softmax({x.desc})")
        return self.add(
            tg.log_softmax(x.t, axis), torch.log_softmax(x.p, dim), f"log_softmax({x.desc})"
        )

    def op_index(self, x: Node):
        if x.t.ndim == 0:
            return None
        shape = x.shape
        kind = self.draw(
            st.sampled_from(["slices", "int", "intarray", "intarray_last", "mask", "mask0"])
        )
        if kind == "slices":
            idx = []
            for n in shape[: self.int_draw(1, len(shape))]:
                step = self.draw(st.sampled_from([1, 1, 2, -1, -2]))
                a, b = sorted(self.draw(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1))))
                if step > 0:
                    idx.append(slice(a, b + 1, step))
                else:
                    idx.append(slice(b, a - 1 if a > 0 else None, step))
            idx = tuple(idx)
            t = x.t[idx]
            # PyTorch has no negative steps: flip, then slice the flipped axes
            p, pidx = x.p, []
            for ax, s in enumerate(idx):
                if s.step < 0:
                    n = shape[ax]
                    p = torch.flip(p, [ax])
                    start = n - 1 - s.start
                    stop = n if s.stop is None else n - 1 - s.stop
                    pidx.append(slice(start, stop, -s.step))
                else:
                    pidx.append(s)
            return self.add(t, p[tuple(pidx)], f"{x.desc}[{idx}]")
        if kind == "int":
            i = self.int_draw(-shape[0], shape[0] - 1)
            return self.add(x.t[i], x.p[i], f"{x.desc}[{i}]")
        if kind in ("intarray", "intarray_last"):
            ax = 0 if kind == "intarray" else len(shape) - 1
            n = shape[ax]
            ids = np.array(self.draw(st.lists(st.integers(-n, n - 1), min_size=1, max_size=6)))
            lead = (slice(None),) * ax
            return self.add(
                x.t[lead + (ids,)], x.p[lead + (torch.from_numpy(ids),)], f"{x.desc}[..., {ids}]"
            )
        mshape = shape if kind == "mask" else shape[:1]
        mask = self.rng.random(mshape) < 0.6
        if not mask.any():
            mask.flat[0] = True
        return self.add(x.t[mask], x.p[torch.from_numpy(mask)], f"{x.desc}[mask{mshape}]")

    def op_reshape(self, x: Node):
        size = int(np.prod(x.shape))
        dims, left = [], size
        for _ in range(self.int_draw(0, 2)):
            divisors = [d for d in range(1, left + 1) if left % d == 0]
            d = self.draw(st.sampled_from(divisors))
            dims.append(d)
            left //= d
        dims.append(left)
        if self.draw(st.booleans()):
            dims[self.int_draw(0, len(dims) - 1)] = -1
        shape = tuple(dims)
        return self.add(tg.reshape(x.t, shape), x.p.reshape(shape), f"reshape({x.desc}, {shape})")

    def op_permute(self, x: Node):
        if x.t.ndim < 2:
            return None
        if self.draw(st.booleans()):
            return self.add(x.t.transpose(), x.p.permute(*reversed(range(x.t.ndim))), "T")
        perm = tuple(self.draw(st.permutations(range(x.t.ndim))))
        return self.add(tg.permute(x.t, perm), x.p.permute(*perm), f"permute({x.desc}, {perm})")

    def op_dims(self, x: Node):
        nd = x.t.ndim
        kind = self.draw(st.sampled_from(["expand", "squeeze", "flatten", "broadcast", "pad"]))
        if kind == "expand":
            a = self.int_draw(-nd - 1, nd)
            return self.add(tg.expand_dims(x.t, a), x.p.unsqueeze(a), f"expand_dims({x.desc}, {a})")
        if kind == "squeeze":
            ones = [i for i, s in enumerate(x.shape) if s == 1]
            if not ones:
                return None
            a = self.draw(st.sampled_from(ones))
            return self.add(tg.squeeze(x.t, a), x.p.squeeze(a), f"squeeze({x.desc}, {a})")
        if kind == "flatten":
            if nd == 0:
                return None
            a = self.int_draw(0, nd - 1)
            return self.add(tg.flatten(x.t, a), torch.flatten(x.p, a), f"flatten({x.desc}, {a})")
        if kind == "broadcast":
            shape = (self.int_draw(1, 3),) + tuple(
                self.int_draw(1, 3) if s == 1 else s for s in x.shape
            )
            return self.add(
                tg.broadcast_to(x.t, shape), x.p.expand(*shape), f"broadcast_to({x.desc}, {shape})"
            )
        if nd == 0:
            return None
        pw = tuple((self.int_draw(0, 2), self.int_draw(0, 2)) for _ in range(nd))
        value = self.draw(st.sampled_from([0.0, -1.0, 0.5]))
        flat = [v for lo_hi in reversed(pw) for v in lo_hi]
        return self.add(
            tg.pad(x.t, pw, value),
            torch.nn.functional.pad(x.p, flat, value=value),
            f"pad({x.desc}, {pw})",
        )

    def op_join(self, x: Node):
        nd = x.t.ndim
        stack = nd == 0 or self.draw(st.booleans())
        parts = [x]
        ax0 = self.int_draw(0, nd - 1) if not stack else 0
        for _ in range(self.int_draw(1, 2)):
            if stack:
                other = self.pick(lambda n: n.shape == x.shape and n is not x)
                if other is None or self.draw(st.booleans()):
                    other = self.leaf(x.shape)
            else:
                other = self.leaf(x.shape[:ax0] + (self.int_draw(1, 3),) + x.shape[ax0 + 1 :])
            parts.append(other)
        if stack:
            a = self.int_draw(-nd - 1, nd)
            return self.add(
                tg.stack([n.t for n in parts], a),
                torch.stack([n.p for n in parts], a),
                f"stack({len(parts)}, {a})",
            )
        # concatenate along the one axis where the shapes may differ
        a = ax0
        return self.add(
            tg.concatenate([n.t for n in parts], a),
            torch.cat([n.p for n in parts], a),
            f"concatenate({len(parts)}, {a})",
        )

    def op_matmul(self, x: Node):
        nd = x.t.ndim
        if nd == 0:
            return None
        k = x.shape[-1]
        kind = self.draw(st.sampled_from(["right", "left", "vec", "batched"]))
        if kind == "right":
            w = self.leaf((k, self.int_draw(1, 4)))
            return self.add(x.t @ w.t, x.p @ w.p, f"{x.desc} @ {w.desc}")
        if kind == "left":
            m = x.shape[-2] if nd >= 2 else x.shape[0]
            w = self.leaf((self.int_draw(1, 4), m))
            return self.add(w.t @ x.t, w.p @ x.p, f"{w.desc} @ {x.desc}")
        if kind == "vec":
            v = self.leaf((k,))
            return self.add(x.t @ v.t, x.p @ v.p, f"{x.desc} @ {v.desc}")
        if nd > 3:
            return None
        w = self.leaf((self.draw(st.sampled_from([1, 2])), 1, k, self.int_draw(1, 3)))
        return self.add(tg.matmul(x.t, w.t), torch.matmul(x.p, w.p), f"{x.desc} @ {w.desc}")


UNARY = {
    "tanh": (tg.tanh, torch.tanh),
    "sigmoid": (tg.sigmoid, torch.sigmoid),
    "sin": (tg.sin, torch.sin),
    "cos": (tg.cos, torch.cos),
    "relu": (tg.relu, torch.relu),
    "abs": (tg.abs, torch.abs),
    "softplus": (tg.softplus, torch.nn.functional.softplus),
    "neg": (lambda x: -x, lambda x: -x),
    "exp_tanh": (lambda x: tg.exp(tg.tanh(x)), lambda x: torch.exp(torch.tanh(x))),
    "log_1_sq": (lambda x: tg.log(x * x + 1.0), lambda x: torch.log(x * x + 1.0)),
    "sqrt_1_sq": (lambda x: tg.sqrt(1.0 + x * x), lambda x: torch.sqrt(1.0 + x * x)),
    "square": (lambda x: x**2, lambda x: x**2),
    "cube": (lambda x: x**3.0, lambda x: x**3.0),
    "clip": (lambda x: tg.clip(x, -0.5, 0.7), lambda x: torch.clamp(x, -0.5, 0.7)),
    "astype": (lambda x: tg.astype(x, np.float64) * 1.0, lambda x: x.to(torch.float64) * 1.0),
}


def _safe_div(a, b):
    return a / (b * b + 1.0)


def _rsub(a, b):
    return b - a


BINARY = {
    "add": (lambda a, b: a + b, lambda a, b: a + b),
    "sub": (lambda a, b: a - b, lambda a, b: a - b),
    "rsub": (_rsub, _rsub),
    "mul": (lambda a, b: a * b, lambda a, b: a * b),
    "div": (_safe_div, _safe_div),
    "maximum": (tg.maximum, lambda a, b: torch.maximum(*_tensors(a, b))),
    "minimum": (tg.minimum, lambda a, b: torch.minimum(*_tensors(a, b))),
}


def _tensors(a, b):
    def lift(v):
        return v if isinstance(v, torch.Tensor) else torch.tensor(v, dtype=torch.float64)

    return lift(a), lift(b)


OPS = [
    "unary",
    "unary",
    "binary",
    "binary",
    "where",
    "reduce",
    "reduce",
    "softmax",
    "index",
    "index",
    "reshape",
    "permute",
    "dims",
    "join",
    "matmul",
    "matmul",
]


def build(draw, seed: int) -> Builder:
    b = Builder(draw, np.random.default_rng(seed))
    for _ in range(draw(st.integers(1, 2))):
        b.leaf(b.random_shape())
    for _ in range(draw(st.integers(1, MAX_NODES))):
        x = b.pick()
        op = draw(st.sampled_from(OPS))
        if getattr(b, f"op_{op}")(x) is not None:
            b.ops.append(op)
    return b


def _close(got: np.ndarray, want: np.ndarray, what: str, rtol: float) -> None:
    assert got.shape == want.shape, f"{what}: shape {got.shape} vs PyTorch {want.shape}"
    scale = max(1.0, float(np.max(np.abs(want), initial=0.0)))
    np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol * scale, err_msg=what)


CASES = {"graphs": 0, "nodes": 0}
OPS_SEEN: dict[str, int] = dict.fromkeys(OPS, 0)


@settings(
    max_examples=250,
    deadline=None,
    derandomize=True,  # the same 250 graphs on every run: test_fuzz_report's coverage is fixed
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
@given(data=st.data(), seed=st.integers(0, 2**31 - 1))
def test_random_graphs_match_pytorch_values_and_gradients(data, seed):
    b = build(data.draw, seed)
    for n in b.nodes:
        assume(np.all(np.isfinite(n.t.data)) and np.max(np.abs(n.t.data), initial=0) < 1e6)
    rng = np.random.default_rng(seed + 1)
    weights = [rng.uniform(-1, 1, size=n.shape) for n in b.nodes]
    loss_t = sum((n.t * w).sum() for n, w in zip(b.nodes, weights))
    loss_p = sum((n.p * torch.from_numpy(w)).sum() for n, w in zip(b.nodes, weights))
    for n in b.nodes:
        assert n.t.dtype == np.float64, f"{n.desc}: dtype {n.t.dtype}"
        _close(n.t.data, n.p.detach().numpy(), f"value of {n.desc}", 1e-10)
    loss_t.backward()
    loss_p.backward()
    for leaf in b.leaves:
        _close(leaf.t.grad, leaf.p.grad.numpy(), f"gradient of {leaf.desc}", 1e-9)
    CASES["graphs"] += 1
    CASES["nodes"] += len(b.nodes)
    for op in b.ops:
        OPS_SEEN[op] += 1


def test_fuzz_report():
    """Runs after the fuzz test (same module, file order): say how many graphs were checked."""
    print(f"graph fuzz: {CASES['graphs']} graphs, {CASES['nodes']} nodes compared with PyTorch")
    print(f"operations drawn: {OPS_SEEN}")
    assert CASES["graphs"] >= 100
    assert min(OPS_SEEN.values()) >= 10, OPS_SEEN  # every kind of operation was exercised
