"""The bench's reference: a plain PyTorch training loop, written the way a PyTorch user writes it.

    python plain_torch.py SPEC.json

``tapegrad bench`` runs this file directly (``python path/to/plain_torch.py``, so nothing of
tapegrad is imported into the process) beside its PyTorch worker and fails when the two disagree
by more than 10% (``tapegrad.bench.selfcheck``). SPEC.json is the file the bench writes: the
preset, the initial weights (safetensors) and the data arrays (.npy) it exported, the optimiser,
learning rate, batch size, epochs (or steps), threads and seed. The loop is the textbook one:
the whole training set as a tensor, batches gathered from it by index, ``torch.optim``, the
loss read back with ``.item()``, each epoch timed with ``perf_counter`` (and its CPU time taken
with ``process_time``). Its batch order is the one every worker of the bench uses (a NumPy
permutation per epoch), so its first loss can be checked against the others'.
"""

import json
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F
from safetensors.torch import load_file
from torch import nn


class SeedCNN(nn.Module):
    def __init__(self, weights):
        super().__init__()
        channels, hidden = weights["1.weight"].shape[0], weights["5.weight"].shape[0]
        self.conv = nn.Conv2d(1, channels, 3, bias=False)
        self.fc1 = nn.Linear(channels * 13 * 13, hidden, bias=False)
        self.fc2 = nn.Linear(hidden, 10, bias=False)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv(x.unsqueeze(1))), 2)
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


class SeedRNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = nn.RNN(196, 64, batch_first=True)
        self.head = nn.Linear(64, 10)

    def forward(self, x):
        _, h = self.rnn(x.reshape(len(x), 4, 196))
        return self.head(h[0])


class TextCNN(nn.Module):
    def __init__(self, weights):
        super().__init__()
        self.embed = nn.Embedding(*weights["0.weight"].shape)
        self.conv = nn.Conv1d(self.embed.embedding_dim, 8, 3)
        self.fc = nn.Linear(weights["6.weight"].shape[1], 1)

    def forward(self, x):
        x = F.max_pool1d(F.relu(self.conv(self.embed(x).transpose(1, 2))), 8)
        return self.fc(x.flatten(1)).squeeze(1)


class MLP(nn.Module):
    def __init__(self, weights):
        super().__init__()
        self.fc1 = nn.Linear(784, weights["1.weight"].shape[0])
        self.fc2 = nn.Linear(weights["1.weight"].shape[0], 10)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


class Block(nn.Module):
    def __init__(self, d, heads, dropout):
        super().__init__()
        self.heads, self.dropout = heads, dropout
        # in the order of tapegrad's parameters (see CharLM.names)
        self.ln1, self.qkv, self.attn_proj = nn.LayerNorm(d), nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.ln2, self.fc, self.proj = nn.LayerNorm(d), nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
        self.drop1, self.drop2 = nn.Dropout(dropout), nn.Dropout(dropout)

    def forward(self, x):
        n, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(n, t, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        p = self.dropout if self.training else 0.0
        y = F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=True)
        x = x + self.drop1(self.attn_proj(y.transpose(1, 2).reshape(n, t, d)))
        return x + self.drop2(self.proj(F.gelu(self.fc(self.ln2(x)))))


class CharLM(nn.Module):
    def __init__(self, weights):
        super().__init__()
        vocab, d = weights["tok.weight"].shape
        self.layers = len({k.split(".")[1] for k in weights if k.startswith("blocks.")})
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(weights["pos.weight"].shape[0], d)
        self.drop = nn.Dropout(0.1)
        self.blocks = nn.Sequential(*(Block(d, 4, 0.1) for _ in range(self.layers)))
        self.ln_f = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, idx):
        x = self.drop(self.tok(idx) + self.pos(torch.arange(idx.shape[1])))
        return self.head(self.ln_f(self.blocks(x)))

    def names(self, weights):
        out = ["tok.weight", "pos.weight"]
        for i in range(self.layers):
            b = f"blocks.{i}"
            for layer in ("ln1", "attn.qkv", "attn.proj", "ln2", "fc", "proj"):
                out += [f"{b}.{layer}.weight", f"{b}.{layer}.bias"]
        return out + ["ln_f.weight", "ln_f.bias", "head.weight"]


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut = nn.Sequential()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout)
            )

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(out)) + self.shortcut(x))


class ResNet(nn.Module):
    def __init__(self, weights):
        super().__init__()
        self.blocks = sorted({int(k.split(".")[0]) for k in weights if ".conv1." in k})
        widths = [weights[f"{i}.conv1.weight"].shape[0] for i in self.blocks]
        self.conv = nn.Conv2d(1, widths[0], 3, 1, 1, bias=False)
        self.bn = nn.BatchNorm2d(widths[0])
        cins = [widths[0], *widths[:-1]]
        self.layers = nn.Sequential(
            *(BasicBlock(a, b, 1 if a == b else 2) for a, b in zip(cins, widths, strict=True))
        )
        self.fc = nn.Linear(widths[-1], 10)

    def forward(self, x):
        x = F.relu(self.bn(self.conv(x.reshape(len(x), 1, 28, 28))))
        return self.fc(F.adaptive_avg_pool2d(self.layers(x), 1).flatten(1))

    def names(self, weights):  # tapegrad's Sequential numbers its layers: 1 conv, 2 bn, 4.. blocks
        out = ["1.weight", "2.weight", "2.bias"]
        for i in self.blocks:
            out += [f"{i}.conv1.weight", f"{i}.bn1.weight", f"{i}.bn1.bias"]
            out += [f"{i}.conv2.weight", f"{i}.bn2.weight", f"{i}.bn2.bias"]
            if f"{i}.shortcut.0.weight" in weights:
                out += [f"{i}.shortcut.0.weight", f"{i}.shortcut.1.weight", f"{i}.shortcut.1.bias"]
        fc = max(int(k.split(".")[0]) for k in weights if k[0].isdigit())
        return out + [f"{fc}.weight", f"{fc}.bias"]


def build(preset: str, weights: dict):
    """The model, and where each of its parameters is in the exported weights."""
    if preset == "seed-cnn":
        return SeedCNN(weights), ["1.weight", "5.weight", "7.weight"]
    if preset == "seed-rnn":
        names = ["rnn.weight_ih_l0", "rnn.weight_hh_l0", "rnn.bias_ih_l0", "rnn.bias_hh_l0"]
        return SeedRNN(), [*names, "head.weight", "head.bias"]
    if preset in ("text-cnn", "text-cnn-learned"):
        return TextCNN(weights), ["0.weight", "2.weight", "2.bias", "6.weight", "6.bias"]
    if preset == "mlp":
        return MLP(weights), ["1.weight", "1.bias", "3.weight", "3.bias"]
    if preset in ("char-lm", "resnet"):
        model = CharLM(weights) if preset == "char-lm" else ResNet(weights)
        return model, model.names(weights)
    sys.exit(f"plain_torch.py: no model for preset {preset!r}")


def make_optimizer(spec: dict, model):
    lr, wd = spec["lr"], spec.get("weight_decay", 0.0)
    if spec["optimizer"] == "adam":
        return torch.optim.Adam(model.parameters(), lr=lr, weight_decay=wd)
    if spec["optimizer"] == "adamw":
        return torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=wd)
    return torch.optim.SGD(
        model.parameters(), lr=lr, momentum=spec.get("momentum", 0.0), weight_decay=wd
    )


def make_loss(task: str):
    if task == "binary":
        return nn.BCEWithLogitsLoss()
    if task == "language-model":

        def loss_fn(logits, y):
            return F.cross_entropy(logits.flatten(0, 1), y.flatten())

        return loss_fn
    return nn.CrossEntropyLoss()


def train(spec: dict) -> dict:
    """Train as ``spec`` says; the timings and losses the self-check compares."""
    torch.set_num_threads(spec["threads"])
    weights = load_file(spec["weights"])
    model, names = build(spec["preset"], weights)
    with torch.no_grad():
        for p, name in zip(model.parameters(), names, strict=True):
            p.copy_(weights[name])
    opt, loss_fn = make_optimizer(spec, model), make_loss(spec["task"])

    X = torch.from_numpy(np.load(spec["data"]["train_x"], allow_pickle=False))
    Y = torch.from_numpy(np.load(spec["data"]["train_y"], allow_pickle=False))
    if spec["task"] == "binary":
        Y = Y.float()
    batch_size, steps = spec["batch_size"], spec.get("steps")
    batches_per_epoch = -(-len(X) // batch_size)
    epochs = -(-steps // batches_per_epoch) if steps else spec["epochs"]
    reference_loss = None
    if spec.get("stochastic"):  # dropout: the first batch's loss without it, for the check
        model.eval()
        with torch.no_grad():
            idx = torch.from_numpy(np.random.default_rng([spec["seed"], 1]).permutation(len(X)))
            reference_loss = loss_fn(model(X[idx[:batch_size]]), Y[idx[:batch_size]]).item()
        model.train()

    epoch_seconds, epoch_cpu_seconds, step_seconds, losses, epoch_losses = [], [], [], [], []
    for epoch in range(1, epochs + 1):
        order = torch.from_numpy(np.random.default_rng([spec["seed"], epoch]).permutation(len(X)))
        first_of_epoch, t_epoch, cpu_epoch = len(losses), time.perf_counter(), time.process_time()
        for i in range(0, len(X), batch_size):
            t_step = time.perf_counter()
            idx = order[i : i + batch_size]
            opt.zero_grad()
            loss = loss_fn(model(X[idx]), Y[idx])
            loss.backward()
            opt.step()
            losses.append(loss.item())
            step_seconds.append(time.perf_counter() - t_step)
            if len(losses) == steps:
                break
        epoch_seconds.append(time.perf_counter() - t_epoch)
        epoch_cpu_seconds.append(time.process_time() - cpu_epoch)
        epoch_losses.append(float(np.mean(losses[first_of_epoch:])))
    return {
        "framework": "torch-plain",
        "epoch_seconds": epoch_seconds,
        "epoch_cpu_seconds": epoch_cpu_seconds,
        "step_seconds": step_seconds,
        "first_loss": losses[0],
        "reference_loss": reference_loss,
        "final_loss": epoch_losses[-1],
        "cpu_seconds": sum(epoch_cpu_seconds),
        "torch": torch.__version__,
    }


def main(argv: list[str]) -> None:
    with open(argv[1]) as f:
        spec = json.load(f)
    print(json.dumps(train(spec)))


if __name__ == "__main__":
    main(sys.argv)
