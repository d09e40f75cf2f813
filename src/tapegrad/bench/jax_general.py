"""JAX's side of the general workloads, char-lm and resnet, as JAX users write them: pure
functions of a parameter dict (tapegrad's names). Both take more than ``(params, x)``: the
ResNet's BatchNorm keeps running statistics (``buffers``, returned updated in training), the
character model draws dropout masks from a PRNG ``key`` (None in evaluation).

``apply(params, buffers, x, train, key) -> (logits, buffers)`` is the form
:class:`~tapegrad.bench.jax_runner.JaxRunner` trains every workload in."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from jax import lax

#: What a BatchNorm keeps besides its parameters (buffers, not trained).
BUFFER_SUFFIXES = ("running_mean", "running_var", "num_batches_tracked")
HEADS = 4  # the char-lm preset's heads (tapegrad.models.CharLM's default)
DROPOUT = 0.1  # and its dropout


def _dense(p, name, x, bias=True):
    y = x @ p[f"{name}.weight"].T
    return y + p[f"{name}.bias"] if bias else y


def _layer_norm(p, name, x, eps=1e-5):
    mean = x.mean(-1, keepdims=True)
    var = jnp.square(x - mean).mean(-1, keepdims=True)
    return (x - mean) * lax.rsqrt(var + eps) * p[f"{name}.weight"] + p[f"{name}.bias"]


def _dropout(x, key, rate):
    if key is None:
        return x
    keep = jax.random.bernoulli(key, 1.0 - rate, x.shape)
    return jnp.where(keep, x / (1.0 - rate), 0.0)


def char_lm(p, buffers, x, train, key, heads: int = HEADS, rate: float = DROPOUT):
    """nanoGPT-style: embeddings + positions, pre-norm blocks (causal attention, exact-GELU
    MLP), final LayerNorm, untied head; dropout on embeddings, attention weights and both
    residual branches when ``key`` is given."""
    n, t = x.shape
    layers = len({k.split(".")[1] for k in p if k.startswith("blocks.")})
    keys = list(jax.random.split(key, 1 + 3 * layers)) if train else [None] * (1 + 3 * layers)
    h = _dropout(p["tok.weight"][x] + p["pos.weight"][:t], keys[0], rate)
    d = h.shape[-1]
    causal = jnp.tril(jnp.ones((t, t), bool))
    for i in range(layers):
        b = f"blocks.{i}"
        qkv = _dense(p, f"{b}.attn.qkv", _layer_norm(p, f"{b}.ln1", h))
        q, k, v = qkv.reshape(n, t, 3, heads, d // heads).transpose(2, 0, 3, 1, 4)
        scores = (q / math.sqrt(d // heads)) @ k.swapaxes(-1, -2)
        w = jax.nn.softmax(jnp.where(causal, scores, -jnp.inf), axis=-1)
        y = (_dropout(w, keys[1 + 3 * i], rate) @ v).transpose(0, 2, 1, 3).reshape(n, t, d)
        h = h + _dropout(_dense(p, f"{b}.attn.proj", y), keys[2 + 3 * i], rate)
        m = jax.nn.gelu(_dense(p, f"{b}.fc", _layer_norm(p, f"{b}.ln2", h)), approximate=False)
        h = h + _dropout(_dense(p, f"{b}.proj", m), keys[3 + 3 * i], rate)
    return _layer_norm(p, "ln_f", h) @ p["head.weight"].T, buffers


def _conv(x, w, stride, padding):
    dn = ("NCHW", "OIHW", "NCHW")
    pad = ((padding, padding), (padding, padding))
    return lax.conv_general_dilated(x, w, (stride, stride), pad, dimension_numbers=dn)


def _batch_norm(p, buffers, new, name, x, train, momentum=0.1, eps=1e-5):
    """BatchNorm2d as PyTorch computes it: batch statistics in training (the running variance
    updated with the unbiased one), the running ones in evaluation."""
    if train:
        mean, var = x.mean((0, 2, 3)), x.var((0, 2, 3))
        n = x.size // x.shape[1]
        new[f"{name}.running_mean"] = (1 - momentum) * buffers[
            f"{name}.running_mean"
        ] + momentum * mean
        new[f"{name}.running_var"] = (1 - momentum) * buffers[f"{name}.running_var"] + (
            momentum * var * n / (n - 1)
        )
        new[f"{name}.num_batches_tracked"] = buffers[f"{name}.num_batches_tracked"] + 1
    else:
        mean, var = buffers[f"{name}.running_mean"], buffers[f"{name}.running_var"]
    mul = p[f"{name}.weight"] * lax.rsqrt(var + eps)  # as Flax's BatchNorm and the plain loop
    return (x - mean[:, None, None]) * mul[:, None, None] + p[f"{name}.bias"][:, None, None]


def resnet(p, buffers, x, train, key=None):
    """Stem conv + BN + ReLU, BasicBlocks (the layer numbers and shortcuts read from the
    parameter names), global average pooling, Linear."""
    new = dict(buffers)
    h = x.reshape(x.shape[0], 1, 28, 28)
    h = jax.nn.relu(_batch_norm(p, buffers, new, "2", _conv(h, p["1.weight"], 1, 1), train))
    blocks = sorted({int(k.split(".")[0]) for k in p if ".conv1." in k})
    for i in blocks:
        projected = f"{i}.shortcut.0.weight" in p
        cout, cin = p[f"{i}.conv1.weight"].shape[:2]
        stride = 2 if projected and cout != cin else 1
        out = _conv(h, p[f"{i}.conv1.weight"], stride, 1)
        out = jax.nn.relu(_batch_norm(p, buffers, new, f"{i}.bn1", out, train))
        out = _conv(out, p[f"{i}.conv2.weight"], 1, 1)
        out = _batch_norm(p, buffers, new, f"{i}.bn2", out, train)
        if projected:
            short = _conv(h, p[f"{i}.shortcut.0.weight"], stride, 0)
            h_short = _batch_norm(p, buffers, new, f"{i}.shortcut.1", short, train)
        else:
            h_short = h
        h = jax.nn.relu(out + h_short)
    last = max(int(k.split(".")[0]) for k in p if k.split(".")[0].isdigit())
    return _dense(p, str(last), h.mean((2, 3))), new


APPLY = {"char-lm": char_lm, "resnet": resnet}


def split_buffers(weights: dict) -> tuple[dict, dict]:
    """(trained parameters, buffers) of tapegrad's state dict."""
    params = {k: v for k, v in weights.items() if not k.endswith(BUFFER_SUFFIXES)}
    buffers = {k: v for k, v in weights.items() if k.endswith(BUFFER_SUFFIXES)}
    return params, buffers
