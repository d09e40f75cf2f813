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

spec = json.load(open(sys.argv[1]))
torch.set_num_threads(spec["threads"])
weights = load_file(spec["weights"])


class SeedCNN(nn.Module):
    def __init__(self):
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
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(*weights["0.weight"].shape)
        self.conv = nn.Conv1d(self.embed.embedding_dim, 8, 3)
        self.fc = nn.Linear(weights["6.weight"].shape[1], 1)

    def forward(self, x):
        x = F.max_pool1d(F.relu(self.conv(self.embed(x).transpose(1, 2))), 8)
        return self.fc(x.flatten(1)).squeeze(1)


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(784, weights["1.weight"].shape[0])
        self.fc2 = nn.Linear(weights["1.weight"].shape[0], 10)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


# the model, and where each of its parameters is in the exported weights
preset = spec["preset"]
if preset == "seed-cnn":
    model, names = SeedCNN(), ["1.weight", "5.weight", "7.weight"]
elif preset == "seed-rnn":
    model = SeedRNN()
    names = ["rnn.weight_ih_l0", "rnn.weight_hh_l0", "rnn.bias_ih_l0", "rnn.bias_hh_l0"]
    names += ["head.weight", "head.bias"]
elif preset in ("text-cnn", "text-cnn-learned"):
    model = TextCNN()
    names = ["0.weight", "2.weight", "2.bias", "6.weight", "6.bias"]
elif preset == "mlp":
    model, names = MLP(), ["1.weight", "1.bias", "3.weight", "3.bias"]
else:
    sys.exit(f"plain_torch.py: no model for preset {preset!r}")
with torch.no_grad():
    for p, name in zip(model.parameters(), names, strict=True):
        p.copy_(weights[name])

if spec["optimizer"] == "adam":
    opt = torch.optim.Adam(model.parameters(), lr=spec["lr"])
else:
    opt = torch.optim.SGD(model.parameters(), lr=spec["lr"])
if spec["task"] == "binary":
    loss_fn = nn.BCEWithLogitsLoss()
else:
    loss_fn = nn.CrossEntropyLoss()

X = torch.from_numpy(np.load(spec["data"]["train_x"], allow_pickle=False))
Y = torch.from_numpy(np.load(spec["data"]["train_y"], allow_pickle=False))
if spec["task"] == "binary":
    Y = Y.float()
batch_size, steps = spec["batch_size"], spec.get("steps")
batches_per_epoch = -(-len(X) // batch_size)
epochs = -(-steps // batches_per_epoch) if steps else spec["epochs"]

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

print(
    json.dumps(
        {
            "framework": "torch-plain",
            "epoch_seconds": epoch_seconds,
            "epoch_cpu_seconds": epoch_cpu_seconds,
            "step_seconds": step_seconds,
            "first_loss": losses[0],
            "final_loss": epoch_losses[-1],
            "cpu_seconds": sum(epoch_cpu_seconds),
            "torch": torch.__version__,
        }
    )
)
