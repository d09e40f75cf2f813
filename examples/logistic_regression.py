"""Fit a logistic regression with ``tapegrad.value_and_grad`` and plain gradient descent.

python examples/logistic_regression.py
"""

import numpy as np

import tapegrad as tg

rng = np.random.default_rng(0)
true_w = np.array([2.0, -3.0, 0.5], dtype=np.float32)
X = rng.normal(size=(1000, 3)).astype(np.float32)
y = (rng.uniform(size=1000) < 1 / (1 + np.exp(-(X @ true_w + 0.25)))).astype(np.float32)


def loss(w, b):
    logits = X @ w + b
    # binary cross-entropy from logits, written with engine operations
    return (tg.softplus(logits) - y * logits).mean()


w, b = np.zeros(3, np.float32), np.zeros((), np.float32)
step = tg.value_and_grad(loss, argnums=(0, 1))
for it in range(301):
    value, (gw, gb) = step(w, b)
    w -= 0.5 * gw
    b -= 0.5 * gb
    if it % 50 == 0:
        print(f"step {it:3d}  loss {float(value):.4f}")
accuracy = np.mean(((X @ w + b) > 0) == (y > 0.5))
print(f"weights {np.round(w, 2)} (true {true_w}), bias {float(b):.2f}, accuracy {accuracy:.3f}")
