"""PyTorch's side of a benchmark: the preset's architecture as an eager ``nn.Module``, trained
with ``torch.optim`` the way a PyTorch user writes it. Parameter names match tapegrad's (the
recurrent layer's ``weight_ih_l0``, ... as well), so tapegrad's exported weights load 1:1."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn


class _Reshape(nn.Module):
    def __init__(self, *shape: int):
        super().__init__()
        self.shape = shape

    def forward(self, x):
        return x.reshape(x.shape[0], *self.shape)


class _Permute(nn.Module):
    def __init__(self, *dims: int):
        super().__init__()
        self.dims = dims

    def forward(self, x):
        return x.permute(*self.dims)


class _SeedRNN(nn.Module):
    def __init__(self, steps: int = 4, hidden: int = 64, classes: int = 10):
        super().__init__()
        self.steps = steps
        self.rnn = nn.RNN(784 // steps, hidden, nonlinearity="tanh", batch_first=True)
        self.head = nn.Linear(hidden, classes)

    def forward(self, x):
        _, h = self.rnn(x.reshape(x.shape[0], self.steps, -1))
        return self.head(h[0])


class _CausalSelfAttention(nn.Module):
    def __init__(self, d_model: int, heads: int, dropout: float):
        super().__init__()
        self.heads, self.dropout = heads, dropout
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.resid_dropout = nn.Dropout(dropout)

    def forward(self, x):
        n, t, d = x.shape
        q, k, v = self.qkv(x).view(n, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        p = self.dropout if self.training else 0.0
        y = F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=True)
        return self.resid_dropout(self.proj(y.transpose(1, 2).reshape(n, t, d)))


class _Block(nn.Module):
    def __init__(self, d_model: int, heads: int, dropout: float):
        super().__init__()
        self.ln1 = nn.LayerNorm(d_model)
        self.attn = _CausalSelfAttention(d_model, heads, dropout)
        self.ln2 = nn.LayerNorm(d_model)
        self.fc = nn.Linear(d_model, 4 * d_model)
        self.proj = nn.Linear(4 * d_model, d_model)
        self.drop = nn.Dropout(dropout)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.drop(self.proj(F.gelu(self.fc(self.ln2(x)))))


class CharLM(nn.Module):
    """tapegrad's char-lm preset (``tapegrad.models.CharLM``) as a PyTorch user writes it."""

    def __init__(
        self, vocab: int, context: int, d_model: int, layers: int, heads: int = 4, dropout=0.1
    ):
        super().__init__()
        self.tok = nn.Embedding(vocab, d_model)
        self.pos = nn.Embedding(context, d_model)
        self.drop = nn.Dropout(dropout)
        self.blocks = nn.Sequential(*(_Block(d_model, heads, dropout) for _ in range(layers)))
        self.ln_f = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab, bias=False)

    def forward(self, idx):
        x = self.drop(self.tok(idx) + self.pos(torch.arange(idx.shape[1])))
        return self.head(self.ln_f(self.blocks(x)))


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut = None
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride=stride, bias=False), nn.BatchNorm2d(cout)
            )

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + (x if self.shortcut is None else self.shortcut(x)))


def _resnet(weights: dict[str, np.ndarray]) -> nn.Module:
    """tapegrad's resnet preset, its widths and blocks read from the weights' names."""
    stem = weights["1.weight"].shape[0]
    blocks = sorted({int(k.split(".")[0]) for k in weights if ".conv1." in k})
    layers = [_Reshape(1, 28, 28), nn.Conv2d(1, stem, 3, padding=1, bias=False)]
    layers += [nn.BatchNorm2d(stem), nn.ReLU()]
    cin = stem
    for i in blocks:
        cout = weights[f"{i}.conv1.weight"].shape[0]
        stride = 2 if f"{i}.shortcut.0.weight" in weights and cout != cin else 1
        layers.append(BasicBlock(cin, cout, stride))
        cin = cout
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, 10))


def char_lm_shape(weights: dict[str, np.ndarray]) -> dict:
    """vocab, context, d_model and layers of char-lm weights (tapegrad's names)."""
    vocab, d_model = weights["tok.weight"].shape
    layers = len({k.split(".")[1] for k in weights if k.startswith("blocks.")})
    return dict(vocab=vocab, context=weights["pos.weight"].shape[0], d_model=d_model, layers=layers)


def build(preset: str, weights: dict[str, np.ndarray]) -> nn.Module:
    """The preset's architecture in PyTorch, shaped after the exported weights."""
    if preset == "seed-cnn":  # channels and hidden units from the weights (wider variants)
        channels, hidden = weights["1.weight"].shape[0], weights["5.weight"].shape[0]
        return nn.Sequential(
            _Reshape(1, 28, 28),
            nn.Conv2d(1, channels, 3, bias=False),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Flatten(),
            nn.Linear(channels * 13 * 13, hidden, bias=False),
            nn.ReLU(),
            nn.Linear(hidden, 10, bias=False),
        )
    if preset == "seed-rnn":
        return _SeedRNN()
    if preset in ("text-cnn", "text-cnn-learned"):
        vocab, dim = weights["0.weight"].shape
        return nn.Sequential(
            nn.Embedding(vocab, dim),
            _Permute(0, 2, 1),
            nn.Conv1d(dim, 8, 3),
            nn.ReLU(),
            nn.MaxPool1d(8),
            nn.Flatten(),
            nn.Linear(weights["6.weight"].shape[1], 1),
        )
    if preset == "char-lm":
        return CharLM(**char_lm_shape(weights))
    if preset == "resnet":
        return _resnet(weights)
    if preset == "mlp":
        hidden = weights["1.weight"].shape[0]
        return nn.Sequential(nn.Flatten(), nn.Linear(784, hidden), nn.ReLU(), nn.Linear(hidden, 10))
    raise ValueError(f"torch runner: no architecture for preset {preset!r}")


def load_tapegrad_weights(model: nn.Module, weights: dict[str, np.ndarray]) -> None:
    """Copy tapegrad's state dict in (names are the same; weights saved by tapegrad versions
    before the recurrent layers took PyTorch's ``_l0`` names load too)."""
    state, used = {}, set()
    for name in model.state_dict():
        source = name if name in weights or not name.endswith("_l0") else name[:-3]
        state[name] = torch.from_numpy(np.ascontiguousarray(weights[source]))
        used.add(source)
    extra = set(weights) - used
    if extra:
        raise ValueError(f"torch runner: tapegrad weights {sorted(extra)} have no place")
    model.load_state_dict(state, strict=True)


def make_optimizer(model: nn.Module, spec: dict) -> torch.optim.Optimizer:
    """``spec``'s optimiser over every parameter, with its momentum and weight decay."""
    params, lr, wd = model.parameters(), spec["lr"], spec.get("weight_decay", 0.0)
    name = spec["optimizer"]
    if name == "adam":
        return torch.optim.Adam(params, lr=lr, weight_decay=wd)
    if name == "adamw":
        return torch.optim.AdamW(params, lr=lr, weight_decay=wd)
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=spec.get("momentum", 0.0), weight_decay=wd)
    raise ValueError(f"torch runner: optimizer {name!r} not wired")


class TorchRunner:
    mode = "eager"

    def __init__(self, spec: dict, weights: dict[str, np.ndarray]):
        torch.set_num_threads(int(spec["threads"]))
        self.model = build(spec["preset"], weights)
        load_tapegrad_weights(self.model, weights)
        self.opt = make_optimizer(self.model, spec)
        self.binary = spec["task"] == "binary"
        self.language_model = spec["task"] == "language-model"
        self.model.train()
        self.notes = f"PyTorch eager, torch.optim.{type(self.opt).__name__}"

    def _loss(self, logits, y):
        if self.language_model:
            return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        if self.binary:
            return F.binary_cross_entropy_with_logits(logits.reshape(-1), y.to(logits.dtype))
        return F.cross_entropy(logits, y)

    def step(self, x: np.ndarray, y: np.ndarray) -> float:
        self.opt.zero_grad()
        loss = self._loss(self.model(torch.from_numpy(x)), torch.from_numpy(y))
        loss.backward()
        self.opt.step()
        return loss.item()

    def evaluate(self, x: np.ndarray, y: np.ndarray) -> tuple[float, float | None]:
        self.model.eval()
        total, correct = 0.0, 0
        with torch.inference_mode():
            for lo in range(0, len(x), 1000):
                xb, yb = torch.from_numpy(x[lo : lo + 1000]), torch.from_numpy(y[lo : lo + 1000])
                logits = self.model(xb)
                total += self._loss(logits, yb).item() * len(yb)
                if self.language_model:
                    continue
                if self.binary:
                    correct += int(((logits.reshape(-1) > 0) == (yb > 0)).sum())
                else:
                    correct += int((logits.argmax(1) == yb).sum())
        self.model.train()
        return total / len(x), (None if self.language_model else correct / len(x))

    def allocated(self, x: np.ndarray, y: np.ndarray) -> tuple[int | None, str]:
        """Working memory of one step, from torch.profiler's tensor timeline: the high-water
        mark of bytes allocated during the step minus those of them freed (tracemalloc's
        semantics: freeing tensors that existed before the step does not count)."""
        from torch.profiler import ProfilerActivity, profile

        try:
            with profile(
                activities=[ProfilerActivity.CPU],
                profile_memory=True,
                record_shapes=True,
                with_stack=True,
            ) as prof:
                self.step(x, y)
            timeline = prof._memory_profile().timeline  # (time, action, (key, version), bytes)
        except Exception as e:  # a private API: say so rather than guess
            return None, f"n/a: torch.profiler memory timeline unavailable ({e})"
        live = peak = 0
        created = set()
        for _, action, (key, _version), nbytes in sorted(timeline, key=lambda r: r[0]):
            if action.name == "CREATE":
                created.add(key)
                live += nbytes
                peak = max(peak, live)
            elif action.name == "DESTROY" and key in created:
                live -= nbytes
        return (
            peak,
            "torch.profiler tensor timeline: high-water mark of bytes allocated in the step",
        )

    def versions(self) -> dict:
        return {"torch": torch.__version__}
