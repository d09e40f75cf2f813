"""Per-example gradients with torch.func: ``vmap(grad(loss))`` over a batch with
``functional_call``, checked against one backward pass per example, then used for a few
DP-SGD-style steps (each example's gradient clipped to norm 1 before averaging). Also a
Hessian-vector product as ``jvp`` of ``grad``."""

import argparse

import numpy as np
import tapegrad as torch
import tapegrad.nn as nn
import tapegrad.nn.functional as F
from tapegrad.func import functional_call, grad, jvp, vmap


class Net(nn.Module):
    def __init__(self, n_in=6, hidden=16, n_out=3):
        super().__init__()
        self.fc1 = nn.Linear(n_in, hidden)
        self.fc2 = nn.Linear(hidden, n_out)

    def forward(self, x):
        return self.fc2(torch.tanh(self.fc1(x)))


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
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--lr", type=float, default=0.5)
    parser.add_argument("--max-norm", type=float, default=1.0)
    parser.add_argument("--double", action="store_true", help="compute in float64")
    parser.add_argument("--save-init")
    parser.add_argument("--load-init")
    args = parser.parse_args(argv)
    if args.double:
        torch.set_default_dtype(torch.float64)
    torch.manual_seed(0)
    rng = np.random.default_rng(0)

    model = Net()
    exchange_weights(model, args)
    x = torch.from_numpy(rng.standard_normal((args.batch_size, 6))).to(torch.get_default_dtype())
    y = torch.from_numpy(rng.integers(0, 3, args.batch_size))

    def compute_loss(params, buffers, sample, target):
        out = functional_call(model, (params, buffers), (sample.unsqueeze(0),))
        return F.cross_entropy(out, target.unsqueeze(0))

    params = {k: v.detach() for k, v in model.named_parameters()}
    buffers = {k: v.detach() for k, v in model.named_buffers()}
    per_sample = vmap(grad(compute_loss), in_dims=(None, None, 0, 0))(params, buffers, x, y)

    # the same gradients, one backward pass per example
    worst = 0.0
    for i in range(args.batch_size):
        model.zero_grad()
        F.cross_entropy(model(x[i : i + 1]), y[i : i + 1]).backward()
        for name, p in model.named_parameters():
            worst = max(worst, (p.grad - per_sample[name][i]).abs().max().item())
    print(f"per-example gradients match the loop: {worst < 1e-5}")
    print(f"fc1.weight per-example shape {tuple(per_sample['fc1.weight'].shape)}")

    # a Hessian-vector product: forward-mode through the gradient
    def full_loss(p):
        return F.cross_entropy(functional_call(model, (p, buffers), (x,)), y)

    tangent = {k: torch.ones_like(v) for k, v in params.items()}
    _, hvp = jvp(grad(full_loss), (params,), (tangent,))
    print(f"hvp norm {torch.sqrt(sum((h**2).sum() for h in hvp.values())).item():.12g}")

    for step in range(args.steps):
        per_sample = vmap(grad(compute_loss), in_dims=(None, None, 0, 0))(params, buffers, x, y)
        norms = torch.stack(
            [g.reshape(args.batch_size, -1).norm(dim=1) for g in per_sample.values()]
        ).norm(dim=0)
        scale = (args.max_norm / (norms + 1e-6)).clamp(max=1.0)
        params = {
            k: params[k] - args.lr * (g * scale.view(-1, *[1] * (g.dim() - 1))).mean(0)
            for k, g in per_sample.items()
        }
        loss = full_loss(params)
        print(f"step {step} loss {loss.item():.12g} mean_norm {norms.mean().item():.12g}")


if __name__ == "__main__":
    main()
