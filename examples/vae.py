"""A variational autoencoder on MNIST (Kingma and Welling): PyTorch's VAE example, written
with tapegrad.

    python examples/vae.py                            # 1 epoch on 10,000 images, compiled
    python examples/vae.py --epochs 10 --train-size 60000 --test-size 10000

The encoder maps an image to the mean and log-variance of a 20-dimensional Gaussian; a sample
drawn with the reparameterisation trick (``tg.randn_like``, fresh on every compiled call) is
decoded back to pixel probabilities. The loss is the reconstruction's binary cross-entropy plus
the KL divergence from the unit Gaussian, summed over the batch; Adam 1e-3.
"""

from __future__ import annotations

import sys

import numpy as np
from _common import mnist_arrays, parser, say

import tapegrad as tg
from tapegrad import nn, optim
from tapegrad.data import DataLoader, TensorDataset
from tapegrad.nn import functional as F


class VAE(nn.Module):
    def __init__(self, rng: np.random.Generator):
        super().__init__()
        self.fc1 = nn.Linear(784, 400)
        self.fc21 = nn.Linear(400, 20)
        self.fc22 = nn.Linear(400, 20)
        self.fc3 = nn.Linear(20, 400)
        self.fc4 = nn.Linear(400, 784)
        self.rng = rng  # the noise of the reparameterisation

    def encode(self, x):
        h1 = F.relu(self.fc1(x))
        return self.fc21(h1), self.fc22(h1)

    def reparameterize(self, mu, logvar):
        std = tg.exp(logvar * 0.5)
        eps = tg.randn_like(std, rng=self.rng)
        return mu + eps * std

    def decode(self, z):
        return F.sigmoid(self.fc4(F.relu(self.fc3(z))))

    def forward(self, x):
        mu, logvar = self.encode(x.reshape((-1, 784)))
        z = self.reparameterize(mu, logvar)
        return self.decode(z), mu, logvar


def loss_function(recon_x, x, mu, logvar):
    """Reconstruction + KL divergence, summed over all elements and the batch."""
    bce = F.binary_cross_entropy(recon_x, x.reshape((-1, 784)), reduction="sum")
    kld = (1 + logvar - mu * mu - tg.exp(logvar)).sum() * -0.5
    return bce + kld


def main(argv: list[str] | None = None) -> dict:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--train-size", type=int, default=10000)
    p.add_argument("--test-size", type=int, default=2000)
    p.add_argument("--data-dir", default=None)
    args = p.parse_args(argv)

    tg.manual_seed(args.seed)
    x_train, _, x_test, _ = mnist_arrays(args.data_dir, args.train_size, args.test_size)
    train_loader = DataLoader(
        TensorDataset(x_train), args.batch_size, shuffle=True, generator=args.seed
    )
    test_loader = DataLoader(TensorDataset(x_test), args.batch_size)
    model = VAE(np.random.default_rng(args.seed))
    optimizer = optim.Adam(model.parameters(), lr=1e-3)

    def train_step(x):
        optimizer.zero_grad()
        recon, mu, logvar = model(x)
        loss = loss_function(recon, x, mu, logvar)
        loss.backward()
        optimizer.step()
        return loss

    def test_step(x):
        recon, mu, logvar = model(x)
        return loss_function(recon, x, mu, logvar)

    if not args.eager:
        train_step, test_step = tg.compile(train_step), tg.compile(test_step)
    history = []
    for epoch in range(1, args.epochs + 1):
        model.train()
        train_loss = 0.0
        for i, (x,) in enumerate(train_loader):
            loss = train_step(x)
            train_loss += loss.item()
            if i % 20 == 0:
                say(
                    args.quiet,
                    f"epoch {epoch} [{i * len(x)}/{len(x_train)}]  loss {loss.item() / len(x):.4f}",
                )
        model.eval()
        with tg.no_grad():
            test_loss = sum(test_step(x).item() for (x,) in test_loader)
        history.append(
            {
                "epoch": epoch,
                "train_loss": train_loss / len(x_train),
                "test_loss": test_loss / len(x_test),
            }
        )
        say(
            args.quiet,
            f"epoch {epoch}: average train loss {train_loss / len(x_train):.4f}, "
            f"test loss {test_loss / len(x_test):.4f}",
        )
    return {"history": history, "model": model}


if __name__ == "__main__":
    main(sys.argv[1:])
