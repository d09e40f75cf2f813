"""PyTorch's classic MNIST convolutional network, narrower: two convolutions, max-pooling,
Dropout, Adadelta and a StepLR schedule, trained on the first images of MNIST's training set
(``$TAPEGRAD_DATA/mnist`` or ``--data-dir``: the four ``*-ubyte.gz`` files)."""

import argparse
import gzip
import os

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.optim.lr_scheduler import StepLR
from torch.utils.data import DataLoader, TensorDataset


class Net(nn.Module):
    def __init__(self, dropout1=0.25, dropout2=0.5):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 3, 1)
        self.conv2 = nn.Conv2d(8, 16, 3, 1)
        self.dropout1 = nn.Dropout(dropout1)
        self.dropout2 = nn.Dropout(dropout2)
        self.fc1 = nn.Linear(2304, 32)
        self.fc2 = nn.Linear(32, 10)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.relu(self.conv2(x))
        x = F.max_pool2d(x, 2)
        x = self.dropout1(x)
        x = torch.flatten(x, 1)
        x = F.relu(self.fc1(x))
        x = self.dropout2(x)
        return F.log_softmax(self.fc2(x), dim=1)


def read_mnist(data_dir, split, n):
    """The first ``n`` images (normalised, ``(n, 1, 28, 28)``) and labels of a split."""
    prefix = "train" if split == "train" else "t10k"
    with gzip.open(os.path.join(data_dir, f"{prefix}-images-idx3-ubyte.gz")) as f:
        images = np.frombuffer(f.read(16 + n * 784)[16:], np.uint8).reshape(n, 1, 28, 28)
    with gzip.open(os.path.join(data_dir, f"{prefix}-labels-idx1-ubyte.gz")) as f:
        labels = np.frombuffer(f.read(8 + n)[8:], np.uint8)
    x = torch.from_numpy(images.astype(np.float32) / 255.0)
    return (x - 0.1307) / 0.3081, torch.from_numpy(labels.astype(np.int64))


def train(args, model, train_loader, optimizer, epoch):
    model.train()
    for batch_idx, (data, target) in enumerate(train_loader):
        optimizer.zero_grad()
        output = model(data)
        loss = F.nll_loss(output, target)
        loss.backward()
        optimizer.step()
        if batch_idx % args.log_interval == 0:
            print(
                f"Train Epoch: {epoch} [{batch_idx * len(data)}/{len(train_loader.dataset)}]"
                f"\tLoss: {loss.item():.9g}"
            )


def test(model, test_loader):
    model.eval()
    test_loss, correct = 0, 0
    with torch.no_grad():
        for data, target in test_loader:
            output = model(data)
            test_loss += F.nll_loss(output, target, reduction="sum").item()
            pred = output.argmax(dim=1, keepdim=True)
            correct += pred.eq(target.view_as(pred)).sum().item()
    test_loss /= len(test_loader.dataset)
    print(
        f"Test set: Average loss: {test_loss:.9g}, Accuracy: {correct}/{len(test_loader.dataset)}"
    )


def exchange_weights(model, args):
    """--save-init writes the initial weights to an .npz file, --load-init reads them: two
    runs (two frameworks) then start from the same weights."""
    if args.load_init:
        state = np.load(args.load_init)
        model.load_state_dict({k: torch.from_numpy(state[k]) for k in state.files})
    if args.save_init:
        np.savez(args.save_init, **{k: np.asarray(v) for k, v in model.state_dict().items()})


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--test-batch-size", type=int, default=500)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--lr", type=float, default=1.0)
    parser.add_argument("--gamma", type=float, default=0.7)
    parser.add_argument("--train-size", type=int, default=2000)
    parser.add_argument("--test-size", type=int, default=500)
    parser.add_argument("--dropout", type=float, nargs=2, default=(0.25, 0.5))
    parser.add_argument("--log-interval", type=int, default=10)
    parser.add_argument("--seed", type=int, default=1)
    data_root = os.environ.get("TAPEGRAD_DATA", "data")
    parser.add_argument("--data-dir", default=os.path.join(data_root, "mnist"))
    parser.add_argument("--save-init")
    parser.add_argument("--load-init")
    args = parser.parse_args(argv)
    torch.manual_seed(args.seed)

    train_set = TensorDataset(*read_mnist(args.data_dir, "train", args.train_size))
    test_set = TensorDataset(*read_mnist(args.data_dir, "test", args.test_size))
    train_loader = DataLoader(train_set, batch_size=args.batch_size, shuffle=False)
    test_loader = DataLoader(test_set, batch_size=args.test_batch_size)
    model = Net(*args.dropout)
    exchange_weights(model, args)
    optimizer = optim.Adadelta(model.parameters(), lr=args.lr)
    scheduler = StepLR(optimizer, step_size=1, gamma=args.gamma)
    for epoch in range(1, args.epochs + 1):
        train(args, model, train_loader, optimizer, epoch)
        test(model, test_loader)
        scheduler.step()
        print(f"lr {scheduler.get_last_lr()[0]:.9g}")


if __name__ == "__main__":
    main()
