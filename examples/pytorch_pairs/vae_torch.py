"""PyTorch's variational autoencoder example, smaller: an MLP encoder to a Gaussian latent,
the reparameterisation trick, a Bernoulli decoder and the ELBO loss (binary cross-entropy
summed plus the KL divergence), trained with Adam on the first images of MNIST
(``$TAPEGRAD_DATA/mnist`` or ``--data-dir``). The noise of the reparameterisation comes from
a seeded NumPy generator, so every run draws the same numbers."""

import argparse
import gzip
import os

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn, optim
from torch.utils.data import DataLoader, TensorDataset


class VAE(nn.Module):
    def __init__(self, hidden=64, latent=8, seed=0):
        super().__init__()
        self.fc1 = nn.Linear(784, hidden)
        self.fc21 = nn.Linear(hidden, latent)
        self.fc22 = nn.Linear(hidden, latent)
        self.fc3 = nn.Linear(latent, hidden)
        self.fc4 = nn.Linear(hidden, 784)
        self.rng = np.random.default_rng(seed)

    def encode(self, x):
        h1 = F.relu(self.fc1(x))
        return self.fc21(h1), self.fc22(h1)

    def reparameterize(self, mu, logvar):
        std = torch.exp(0.5 * logvar)
        eps = torch.from_numpy(self.rng.standard_normal(tuple(std.shape))).to(std.dtype)
        return mu + eps * std

    def decode(self, z):
        h3 = F.relu(self.fc3(z))
        return torch.sigmoid(self.fc4(h3))

    def forward(self, x):
        mu, logvar = self.encode(x.view(-1, 784))
        z = self.reparameterize(mu, logvar)
        return self.decode(z), mu, logvar


def loss_function(recon_x, x, mu, logvar):
    bce = F.binary_cross_entropy(recon_x, x.view(-1, 784), reduction="sum")
    kld = -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp())
    return bce + kld


def read_images(data_dir, split, n):
    prefix = "train" if split == "train" else "t10k"
    with gzip.open(os.path.join(data_dir, f"{prefix}-images-idx3-ubyte.gz")) as f:
        images = np.frombuffer(f.read(16 + n * 784)[16:], np.uint8).reshape(n, 1, 28, 28)
    return torch.from_numpy(images / 255.0).to(torch.get_default_dtype())


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
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--train-size", type=int, default=2048)
    parser.add_argument("--test-size", type=int, default=512)
    parser.add_argument("--log-interval", type=int, default=4)
    parser.add_argument("--double", action="store_true", help="compute in float64")
    data_root = os.environ.get("TAPEGRAD_DATA", "data")
    parser.add_argument("--data-dir", default=os.path.join(data_root, "mnist"))
    parser.add_argument("--save-init")
    parser.add_argument("--load-init")
    args = parser.parse_args(argv)
    if args.double:
        torch.set_default_dtype(torch.float64)
    torch.manual_seed(1)

    train_loader = DataLoader(
        TensorDataset(read_images(args.data_dir, "train", args.train_size)),
        batch_size=args.batch_size,
    )
    test_loader = DataLoader(
        TensorDataset(read_images(args.data_dir, "test", args.test_size)),
        batch_size=args.batch_size,
    )
    model = VAE()
    exchange_weights(model, args)
    optimizer = optim.Adam(model.parameters(), lr=1e-3)
    for epoch in range(1, args.epochs + 1):
        model.train()
        train_loss = 0
        for batch_idx, (data,) in enumerate(train_loader):
            optimizer.zero_grad()
            recon_batch, mu, logvar = model(data)
            loss = loss_function(recon_batch, data, mu, logvar)
            loss.backward()
            train_loss += loss.item()
            optimizer.step()
            if batch_idx % args.log_interval == 0:
                print(
                    f"Train Epoch: {epoch} batch {batch_idx} Loss: {loss.item() / len(data):.12g}"
                )
        print(f"Epoch: {epoch} Average loss: {train_loss / len(train_loader.dataset):.12g}")
        model.eval()
        test_loss = 0
        with torch.no_grad():
            for (data,) in test_loader:
                recon_batch, mu, logvar = model(data)
                test_loss += loss_function(recon_batch, data, mu, logvar).item()
        print(f"Test set loss: {test_loss / len(test_loader.dataset):.12g}")


if __name__ == "__main__":
    main()
