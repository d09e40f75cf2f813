"""JAX's side of a benchmark: the preset's architecture as a pure function of a parameter dict
(tapegrad's names), one ``jax.jit``-compiled update step (``value_and_grad`` + the optimiser,
parameters and optimiser state donated so XLA updates them in place). The optimiser is optax's
``adam``/``sgd`` when optax is installed, else the same update written out by hand; ``adamw``
and SGD with momentum or weight decay (the general workloads') are optax's. The general
workloads' forward passes are in :mod:`tapegrad.bench.jax_general` (BatchNorm buffers, dropout
keys: a step's key is ``fold_in(key(seed), step)``)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from .jax_general import APPLY, split_buffers

try:  # noqa: SIM105
    import optax
except ImportError:  # pragma: no cover - depends on the environment
    optax = None


def _dense(p, name, x, bias=True):
    y = x @ p[f"{name}.weight"].T
    return y + p[f"{name}.bias"] if bias else y


def _max_pool(x, window: int, dims: int):
    shape = (1, 1) + (window,) * dims
    return lax.reduce_window(x, -jnp.inf, lax.max, shape, shape, "VALID")


def forward(preset: str):
    """The preset's forward pass ``f(params, x) -> logits``."""

    def seed_cnn(p, x):
        x = x.reshape(x.shape[0], 1, 28, 28)
        dn = ("NCHW", "OIHW", "NCHW")
        x = lax.conv_general_dilated(x, p["1.weight"], (1, 1), "VALID", dimension_numbers=dn)
        x = _max_pool(jax.nn.relu(x), 2, 2).reshape(x.shape[0], -1)
        x = jax.nn.relu(_dense(p, "5", x, bias=False))
        return _dense(p, "7", x, bias=False)

    def seed_rnn(p, x):
        def w(name):  # the recurrent layer's names, PyTorch's (_l0) or tapegrad's former ones
            return p[f"rnn.{name}_l0"] if f"rnn.{name}_l0" in p else p[f"rnn.{name}"]

        x = x.reshape(x.shape[0], 4, -1)
        h = jnp.zeros((x.shape[0], w("weight_hh").shape[0]), x.dtype)
        for t in range(x.shape[1]):
            h = jnp.tanh(
                x[:, t] @ w("weight_ih").T + w("bias_ih") + h @ w("weight_hh").T + w("bias_hh")
            )
        return _dense(p, "head", h)

    def text_cnn(p, x):
        # indexing, as JAX users look rows up: jnp.take (its "fill" mode checks every index)
        # made the whole text-cnn step ~17% slower, which the bench's self-check caught
        e = p["0.weight"][x].transpose(0, 2, 1)
        dn = ("NCH", "OIH", "NCH")
        c = lax.conv_general_dilated(e, p["2.weight"], (1,), "VALID", dimension_numbers=dn)
        c = jax.nn.relu(c + p["2.bias"][None, :, None])
        return _dense(p, "6", _max_pool(c, 8, 1).reshape(x.shape[0], -1))

    def mlp(p, x):
        x = jax.nn.relu(_dense(p, "1", x.reshape(x.shape[0], -1)))
        return _dense(p, "3", x)

    table = {
        "seed-cnn": seed_cnn,
        "seed-rnn": seed_rnn,
        "text-cnn": text_cnn,
        "text-cnn-learned": text_cnn,
        "mlp": mlp,
    }
    if preset not in table:
        raise ValueError(f"jax runner: no architecture for preset {preset!r}")
    return table[preset]


def _optimizer(name: str, lr: float, momentum: float = 0.0, weight_decay: float = 0.0):
    """``(init(params) -> state, update(grads, state, params) -> (params, state))``."""
    if momentum or weight_decay or name == "adamw":
        if optax is None:
            raise ValueError(f"jax runner: {name} with momentum or weight decay needs optax")
        if name == "adamw":
            tx = optax.adamw(lr, weight_decay=weight_decay)
        elif name == "sgd":  # PyTorch's SGD: the decay added to the gradient, then momentum
            tx = optax.chain(optax.add_decayed_weights(weight_decay), optax.sgd(lr, momentum))
        else:
            raise ValueError(f"jax runner: optimizer {name!r} with these settings not wired")

        def update_(grads, state, params):
            updates, state = tx.update(grads, state, params)
            return optax.apply_updates(params, updates), state

        return tx.init, update_, f"optax.{name}"
    if optax is not None:
        tx = {"adam": optax.adam, "sgd": optax.sgd}.get(name)
        if tx is None:
            raise ValueError(f"jax runner: optimizer {name!r} not wired")
        tx = tx(lr)

        def update(grads, state, params):
            updates, state = tx.update(grads, state, params)
            return optax.apply_updates(params, updates), state

        return tx.init, update, f"optax.{name}"
    if name == "sgd":
        return (
            lambda params: (),
            lambda g, s, p: (jax.tree.map(lambda w, d: w - lr * d, p, g), s),
            "hand-written sgd",
        )
    if name == "adam":
        b1, b2, eps = 0.9, 0.999, 1e-8

        def init(params):
            zeros = jax.tree.map(jnp.zeros_like, params)
            return (jnp.zeros((), jnp.int32), zeros, zeros)

        def update(g, state, p):
            t, m, v = state
            t = t + 1
            m = jax.tree.map(lambda m, d: m + (1 - b1) * (d - m), m, g)
            v = jax.tree.map(lambda v, d: b2 * v + (1 - b2) * d * d, v, g)
            tf = t.astype(jnp.float32)
            step = lr / (1 - b1**tf)
            c2 = jnp.sqrt(1 - b2**tf)
            p = jax.tree.map(lambda w, m, v: w - step * m / (jnp.sqrt(v) / c2 + eps), p, m, v)
            return p, (t, m, v)

        return init, update, "hand-written adam (tapegrad's formula)"
    raise ValueError(f"jax runner: optimizer {name!r} not wired")


class JaxRunner:
    mode = "jit"

    def __init__(self, spec: dict, weights: dict[str, np.ndarray]):
        self.binary = spec["task"] == "binary"
        self.language_model = spec["task"] == "language-model"
        preset = spec["preset"]
        if preset in APPLY:
            apply = APPLY[preset]
        else:
            f = forward(preset)

            def apply(params, buffers, x, train, key):
                return f(params, x), buffers

        binary, language_model = self.binary, self.language_model

        def loss_and_logits(params, buffers, x, y, train=False, key=None):
            logits, buffers = apply(params, buffers, x, train, key)
            if language_model:
                logp = jax.nn.log_softmax(logits.reshape(-1, logits.shape[-1]), axis=-1)
                loss = -jnp.mean(jnp.take_along_axis(logp, y.reshape(-1, 1), axis=1))
            elif binary:
                z = logits.reshape(-1)
                yf = y.astype(z.dtype)
                loss = jnp.mean(jnp.maximum(z, 0) - z * yf + jnp.log1p(jnp.exp(-jnp.abs(z))))
            else:
                logp = jax.nn.log_softmax(logits, axis=-1)
                loss = -jnp.mean(jnp.take_along_axis(logp, y[:, None], axis=1))
            return loss, (logits, buffers)

        init, update, opt_name = _optimizer(
            spec["optimizer"], spec["lr"], spec.get("momentum", 0.0), spec.get("weight_decay", 0.0)
        )
        base_key = jax.random.key(spec["seed"])

        def train_step(params, state, buffers, step, x, y):
            key = jax.random.fold_in(base_key, step)
            grad_fn = jax.value_and_grad(loss_and_logits, has_aux=True)
            (loss, (_, buffers)), grads = grad_fn(params, buffers, x, y, True, key)
            params, state = update(grads, state, params)
            return params, state, buffers, loss

        def eval_step(params, buffers, x, y):
            loss, (logits, _) = loss_and_logits(params, buffers, x, y)
            if language_model:
                correct = jnp.zeros((), jnp.int32)
            elif binary:
                correct = jnp.sum((logits.reshape(-1) > 0) == (y > 0))
            else:
                correct = jnp.sum(jnp.argmax(logits, axis=1) == y)
            return loss, correct

        self._train = jax.jit(train_step, donate_argnums=(0, 1, 2))
        self._eval = jax.jit(eval_step)
        params, buffers = split_buffers(weights)
        self.params = {k: jnp.asarray(v) for k, v in params.items()}
        self.buffers = {k: jnp.asarray(v) for k, v in buffers.items()}
        self.state = init(self.params)
        self.steps = 0
        self.notes = f"jax.jit(value_and_grad + {opt_name}), params donated"

    @staticmethod
    def _y(y: np.ndarray) -> np.ndarray:
        return y.astype(np.int32, copy=False)

    def step(self, x: np.ndarray, y: np.ndarray) -> float:
        self.params, self.state, self.buffers, loss = self._train(
            self.params, self.state, self.buffers, self.steps, x, self._y(y)
        )
        self.steps += 1
        return float(loss)

    def evaluate(self, x: np.ndarray, y: np.ndarray) -> tuple[float, float | None]:
        total, correct = 0.0, 0
        for lo in range(0, len(x), 1000):
            xb, yb = x[lo : lo + 1000], self._y(y[lo : lo + 1000])
            loss, c = self._eval(self.params, self.buffers, xb, yb)
            total += float(loss) * len(yb)
            correct += int(c)
        return total / len(x), (None if self.language_model else correct / len(x))

    def allocated(self, x: np.ndarray, y: np.ndarray) -> tuple[int | None, str]:
        """XLA's buffer assignment for the compiled step: temporaries plus outputs that do not
        reuse a donated input. Static (what the plan reserves), not traced at run time."""
        args = (self.params, self.state, self.buffers, self.steps, x, self._y(y))
        compiled = self._train.lower(*args).compile()
        stats = compiled.memory_analysis()
        if stats is None:
            return None, "n/a: this jaxlib reports no memory analysis"
        nbytes = stats.temp_size_in_bytes + stats.output_size_in_bytes - stats.alias_size_in_bytes
        return max(int(nbytes), 0), "XLA buffer assignment of the jitted step (temp + new output)"

    def versions(self) -> dict:
        import jaxlib

        out = {"jax": jax.__version__, "jaxlib": jaxlib.__version__}
        if optax is not None:
            out["optax"] = optax.__version__
        return out
