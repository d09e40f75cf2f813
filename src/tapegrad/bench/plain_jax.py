"""The bench's JAX reference: a plain JAX training loop, written the way a JAX user writes it.

    python plain_jax.py SPEC.json

``tapegrad bench --vs jax`` runs this file directly (nothing of tapegrad is imported into the
process) beside its JAX worker and fails when the two disagree by more than 10%. SPEC.json is
the file the bench writes (see ``plain_torch.py``). The loop is the textbook one: the model a
function of a dict of parameters, one ``jax.jit`` of ``value_and_grad`` plus the optax update
(parameters and optimiser state donated), NumPy batches gathered by index, the loss read back
with ``float()``, each epoch timed with ``perf_counter`` (and its CPU time taken with
``process_time``). XLA sizes its thread pool by the CPUs the process may use, so the bench sets
the thread count through CPU affinity (as ``taskset``).
"""

import json
import sys
import time
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax import lax
from safetensors.numpy import load_file


def max_pool(x, size):
    window = (1, 1) + (size,) * (x.ndim - 2)
    return lax.reduce_window(x, -jnp.inf, lax.max, window, window, "VALID")


def seed_cnn(p, x):
    x = lax.conv(x[:, None], p["1.weight"], (1, 1), "VALID")
    x = max_pool(jax.nn.relu(x), 2).reshape(len(x), -1)
    return jax.nn.relu(x @ p["5.weight"].T) @ p["7.weight"].T


def seed_rnn(p, x):
    xs = x.reshape(len(x), 4, 196)
    h = jnp.zeros((len(x), 64), x.dtype)
    for t in range(4):
        h = jnp.tanh(
            xs[:, t] @ p["rnn.weight_ih_l0"].T
            + p["rnn.bias_ih_l0"]
            + h @ p["rnn.weight_hh_l0"].T
            + p["rnn.bias_hh_l0"]
        )
    return h @ p["head.weight"].T + p["head.bias"]


def text_cnn(p, x):
    e = p["0.weight"][x].transpose(0, 2, 1)  # (batch, embedding, words)
    c = lax.conv(e, p["2.weight"], (1,), "VALID") + p["2.bias"][:, None]
    c = max_pool(jax.nn.relu(c), 8).reshape(len(x), -1)
    return (c @ p["6.weight"].T + p["6.bias"])[:, 0]


def mlp(p, x):
    h = jax.nn.relu(x.reshape(len(x), -1) @ p["1.weight"].T + p["1.bias"])
    return h @ p["3.weight"].T + p["3.bias"]


def layer_norm(p, name, x):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / jnp.sqrt(var + 1e-5) * p[name + ".weight"] + p[name + ".bias"]


def dropout(x, key):
    if key is None:
        return x
    return jnp.where(jax.random.bernoulli(key, 0.9, x.shape), x / 0.9, 0.0)


def linear(p, name, x):
    return x @ p[name + ".weight"].T + p[name + ".bias"]


def char_lm(p, state, x, key=None):
    n, t = x.shape
    layers = len({k.split(".")[1] for k in p if k.startswith("blocks.")})
    keys = jax.random.split(key, 4 * layers + 1) if key is not None else [None] * (4 * layers + 1)
    h = dropout(p["tok.weight"][x] + p["pos.weight"][:t], keys[-1])
    d = h.shape[-1]
    for i in range(layers):
        b = f"blocks.{i}"
        qkv = linear(p, b + ".attn.qkv", layer_norm(p, b + ".ln1", h))
        q, k, v = qkv.reshape(n, t, 3, 4, d // 4).transpose(2, 0, 3, 1, 4)  # 4 heads
        scores = jnp.where(jnp.tril(jnp.ones((t, t), bool)), q @ k.swapaxes(2, 3), -jnp.inf)
        w = dropout(jax.nn.softmax(scores / jnp.sqrt(d // 4), axis=-1), keys[4 * i])
        y = (w @ v).transpose(0, 2, 1, 3).reshape(n, t, d)
        h = h + dropout(linear(p, b + ".attn.proj", y), keys[4 * i + 1])
        m = jax.nn.gelu(linear(p, b + ".fc", layer_norm(p, b + ".ln2", h)), approximate=False)
        h = h + dropout(linear(p, b + ".proj", m), keys[4 * i + 2])
    return layer_norm(p, "ln_f", h) @ p["head.weight"].T, state


def conv(x, w, stride, pad):
    return lax.conv(x, w, (stride, stride), ((pad, pad), (pad, pad)))


def batch_norm(p, state, name, x, train):
    if not train:
        mean, var = state[name + ".running_mean"], state[name + ".running_var"]
    else:
        mean, var = x.mean((0, 2, 3)), x.var((0, 2, 3))
        m = x.size // x.shape[1]
        state[name + ".running_mean"] = 0.9 * state[name + ".running_mean"] + 0.1 * mean
        state[name + ".running_var"] = 0.9 * state[name + ".running_var"] + 0.1 * var * m / (m - 1)
    shape = (1, -1, 1, 1)  # as Flax's BatchNorm: (x - mean) * (weight * rsqrt(var + eps)) + bias
    mul = p[name + ".weight"] * lax.rsqrt(var + 1e-5)
    return (x - mean.reshape(shape)) * mul.reshape(shape) + p[name + ".bias"].reshape(shape)


def resnet(p, state, x, key=None):
    train, state = key is not None, dict(state)
    h = jax.nn.relu(
        batch_norm(p, state, "2", conv(x.reshape(-1, 1, 28, 28), p["1.weight"], 1, 1), train)
    )
    for i in sorted({int(k.split(".")[0]) for k in p if ".conv1." in k}):
        cout, cin = p[f"{i}.conv1.weight"].shape[:2]
        stride = 1 if cout == cin else 2
        out = jax.nn.relu(
            batch_norm(p, state, f"{i}.bn1", conv(h, p[f"{i}.conv1.weight"], stride, 1), train)
        )
        out = batch_norm(p, state, f"{i}.bn2", conv(out, p[f"{i}.conv2.weight"], 1, 1), train)
        if f"{i}.shortcut.0.weight" in p:
            h = batch_norm(
                p, state, f"{i}.shortcut.1", conv(h, p[f"{i}.shortcut.0.weight"], stride, 0), train
            )
        h = jax.nn.relu(out + h)
    fc = str(max(int(k.split(".")[0]) for k in p if k[0].isdigit()))
    return linear(p, fc, h.mean((2, 3))), state


MODELS = {"seed-cnn": seed_cnn, "seed-rnn": seed_rnn, "text-cnn": text_cnn, "mlp": mlp}


def make_model(name: str):
    """The model as a function ``(params, state, x, key) -> (logits, state)``."""
    preset = "text-cnn" if name == "text-cnn-learned" else name
    if preset in ("char-lm", "resnet"):
        return char_lm if preset == "char-lm" else resnet
    return lambda p, state, x, key=None: (MODELS[preset](p, x), state)


def make_loss(model, binary: bool):
    def loss_fn(params, state, x, y, key=None):
        logits, state = model(params, state, x, key)
        if binary:
            return optax.sigmoid_binary_cross_entropy(logits, y).mean(), state
        return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean(), state

    return loss_fn


def make_optimizer(spec: dict):
    lr, wd, momentum = spec["lr"], spec.get("weight_decay", 0.0), spec.get("momentum", 0.0)
    if spec["optimizer"] == "adamw":
        return optax.adamw(lr, weight_decay=wd)
    if spec["optimizer"] == "adam":
        return optax.chain(optax.add_decayed_weights(wd), optax.adam(lr)) if wd else optax.adam(lr)
    # PyTorch's SGD: the weight decay added to the gradient, then momentum
    tx = optax.sgd(lr, momentum or None)
    return optax.chain(optax.add_decayed_weights(wd), tx) if wd else tx


def make_train_step(loss_fn, tx, seed: int):
    @partial(jax.jit, donate_argnums=(0, 1, 2))
    def train_step(params, state, opt_state, step, x, y):
        key = jax.random.fold_in(jax.random.key(seed), step)
        (loss, state), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, state, x, y, key)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), state, opt_state, loss

    return train_step


def train(spec: dict) -> dict:
    """Train as ``spec`` says; the timings and losses the self-check compares."""
    binary = spec["task"] == "binary"
    loss_fn = make_loss(make_model(spec["preset"]), binary)
    tx = make_optimizer(spec)
    train_step = make_train_step(loss_fn, tx, spec["seed"])
    weights = {k: jnp.asarray(v) for k, v in load_file(spec["weights"]).items()}
    buffers = ("running_mean", "running_var", "num_batches_tracked")
    params = {k: v for k, v in weights.items() if not k.endswith(buffers)}
    state = {k: v for k, v in weights.items() if k.endswith(buffers)}
    opt_state = tx.init(params)
    X = np.load(spec["data"]["train_x"], allow_pickle=False)
    Y = np.load(spec["data"]["train_y"], allow_pickle=False)
    Y = Y.astype(np.float32 if binary else np.int32)
    batch_size, steps = spec["batch_size"], spec.get("steps")
    batches_per_epoch = -(-len(X) // batch_size)
    epochs = -(-steps // batches_per_epoch) if steps else spec["epochs"]
    reference_loss = None
    if spec.get("stochastic"):  # dropout: the first batch's loss without it, for the check
        idx = np.random.default_rng([spec["seed"], 1]).permutation(len(X))[:batch_size]
        reference_loss = float(jax.jit(loss_fn)(params, state, X[idx], Y[idx])[0])

    epoch_seconds, epoch_cpu_seconds, step_seconds, losses, epoch_losses = [], [], [], [], []
    for epoch in range(1, epochs + 1):
        order = np.random.default_rng([spec["seed"], epoch]).permutation(len(X))
        first_of_epoch, t_epoch, cpu_epoch = len(losses), time.perf_counter(), time.process_time()
        for i in range(0, len(X), batch_size):
            t_step = time.perf_counter()
            idx = order[i : i + batch_size]
            params, state, opt_state, loss = train_step(
                params, state, opt_state, len(losses), X[idx], Y[idx]
            )
            losses.append(float(loss))
            step_seconds.append(time.perf_counter() - t_step)
            if len(losses) == steps:
                break
        epoch_seconds.append(time.perf_counter() - t_epoch)
        epoch_cpu_seconds.append(time.process_time() - cpu_epoch)
        epoch_losses.append(float(np.mean(losses[first_of_epoch:])))
    return {
        "framework": "jax-plain",
        "epoch_seconds": epoch_seconds,
        "epoch_cpu_seconds": epoch_cpu_seconds,
        "step_seconds": step_seconds,
        "first_loss": losses[0],
        "reference_loss": reference_loss,
        "final_loss": epoch_losses[-1],
        "cpu_seconds": sum(epoch_cpu_seconds),
        "jax": jax.__version__,
    }


def main(argv: list[str]) -> None:
    with open(argv[1]) as f:
        spec = json.load(f)
    print(json.dumps(train(spec)))


if __name__ == "__main__":
    main(sys.argv)
