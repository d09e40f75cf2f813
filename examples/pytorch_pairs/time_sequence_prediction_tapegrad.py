"""PyTorch's time-sequence-prediction example, small: two stacked LSTMCells learn sine waves
of random phase, trained with L-BFGS (a closure re-evaluating the loss), then predict the
continuation of test waves beyond their end (``future`` steps fed their own outputs)."""

import argparse

import numpy as np
import tapegrad as torch
import tapegrad.nn as nn
import tapegrad.optim as optim


class Sequence(nn.Module):
    def __init__(self, hidden=16):
        super().__init__()
        self.hidden = hidden
        self.lstm1 = nn.LSTMCell(1, hidden)
        self.lstm2 = nn.LSTMCell(hidden, hidden)
        self.linear = nn.Linear(hidden, 1)

    def forward(self, input, future=0):
        outputs = []
        n = input.size(0)
        h_t = torch.zeros(n, self.hidden, dtype=input.dtype)
        c_t = torch.zeros(n, self.hidden, dtype=input.dtype)
        h_t2 = torch.zeros(n, self.hidden, dtype=input.dtype)
        c_t2 = torch.zeros(n, self.hidden, dtype=input.dtype)
        for input_t in input.split(1, dim=1):
            h_t, c_t = self.lstm1(input_t, (h_t, c_t))
            h_t2, c_t2 = self.lstm2(h_t, (h_t2, c_t2))
            output = self.linear(h_t2)
            outputs += [output]
        for _ in range(future):  # predict the future, from our own outputs
            h_t, c_t = self.lstm1(output, (h_t, c_t))
            h_t2, c_t2 = self.lstm2(h_t, (h_t2, c_t2))
            output = self.linear(h_t2)
            outputs += [output]
        return torch.cat(outputs, dim=1)


def sine_waves(n, length, period, seed):
    rng = np.random.default_rng(seed)
    x = np.arange(length) + rng.integers(-4 * period, 4 * period, (n, 1))
    return np.sin(x / period).astype(np.float64)


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
    parser.add_argument("--steps", type=int, default=8, help="L-BFGS steps")
    parser.add_argument("--waves", type=int, default=20)
    parser.add_argument("--length", type=int, default=60)
    parser.add_argument("--future", type=int, default=20)
    parser.add_argument("--save-init")
    parser.add_argument("--load-init")
    args = parser.parse_args(argv)
    torch.manual_seed(0)

    data = sine_waves(args.waves, args.length, period=5.0, seed=2)
    input = torch.from_numpy(data[3:, :-1])
    target = torch.from_numpy(data[3:, 1:])
    test_input = torch.from_numpy(data[:3, :-1])
    test_target = torch.from_numpy(data[:3, 1:])
    seq = Sequence()
    seq.double()
    exchange_weights(seq, args)
    criterion = nn.MSELoss()
    optimizer = optim.LBFGS(seq.parameters(), lr=0.8)
    for i in range(args.steps):

        def closure():
            optimizer.zero_grad()
            out = seq(input)
            loss = criterion(out, target)
            loss.backward()
            return loss

        loss = optimizer.step(closure)
        print(f"STEP: {i} loss: {loss.item():.12g}")
        with torch.no_grad():
            pred = seq(test_input, future=args.future)
            loss = criterion(pred[:, : -args.future], test_target)
            print(f"test loss: {loss.item():.12g}")
            y = pred.detach().numpy()
        print(f"prediction tail: {' '.join(f'{v:.9f}' for v in y[0, -3:])}")


if __name__ == "__main__":
    main()
