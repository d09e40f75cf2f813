"""A convolutional network on MNIST with Dropout, Adadelta and a StepLR schedule: PyTorch's
classic MNIST example, written with tapegrad.

    python examples/mnist_cnn.py                      # 1 epoch on 10,000 images, compiled
    python examples/mnist_cnn.py --epochs 14 --train-size 60000 --test-size 10000

MNIST is read from ``$TAPEGRAD_DATA/mnist`` (or ``--data-dir``). Each training step (forward,
loss, backward, Adadelta update) is compiled with ``tg.compile`` unless ``--eager``; the
learning rate decays by ``--gamma`` after every epoch.
"""

from __future__ import annotations

import sys

import numpy as np
from _common import mnist_arrays, parser, say

import tapegrad as tg
from tapegrad import nn, optim
from tapegrad.data import DataLoader, TensorDataset
from tapegrad.nn import functional as F


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, 1)
        self.conv2 = nn.Conv2d(32, 64, 3, 1)
        self.dropout1 = nn.Dropout(0.25)
        self.dropout2 = nn.Dropout(0.5)
        self.fc1 = nn.Linear(9216, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.relu(self.conv2(x))
        x = F.max_pool2d(x, 2)
        x = self.dropout1(x)
        x = tg.flatten(x, 1)
        x = F.relu(self.fc1(x))
        x = self.dropout2(x)
        return F.log_softmax(self.fc2(x), axis=1)


def main(argv: list[str] | None = None) -> dict:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--test-batch-size", type=int, default=1000)
    p.add_argument("--lr", type=float, default=1.0, help="Adadelta's learning rate")
    p.add_argument("--gamma", type=float, default=0.7, help="learning-rate decay per epoch")
    p.add_argument("--train-size", type=int, default=10000)
    p.add_argument("--test-size", type=int, default=2000)
    p.add_argument("--data-dir", default=None)
    args = p.parse_args(argv)

    tg.manual_seed(args.seed)
    x_train, y_train, x_test, y_test = mnist_arrays(args.data_dir, args.train_size, args.test_size)
    mean, std = np.float32(0.1307), np.float32(0.3081)  # MNIST's pixel statistics
    train = TensorDataset((x_train[:, None] - mean) / std, y_train)
    test = TensorDataset((x_test[:, None] - mean) / std, y_test)
    train_loader = DataLoader(train, args.batch_size, shuffle=True, generator=args.seed)
    test_loader = DataLoader(test, args.test_batch_size)

    model = Net()
    optimizer = optim.Adadelta(model.parameters(), lr=args.lr)
    scheduler = optim.StepLR(optimizer, step_size=1, gamma=args.gamma)

    def train_step(x, y):
        optimizer.zero_grad()
        loss = F.nll_loss(model(x), y)
        loss.backward()
        optimizer.step()
        return loss

    def test_step(x, y):
        out = model(x)
        return F.nll_loss(out, y, reduction="sum"), out

    if not args.eager:
        train_step, test_step = tg.compile(train_step), tg.compile(test_step)
    history = []
    for epoch in range(1, args.epochs + 1):
        model.train()
        for i, (x, y) in enumerate(train_loader):
            loss = train_step(x, y)
            if i % 50 == 0:
                say(
                    args.quiet, f"epoch {epoch} [{i * len(x)}/{len(train)}]  loss {loss.item():.4f}"
                )
        model.eval()
        total, correct = 0.0, 0
        for x, y in test_loader:
            loss, out = test_step(x, y)
            total += loss.item()
            correct += int((out.data.argmax(axis=1) == y).sum())
        history.append(
            {
                "epoch": epoch,
                "test_loss": total / len(test),
                "test_accuracy": correct / len(test),
                "lr": optimizer.param_groups[0]["lr"],
            }
        )
        say(
            args.quiet,
            f"epoch {epoch}: test loss {total / len(test):.4f}, "
            f"accuracy {correct}/{len(test)} ({100 * correct / len(test):.1f}%)",
        )
        scheduler.step()
    return {"history": history, "model": model}


if __name__ == "__main__":
    main(sys.argv[1:])
