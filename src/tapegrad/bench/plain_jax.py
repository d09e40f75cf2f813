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

spec = json.load(open(sys.argv[1]))


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


models = {"seed-cnn": seed_cnn, "seed-rnn": seed_rnn, "text-cnn": text_cnn, "mlp": mlp}
model = models["text-cnn" if spec["preset"] == "text-cnn-learned" else spec["preset"]]
binary = spec["task"] == "binary"


def loss_fn(params, x, y):
    logits = model(params, x)
    if binary:
        return optax.sigmoid_binary_cross_entropy(logits, y).mean()
    return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()


tx = optax.adam(spec["lr"]) if spec["optimizer"] == "adam" else optax.sgd(spec["lr"])


@partial(jax.jit, donate_argnums=(0, 1))
def train_step(params, opt_state, x, y):
    loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
    updates, opt_state = tx.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss


params = {k: jnp.asarray(v) for k, v in load_file(spec["weights"]).items()}
opt_state = tx.init(params)
X = np.load(spec["data"]["train_x"], allow_pickle=False)
Y = np.load(spec["data"]["train_y"], allow_pickle=False).astype(np.float32 if binary else np.int32)
batch_size, steps = spec["batch_size"], spec.get("steps")
batches_per_epoch = -(-len(X) // batch_size)
epochs = -(-steps // batches_per_epoch) if steps else spec["epochs"]

epoch_seconds, epoch_cpu_seconds, step_seconds, losses, epoch_losses = [], [], [], [], []
for epoch in range(1, epochs + 1):
    order = np.random.default_rng([spec["seed"], epoch]).permutation(len(X))
    first_of_epoch, t_epoch, cpu_epoch = len(losses), time.perf_counter(), time.process_time()
    for i in range(0, len(X), batch_size):
        t_step = time.perf_counter()
        idx = order[i : i + batch_size]
        params, opt_state, loss = train_step(params, opt_state, X[idx], Y[idx])
        losses.append(float(loss))
        step_seconds.append(time.perf_counter() - t_step)
        if len(losses) == steps:
            break
    epoch_seconds.append(time.perf_counter() - t_epoch)
    epoch_cpu_seconds.append(time.process_time() - cpu_epoch)
    epoch_losses.append(float(np.mean(losses[first_of_epoch:])))

print(
    json.dumps(
        {
            "framework": "jax-plain",
            "epoch_seconds": epoch_seconds,
            "epoch_cpu_seconds": epoch_cpu_seconds,
            "step_seconds": step_seconds,
            "first_loss": losses[0],
            "final_loss": epoch_losses[-1],
            "cpu_seconds": sum(epoch_cpu_seconds),
            "jax": jax.__version__,
        }
    )
)
