"""PyTorch's polynomial regression example: a linear layer on the features ``x, x^2, x^3,
x^4`` fits a random polynomial with ``smooth_l1_loss`` and a hand-written gradient step.
The batches come from a seeded NumPy generator in float64 while the layer is float32 (unless
``--double``): the loss is computed in the wider dtype and the layer's gradients stay
float32, as PyTorch promotes."""

import argparse

import numpy as np
import tapegrad as torch
import tapegrad.nn.functional as F

POLY_DEGREE = 4


def make_features(x):
    """A matrix with columns [x, x^2, x^3, x^4]."""
    x = x.unsqueeze(1)
    return torch.cat([x**i for i in range(1, POLY_DEGREE + 1)], 1)


def poly_desc(W, b):
    result = "y = "
    for i, w in enumerate(W):
        result += f"{w:+.6f} x^{len(W) - i} "
    return result + f"{b[0]:+.6f}"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-steps", type=int, default=200)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--log-interval", type=int, default=20)
    parser.add_argument("--double", action="store_true", help="the layer in float64")
    parser.add_argument("--save-init")
    parser.add_argument("--load-init")
    args = parser.parse_args(argv)
    if args.double:
        torch.set_default_dtype(torch.float64)
    torch.manual_seed(0)
    rng = np.random.default_rng(0)

    W_target = torch.from_numpy(rng.standard_normal((POLY_DEGREE, 1)) * 5)
    b_target = torch.from_numpy(rng.standard_normal(1) * 5)

    def get_batch(batch_size):
        x = make_features(torch.from_numpy(rng.uniform(-1, 1, batch_size)))
        return x, x.mm(W_target) + b_target.item()

    fc = torch.nn.Linear(W_target.size(0), 1)
    if args.load_init:
        state = np.load(args.load_init)
        fc.load_state_dict({k: torch.from_numpy(state[k]) for k in state.files})
    if args.save_init:
        np.savez(args.save_init, **{k: np.asarray(v) for k, v in fc.state_dict().items()})

    for step in range(1, args.max_steps + 1):
        batch_x, batch_y = get_batch(args.batch_size)
        fc.zero_grad()
        output = F.smooth_l1_loss(fc(batch_x.to(fc.weight.dtype)), batch_y)
        loss = output.item()
        output.backward()
        with torch.no_grad():
            for param in fc.parameters():
                param.add_(-args.lr * param.grad)
        if step % args.log_interval == 0:
            print(f"step {step} loss {loss:.9g} (float64: {output.dtype == torch.float64})")
        if loss < 1e-3:
            break
    print(f"Loss: {loss:.9g} after {step} batches")
    print("==> Learned function:\t" + poly_desc(fc.weight.view(-1).tolist(), fc.bias.tolist()))
    print("==> Actual function:\t" + poly_desc(W_target.view(-1).tolist(), b_target.tolist()))


if __name__ == "__main__":
    main()
