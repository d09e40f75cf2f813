"""Eager mode, tapegrad against PyTorch: a tiny graph and a long one.

- ``tiny``: forward and backward of ``sum(x * y + z)`` on 4 floats, so the figure is pure
  per-operation framework overhead. Each round's per-call time is the median over ``--calls``
  calls.
- ``lstm``: one training step (forward, MSE loss, backward, SGD update) of a sine-wave model
  unrolled over ``T`` time steps: two LSTM cells (1 -> 51 -> 51 units) and a Linear(51, 1) read
  out at every step, batch 97, the shape of PyTorch's time-sequence-prediction example. tapegrad
  runs ``nn.functional.lstm_cell`` (one step of the fused LSTM scan: 19 recorded operations per
  time step with the read-out, 18,983 in a step's forward pass at ``T = 999``); PyTorch runs it
  twice: with ``nn.LSTMCell`` (what its users write; the gates are computed in C++) and with the
  cell's gates written out as separate operations (matmuls, sigmoid, tanh, slices: what the cell
  costs a framework that records each of them). Each length in ``--lengths``
  shows whether a step's time grows linearly with the graph; tapegrad also runs with Python's
  cyclic garbage collector paused during the step, to show what the collector costs.

Every framework runs in this process, alternating within each round (A B C A B C ...), from the
same weights and inputs; the report gives the median over rounds, the spread (min-max) and the
ratios. One thread (``--threads``) unless told otherwise; glibc's malloc keeps the memory it
frees, as in ``tapegrad bench`` (see ``tapegrad/bench/harness.py``).

    python benchmarks/overhead.py [--graphs tiny,lstm] [--rounds 15] [--calls 2000]
                                  [--lengths 250,500,999] [--lstm-rounds 5] [--json out.json]
                                  [--markdown out.md]
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

import tapegrad as tg  # noqa: E402
from tapegrad import nn  # noqa: E402
from tapegrad.bench.harness import keep_freed_memory  # noqa: E402
from tapegrad.bench.micro import pinned_threads  # noqa: E402

F = nn.functional
HIDDEN, BATCH = 51, 97


# -- the tiny graph ------------------------------------------------------------------------------
def time_calls(fn, calls: int) -> float:
    """Median microseconds per call over ``calls`` calls (each timed alone)."""
    samples = []
    for _ in range(calls):
        t0 = time.perf_counter_ns()
        fn()
        samples.append(time.perf_counter_ns() - t0)
    return statistics.median(samples) / 1e3


def make_tapegrad(n=4):
    rng = np.random.default_rng(0)
    x, y, z = (
        tg.tensor(rng.normal(size=n).astype(np.float32), requires_grad=True) for _ in range(3)
    )

    def step():
        x.grad = y.grad = z.grad = None
        (x * y + z).sum().backward()

    return step


def make_torch(n=4):
    import torch

    x, y, z = (torch.randn(n, requires_grad=True) for _ in range(3))

    def step():
        x.grad = y.grad = z.grad = None
        (x * y + z).sum().backward()

    return step


def tiny(rounds: int, calls: int) -> dict:
    runners = {"tapegrad": make_tapegrad()}
    try:
        runners["torch"] = make_torch()
    except ImportError:
        pass
    for fn in runners.values():  # warm up
        time_calls(fn, 200)
    samples = {name: [] for name in runners}
    for _ in range(rounds):
        for name, fn in runners.items():  # alternate A B A B
            samples[name].append(time_calls(fn, calls))
    return {name: _spread_us(v) for name, v in samples.items()}


# -- the long graph: an unrolled two-cell LSTM -----------------------------------------------------
def lstm_weights(seed: int = 0) -> dict[str, np.ndarray]:
    """LSTMCell-style weights, uniform in +-1/sqrt(hidden), gates stacked i, f, g, o."""
    rng = np.random.default_rng(seed)
    k = 1 / np.sqrt(HIDDEN)

    def u(*shape):
        return rng.uniform(-k, k, size=shape).astype(np.float32)

    w = {}
    for cell, inputs in (("1", 1), ("2", HIDDEN)):
        w |= {f"w_ih{cell}": u(4 * HIDDEN, inputs), f"w_hh{cell}": u(4 * HIDDEN, HIDDEN)}
        w |= {f"b_ih{cell}": u(4 * HIDDEN), f"b_hh{cell}": u(4 * HIDDEN)}
    return w | {"w_out": u(1, HIDDEN), "b_out": u(1)}


def sine_batch(length: int) -> tuple[np.ndarray, np.ndarray]:
    """The example's data: sine waves with random phase, input x[:, :-1], target x[:, 1:]."""
    rng = np.random.default_rng(2)
    t = np.arange(length + 1) + rng.integers(-80, 80, size=(BATCH, 1))
    data = np.sin(t / 20.0).astype(np.float32)
    return data[:, :-1], data[:, 1:]


class TapegradSine(nn.Module):
    """The two-cell model, eager tapegrad."""

    def __init__(self, weights: dict[str, np.ndarray]):
        super().__init__()
        for name, value in weights.items():
            setattr(self, name, nn.Parameter(value))

    def forward(self, x):
        h1 = c1 = h2 = c2 = None
        outputs = []
        for t in range(x.shape[1]):
            h1, c1 = F.lstm_cell(
                x[:, t : t + 1], (h1, c1), self.w_ih1, self.w_hh1, self.b_ih1, self.b_hh1
            )
            h2, c2 = F.lstm_cell(h1, (h2, c2), self.w_ih2, self.w_hh2, self.b_ih2, self.b_hh2)
            outputs.append(F.linear(h2, self.w_out, self.b_out))
        return tg.concatenate(outputs, axis=1)


def make_tapegrad_lstm(weights, x, y):
    model = TapegradSine(weights)
    opt = tg.optim.SGD(model.parameters(), lr=0.01)
    xt, yt = tg.tensor(x), tg.tensor(y)

    def step():
        opt.zero_grad()
        loss = F.mse_loss(model(xt), yt)
        loss.backward()
        opt.step()
        return float(loss.data)

    return step


def make_torch_lstm(weights, x, y, written_out: bool):
    import torch
    from torch import nn as tnn

    class Sine(tnn.Module):
        def __init__(self):
            super().__init__()
            self.cell1, self.cell2 = tnn.LSTMCell(1, HIDDEN), tnn.LSTMCell(HIDDEN, HIDDEN)
            self.out = tnn.Linear(HIDDEN, 1)

        def forward(self, x):
            zeros = torch.zeros(len(x), HIDDEN)
            h1, c1, h2, c2 = zeros, zeros, zeros, zeros
            outputs = []
            for x_t in x.split(1, dim=1):
                h1, c1 = cell(self.cell1, x_t, h1, c1)
                h2, c2 = cell(self.cell2, h1, h2, c2)
                outputs.append(self.out(h2))
            return torch.cat(outputs, dim=1)

    def cell(module, x, h, c):
        if not written_out:
            return module(x, (h, c))
        # the gates written out, one recorded operation each
        gates = torch.nn.functional.linear(x, module.weight_ih, module.bias_ih + module.bias_hh)
        gates = gates + h @ module.weight_hh.t()
        s = torch.sigmoid(gates)
        i, f, o = s[:, :HIDDEN], s[:, HIDDEN : 2 * HIDDEN], s[:, 3 * HIDDEN :]
        g = torch.tanh(gates[:, 2 * HIDDEN : 3 * HIDDEN])
        c = f * c + i * g
        return o * torch.tanh(c), c

    model = Sine()
    names = {"weight_ih": "w_ih", "weight_hh": "w_hh", "bias_ih": "b_ih", "bias_hh": "b_hh"}
    with torch.no_grad():
        for module, n in ((model.cell1, "1"), (model.cell2, "2")):
            for part, ours in names.items():
                getattr(module, part).copy_(torch.from_numpy(weights[ours + n]))
        model.out.weight.copy_(torch.from_numpy(weights["w_out"]))
        model.out.bias.copy_(torch.from_numpy(weights["b_out"]))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)

    def step():
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(xt), yt)
        loss.backward()
        opt.step()
        return loss.item()

    return step


def gc_paused(step):
    """``step`` with Python's cyclic garbage collector paused while it runs: how much of a long
    eager step the collector's passes over the recorded graph cost (a diagnosis, not a mode)."""

    def run():
        gc.disable()
        try:
            return step()
        finally:
            gc.enable()

    return run


LSTM_RUNNERS = {
    "tapegrad": lambda w, x, y: make_tapegrad_lstm(w, x, y),
    "tapegrad (gc paused)": lambda w, x, y: gc_paused(make_tapegrad_lstm(w, x, y)),
    "torch (nn.LSTMCell)": lambda w, x, y: make_torch_lstm(w, x, y, written_out=False),
    "torch (gates written out)": lambda w, x, y: make_torch_lstm(w, x, y, written_out=True),
}


def lstm(lengths: list[int], rounds: int) -> dict:
    """Seconds per training step at each length, per runner: median [min-max] over rounds."""
    try:
        import torch  # noqa: F401

        names = list(LSTM_RUNNERS)
    except ImportError:
        names = [n for n in LSTM_RUNNERS if n.startswith("tapegrad")]
    weights = lstm_weights()
    out = {}
    for length in lengths:
        x, y = sine_batch(length)
        steps = {name: LSTM_RUNNERS[name](weights, x, y) for name in names}
        first = {name: step() for name, step in steps.items()}  # warm up; same loss from all
        for name, loss in first.items():  # a fast wrong answer must never be reported
            if not abs(loss - first["tapegrad"]) <= 1e-4 * abs(first["tapegrad"]):
                raise SystemExit(
                    f"overhead.py: at T={length} the first losses disagree: tapegrad "
                    f"{first['tapegrad']:.7g}, {name} {loss:.7g}"
                )
        samples = {name: [] for name in names}
        for _ in range(rounds):
            for name, step in steps.items():
                t0 = time.perf_counter()
                step()
                samples[name].append(time.perf_counter() - t0)
        out[str(length)] = {
            "first_loss": first,
            **{name: _spread_s(v) for name, v in samples.items()},
        }
        print(
            f"  T={length}: "
            + ", ".join(f"{n} {out[str(length)][n]['median_s']:.3f}s" for n in names),
            flush=True,
        )
    return out


# -- reporting ------------------------------------------------------------------------------------
def _spread_us(v: list[float]) -> dict:
    return {"median_us": statistics.median(v), "min_us": min(v), "max_us": max(v)}


def _spread_s(v: list[float]) -> dict:
    return {"median_s": statistics.median(v), "min_s": min(v), "max_s": max(v), "n": len(v)}


def markdown(result: dict) -> str:
    """The eager-mode section of BENCHMARKS.md."""
    lines = ["## Eager mode: per-operation cost", ""]
    lines += [f"Command: `{result['command']}` ({result['threads']} thread(s)).", ""]
    if "tiny" in result:
        t = result["tiny"]
        lines += [
            "Tiny graph, `sum(x * y + z)` on 4 floats, forward + backward; microseconds per "
            "call, median over rounds [min-max]:",
            "",
            "| framework | us per call | tapegrad / this |",
            "|---|---|---|",
        ]
        for name, r in t.items():
            if not isinstance(r, dict):
                continue
            ratio = t["tapegrad"]["median_us"] / r["median_us"]
            lines.append(
                f"| {name} | {r['median_us']:.1f} [{r['min_us']:.1f}-{r['max_us']:.1f}] | "
                f"{ratio:.2f}x |"
            )
        lines.append("")
    if "lstm" in result:
        table = result["lstm"]
        lengths = list(table)
        names = [n for n in table[lengths[0]] if n != "first_loss"]
        peers = [n for n in names if not n.startswith("tapegrad")]
        lines += [
            "Long graph: one training step of an unrolled two-cell LSTM (1 -> 51 -> 51, "
            "read-out at every step, batch 97, SGD) over T time steps; seconds per step, "
            "median over rounds [min-max]; *per T* is the step's time over T (constant if the "
            "cost is linear in the graph's length); *gc paused*: the same tapegrad step with "
            "Python's cyclic garbage collector paused, the share of the step its passes over "
            "the recorded graph take:",
            "",
            "| T | "
            + " | ".join(names)
            + " | "
            + " | ".join(f"tapegrad / {n}" for n in peers)
            + " | tapegrad per T |",
            "|" + "---|" * (len(names) + len(peers) + 2),
        ]
        for length in lengths:
            row = table[length]
            tg_s = row["tapegrad"]["median_s"]
            cells = [
                f"{row[n]['median_s']:.3f} [{row[n]['min_s']:.3f}-{row[n]['max_s']:.3f}]"
                for n in names
            ]
            cells += [f"{tg_s / row[n]['median_s']:.2f}x" for n in peers]
            cells.append(f"{1e6 * tg_s / int(length):.0f} us")
            lines.append(f"| {length} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--graphs", default="tiny,lstm", help="tiny, lstm or both (comma-separated)")
    ap.add_argument("--rounds", type=int, default=15, help="tiny graph: rounds")
    ap.add_argument("--calls", type=int, default=2000, help="tiny graph: calls per round")
    ap.add_argument("--lengths", default="250,500,999", help="lstm: time steps, comma-separated")
    ap.add_argument("--lstm-rounds", type=int, default=5, help="lstm: timed steps per length")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json")
    ap.add_argument("--markdown", help="write the BENCHMARKS.md section here")
    args = ap.parse_args(argv)
    args.argv = sys.argv[1:] if argv is None else list(argv)
    graphs = [g for g in args.graphs.split(",") if g]
    unknown = set(graphs) - {"tiny", "lstm"}
    if unknown:
        ap.error(f"--graphs: unknown {sorted(unknown)}; choose tiny, lstm")
    keep_freed_memory()
    with pinned_threads(args.threads, ["torch"]):
        result = run(args, graphs)
    text = markdown(result)
    print(text)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
    if args.markdown:
        Path(args.markdown).write_text(text)
    return result


def run(args, graphs: list[str]) -> dict:
    result: dict = {
        "command": "python benchmarks/overhead.py " + " ".join(args.argv),
        "threads": args.threads,
    }
    if "tiny" in graphs:
        result["tiny"] = tiny(args.rounds, args.calls)
        print("sum(x * y + z), forward + backward, 4 floats; microseconds per call")
        print(f"{'framework':<10} {'median':>8} {'min':>8} {'max':>8}")
        for name, r in result["tiny"].items():
            print(f"{name:<10} {r['median_us']:8.1f} {r['min_us']:8.1f} {r['max_us']:8.1f}")
        if "torch" in result["tiny"]:
            ratio = result["tiny"]["tapegrad"]["median_us"] / result["tiny"]["torch"]["median_us"]
            result["ratio_tapegrad_over_torch"] = ratio
            print(f"tapegrad / torch = {ratio:.2f}")
    if "lstm" in graphs:
        lengths = [int(n) for n in args.lengths.split(",") if n]
        print("unrolled two-cell LSTM, one training step; seconds")
        result["lstm"] = lstm(lengths, args.lstm_rounds)
    return result


if __name__ == "__main__":
    main()
