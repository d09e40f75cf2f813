"""A WGAN-GP on a 2-D mixture of Gaussians: a critic trained with the gradient penalty (a
second-order gradient: the penalty's gradient goes through the critic's input gradient),
Adam with betas (0.5, 0.9), five critic steps per generator step. Noise and data come from a
seeded NumPy generator, so every run draws the same numbers."""

import argparse

import numpy as np
import tapegrad as torch
import tapegrad.nn as nn
from tapegrad import autograd


def generator(latent_dim, hidden):
    return nn.Sequential(
        nn.Linear(latent_dim, hidden),
        nn.ReLU(),
        nn.Linear(hidden, hidden),
        nn.ReLU(),
        nn.Linear(hidden, 2),
    )


def critic(hidden):
    return nn.Sequential(
        nn.Linear(2, hidden),
        nn.LeakyReLU(0.2),
        nn.Linear(hidden, hidden),
        nn.LeakyReLU(0.2),
        nn.Linear(hidden, 1),
    )


def real_batch(rng, batch_size):
    centers = np.array([[1.0, 0.0], [-1.0, 0.0], [0.0, 1.0], [0.0, -1.0]])
    points = centers[rng.integers(0, 4, batch_size)] + 0.05 * rng.standard_normal((batch_size, 2))
    return torch.from_numpy(points).to(torch.get_default_dtype())


def gradient_penalty(netD, real, fake, alpha):
    interpolates = (alpha * real + (1 - alpha) * fake).requires_grad_(True)
    scores = netD(interpolates)
    gradients = autograd.grad(
        outputs=scores,
        inputs=interpolates,
        grad_outputs=torch.ones_like(scores),
        create_graph=True,
        retain_graph=True,
    )[0]
    return ((gradients.norm(2, dim=1) - 1) ** 2).mean()


def exchange_weights(models, args):
    """--save-init writes the initial weights to an .npz file, --load-init reads them: two
    runs (two frameworks) then start from the same weights."""
    if args.load_init:
        state = np.load(args.load_init)
        for name, model in models.items():
            prefix = name + "."
            weights = {k[len(prefix) :]: state[k] for k in state.files if k.startswith(prefix)}
            model.load_state_dict({k: torch.from_numpy(v) for k, v in weights.items()})
    if args.save_init:
        np.savez(
            args.save_init,
            **{
                f"{name}.{k}": np.asarray(v)
                for name, model in models.items()
                for k, v in model.state_dict().items()
            },
        )


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--critic-iters", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--latent-dim", type=int, default=4)
    parser.add_argument("--hidden", type=int, default=32)
    parser.add_argument("--lambda-gp", type=float, default=10.0)
    parser.add_argument("--double", action="store_true", help="compute in float64")
    parser.add_argument("--save-init")
    parser.add_argument("--load-init")
    args = parser.parse_args(argv)
    if args.double:
        torch.set_default_dtype(torch.float64)
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    dtype = torch.get_default_dtype()

    netG, netD = generator(args.latent_dim, args.hidden), critic(args.hidden)
    exchange_weights({"G": netG, "D": netD}, args)
    optD = torch.optim.Adam(netD.parameters(), lr=1e-3, betas=(0.5, 0.9))
    optG = torch.optim.Adam(netG.parameters(), lr=1e-3, betas=(0.5, 0.9))
    for it in range(args.iterations):
        for p in netD.parameters():
            p.requires_grad = True
        for _ in range(args.critic_iters):
            real = real_batch(rng, args.batch_size)
            noise = torch.from_numpy(rng.standard_normal((args.batch_size, args.latent_dim)))
            with torch.no_grad():
                fake = netG(noise.to(dtype))
            alpha = torch.from_numpy(rng.random((args.batch_size, 1))).to(dtype)
            optD.zero_grad()
            d_real, d_fake = netD(real).mean(), netD(fake).mean()
            gp = gradient_penalty(netD, real, fake, alpha)
            d_loss = d_fake - d_real + args.lambda_gp * gp
            d_loss.backward()
            optD.step()
        for p in netD.parameters():
            p.requires_grad = False  # the generator's step leaves the critic alone
        noise = torch.from_numpy(rng.standard_normal((args.batch_size, args.latent_dim)))
        optG.zero_grad()
        g_loss = -netD(netG(noise.to(dtype))).mean()
        g_loss.backward()
        optG.step()
        print(
            f"iter {it} d_loss {d_loss.item():.12g} gp {gp.item():.12g} "
            f"wasserstein {(d_real - d_fake).item():.12g} g_loss {g_loss.item():.12g}"
        )


if __name__ == "__main__":
    main()
