"""A small ResNet with BatchNorm (basic blocks, a strided shortcut with a 1x1 convolution)
trained with SGD, momentum, weight decay and a cosine learning-rate schedule on synthetic
images; evaluated in eval mode (BatchNorm's running statistics)."""

import argparse

import numpy as np
import tapegrad as torch
import tapegrad.nn as nn
import tapegrad.nn.functional as F
import tapegrad.optim as optim
from tapegrad.utils.data import DataLoader, TensorDataset


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, in_planes, planes, stride=1):
        super().__init__()
        self.conv1 = nn.Conv2d(in_planes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=1, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.shortcut = nn.Sequential()
        if stride != 1 or in_planes != planes:
            self.shortcut = nn.Sequential(
                nn.Conv2d(in_planes, planes, 1, stride=stride, bias=False), nn.BatchNorm2d(planes)
            )

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class ResNet(nn.Module):
    def __init__(self, num_blocks=(1, 1), num_classes=4, width=8):
        super().__init__()
        self.conv1 = nn.Conv2d(3, width, 3, stride=1, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        layers, in_planes = [], width
        for i, n in enumerate(num_blocks):
            planes = width * 2**i
            for j in range(n):
                layers.append(BasicBlock(in_planes, planes, stride=2 if i > 0 and j == 0 else 1))
                in_planes = planes
        self.layers = nn.Sequential(*layers)
        self.linear = nn.Linear(in_planes, num_classes)

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.layers(out)
        out = F.adaptive_avg_pool2d(out, (1, 1))
        return self.linear(torch.flatten(out, 1))


def synthetic_images(n, seed):
    """Images whose class is the quadrant holding a bright blob."""
    rng = np.random.default_rng(seed)
    x = rng.normal(0.0, 0.5, (n, 3, 8, 8))
    y = rng.integers(0, 4, n)
    for i, c in enumerate(y):
        r, s = 4 * (c // 2), 4 * (c % 2)
        x[i, :, r : r + 4, s : s + 4] += 1.0
    return torch.from_numpy(x).to(torch.get_default_dtype()), torch.from_numpy(y)


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
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--train-size", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--double", action="store_true", help="compute in float64")
    parser.add_argument("--save-init")
    parser.add_argument("--load-init")
    args = parser.parse_args(argv)
    if args.double:
        torch.set_default_dtype(torch.float64)
    torch.manual_seed(0)

    x, y = synthetic_images(args.train_size, seed=1)
    loader = DataLoader(TensorDataset(x, y), batch_size=args.batch_size, shuffle=False)
    model = ResNet()
    exchange_weights(model, args)
    optimizer = optim.SGD(
        model.parameters(), lr=args.lr, momentum=0.9, weight_decay=5e-4, nesterov=True
    )
    scheduler = optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=args.epochs)
    criterion = nn.CrossEntropyLoss()
    for epoch in range(args.epochs):
        model.train()
        for batch_idx, (inputs, targets) in enumerate(loader):
            optimizer.zero_grad()
            loss = criterion(model(inputs), targets)
            loss.backward()
            optimizer.step()
            print(f"epoch {epoch} batch {batch_idx} loss {loss.item():.12g}")
        scheduler.step()
        model.eval()
        correct, total_loss = 0, 0.0
        with torch.no_grad():
            for inputs, targets in loader:
                outputs = model(inputs)
                total_loss += criterion(outputs, targets).item() * targets.size(0)
                _, predicted = outputs.max(1)
                correct += predicted.eq(targets).sum().item()
        print(
            f"epoch {epoch} eval loss {total_loss / len(loader.dataset):.12g} "
            f"accuracy {correct}/{len(loader.dataset)} lr {scheduler.get_last_lr()[0]:.12g}"
        )


if __name__ == "__main__":
    main()
