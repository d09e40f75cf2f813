"""Learn sine waves with two stacked LSTM cells and L-BFGS, then let the model continue the
waves on its own: PyTorch's time-sequence-prediction example, written with tapegrad.

    python examples/time_sequence_prediction.py            # 100 waves of 200 points, compiled
    python examples/time_sequence_prediction.py --length 1000 --steps 15

The waves ``sin((t + shift) / 20)`` are float64, as in the original. The network reads one
value per step through ``LSTMCell(1, 51)`` and ``LSTMCell(51, 51)`` and predicts the next;
``optim.LBFGS`` (lr 0.8) minimises the mean squared error, calling a closure that computes the
loss and its gradient. L-BFGS itself runs eagerly (how often it calls the closure depends on
the values); the closure's forward and backward pass is compiled unless ``--eager``. After
training, ``--future`` values are predicted for three held-out waves.
"""

from __future__ import annotations

import sys

import numpy as np
from _common import parser, say

import tapegrad as tg
from tapegrad import nn, optim


class Sequence(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm1 = nn.LSTMCell(1, 51)
        self.lstm2 = nn.LSTMCell(51, 51)
        self.linear = nn.Linear(51, 1)

    def forward(self, input, future: int = 0):
        n = input.shape[0]
        zeros = np.zeros((n, 51), input.dtype)
        h_t, c_t, h_t2, c_t2 = zeros, zeros, zeros, zeros
        outputs = []
        for t in range(input.shape[1]):
            h_t, c_t = self.lstm1(input[:, t : t + 1], (h_t, c_t))
            h_t2, c_t2 = self.lstm2(h_t, (h_t2, c_t2))
            outputs.append(self.linear(h_t2))
        for _ in range(future):  # the model feeds on its own predictions
            h_t, c_t = self.lstm1(outputs[-1], (h_t, c_t))
            h_t2, c_t2 = self.lstm2(h_t, (h_t2, c_t2))
            outputs.append(self.linear(h_t2))
        return tg.concatenate(outputs, axis=1)


def sine_waves(n: int, length: int, period: int, rng: np.random.Generator) -> np.ndarray:
    shift = rng.integers(-4 * period, 4 * period, n)
    x = np.arange(length)[None, :] + shift[:, None]
    return np.sin(x / period).astype(np.float64)


def main(argv: list[str] | None = None) -> dict:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--waves", type=int, default=100)
    p.add_argument("--length", type=int, default=200)
    p.add_argument("--steps", type=int, default=5, help="L-BFGS steps")
    p.add_argument("--future", type=int, default=100)
    args = p.parse_args(argv)

    tg.manual_seed(args.seed)
    data = sine_waves(args.waves, args.length, 20, np.random.default_rng(args.seed))
    input, target = data[3:, :-1], data[3:, 1:]
    test_input, test_target = data[:3, :-1], data[:3, 1:]
    seq = Sequence().double()
    criterion = nn.MSELoss()
    optimizer = optim.LBFGS(seq.parameters(), lr=0.8)

    def loss_and_grad(x, y):
        optimizer.zero_grad()
        loss = criterion(seq(x), y)
        loss.backward()
        return loss

    if not args.eager:
        loss_and_grad = tg.compile(loss_and_grad)
    history, losses = [], []

    def closure():
        losses.append(loss_and_grad(input, target).item())
        return losses[-1]

    for i in range(args.steps):
        optimizer.step(closure)
        with tg.no_grad():
            pred = seq(tg.tensor(test_input), future=args.future)
            test_loss = criterion(pred[:, : test_input.shape[1]], test_target).item()
        history.append({"step": i, "loss": losses[-1], "test_loss": test_loss})
        say(args.quiet, f"step {i}: loss {history[-1]['loss']:.6f}, test loss {test_loss:.6f}")
    return {"history": history, "model": seq, "prediction": pred.data}


if __name__ == "__main__":
    main(sys.argv[1:])
