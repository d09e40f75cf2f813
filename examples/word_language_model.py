"""A word-level language model: a stacked LSTM (or GRU, or Elman RNN) predicting the next word,
with the decoder tied to the embedding, dropout, and gradient-norm clipping; PyTorch's
word-language-model example, written with tapegrad.

    python examples/word_language_model.py                 # IMDB reviews, 1 epoch, compiled
    python examples/word_language_model.py --text book.txt --epochs 6 --nlayers 2

The corpus is a text file (``--text``; each line ends with an end-of-line token) or, by
default, IMDB's training reviews from ``$TAPEGRAD_DATA/imdb`` (``--reviews`` of them). The
token stream is cut into ``--batch-size`` parallel columns read ``--bptt`` words at a time;
the hidden state carries over from one chunk to the next (fed back as an input, so no
gradient flows across chunks). Plain SGD at ``--lr``, divided by 4 whenever the validation
loss stops improving; perplexity is ``exp(loss)``.
"""

from __future__ import annotations

import math
import sys

import numpy as np
from _common import parser, say

import tapegrad as tg
from tapegrad import nn, optim
from tapegrad.data import Vocab, tokenize
from tapegrad.nn import functional as F


class RNNModel(nn.Module):
    """Embedding -> dropout -> recurrent layers -> dropout -> Linear decoder (log-softmax)."""

    def __init__(self, rnn_type, ntoken, ninp, nhid, nlayers, dropout=0.5, tie_weights=False):
        super().__init__()
        self.ntoken, self.rnn_type, self.nhid, self.nlayers = ntoken, rnn_type, nhid, nlayers
        self.drop = nn.Dropout(dropout)
        self.encoder = nn.Embedding(ntoken, ninp)
        if rnn_type in ("LSTM", "GRU"):
            self.rnn = getattr(nn, rnn_type)(ninp, nhid, nlayers, dropout=dropout)
        elif rnn_type in ("RNN_TANH", "RNN_RELU"):
            act = rnn_type[4:].lower()
            self.rnn = nn.RNN(ninp, nhid, nlayers, nonlinearity=act, dropout=dropout)
        else:
            raise ValueError(f"--model must be LSTM, GRU, RNN_TANH or RNN_RELU, got {rnn_type}")
        self.decoder = nn.Linear(nhid, ntoken)
        if tie_weights:  # "Using the Output Embedding to Improve Language Models" (Press & Wolf)
            if nhid != ninp:
                raise ValueError("--tied needs --nhid equal to --emsize")
            self.decoder.weight = self.encoder.weight
        nn.init.uniform_(self.encoder.weight, -0.1, 0.1)
        nn.init.zeros_(self.decoder.bias)
        nn.init.uniform_(self.decoder.weight, -0.1, 0.1)

    def forward(self, input, hidden):
        emb = self.drop(self.encoder(input))
        output, hidden = self.rnn(emb, hidden)
        decoded = self.decoder(self.drop(output)).reshape((-1, self.ntoken))
        return F.log_softmax(decoded, axis=1), hidden

    def init_hidden(self, bsz: int) -> list[np.ndarray]:
        h = np.zeros((self.nlayers, bsz, self.nhid), np.float32)
        return [h, h.copy()] if self.rnn_type == "LSTM" else [h]


def text_corpus(path: str, vocab_size: int):
    with open(path, encoding="utf-8") as f:
        lines = [tokenize(line) for line in f]
    vocab = Vocab.build(lines, vocab_size)
    ids = [np.append(vocab.encode(toks), 0) for toks in lines if toks]  # 0 (<pad>): end of line
    return np.concatenate(ids).astype(np.int64), vocab


def imdb_corpus(data_dir, reviews: int, vocab_size: int):
    from tapegrad.data import DatasetError, imdb

    try:
        ds = imdb(data_dir, maxlen=400, vocab_size=vocab_size, padding="post", truncating="post")
    except DatasetError as e:
        raise SystemExit(str(e)) from None
    rows = [r[r != 0] for r in ds.train.x[:reviews]]
    ids = np.concatenate([np.append(r, 0) for r in rows])  # 0 (<pad>) ends each review
    return ids.astype(np.int64), ds.vocab


def batchify(data: np.ndarray, bsz: int) -> np.ndarray:
    """The token stream as ``bsz`` columns, time-major ``(steps, bsz)``."""
    n = len(data) // bsz
    return np.ascontiguousarray(data[: n * bsz].reshape(bsz, n).T)


def main(argv: list[str] | None = None) -> dict:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--text", default=None, help="a text file (default: IMDB reviews)")
    p.add_argument("--reviews", type=int, default=2000, help="IMDB reviews to read")
    p.add_argument("--data-dir", default=None)
    p.add_argument("--vocab", type=int, default=10000)
    p.add_argument("--model", default="LSTM", help="LSTM, GRU, RNN_TANH or RNN_RELU")
    p.add_argument("--emsize", type=int, default=128)
    p.add_argument("--nhid", type=int, default=128)
    p.add_argument("--nlayers", type=int, default=2)
    p.add_argument("--lr", type=float, default=20.0)
    p.add_argument("--clip", type=float, default=0.25)
    p.add_argument("--batch-size", type=int, default=20)
    p.add_argument("--bptt", type=int, default=35)
    p.add_argument("--dropout", type=float, default=0.2)
    p.add_argument("--untied", action="store_true", help="separate decoder weights")
    p.add_argument("--log-interval", type=int, default=50)
    args = p.parse_args(argv)

    tg.manual_seed(args.seed)
    if args.text:
        ids, vocab = text_corpus(args.text, args.vocab)
    else:
        ids, vocab = imdb_corpus(args.data_dir, args.reviews, args.vocab)
    cut = int(len(ids) * 0.9)
    train_data, val_data = batchify(ids[:cut], args.batch_size), batchify(ids[cut:], 10)
    say(
        args.quiet,
        f"{len(ids)} tokens, {len(vocab)} words; train {train_data.shape}, "
        f"validation {val_data.shape}",
    )

    model = RNNModel(
        args.model,
        len(vocab),
        args.emsize,
        args.nhid,
        args.nlayers,
        args.dropout,
        tie_weights=not args.untied,
    )
    optimizer = optim.SGD(model.parameters(), lr=args.lr)
    criterion = nn.NLLLoss()
    lstm = args.model == "LSTM"

    def train_step(data, targets, *hidden):
        optimizer.zero_grad()
        output, hidden = model(data, tuple(hidden) if lstm else hidden[0])
        loss = criterion(output, targets)
        loss.backward()
        optim.clip_grad_norm_(model.parameters(), args.clip)
        optimizer.step()
        return (loss, *(hidden if lstm else (hidden,)))

    def eval_step(data, targets, *hidden):
        output, hidden = model(data, tuple(hidden) if lstm else hidden[0])
        return (criterion(output, targets), *(hidden if lstm else (hidden,)))

    if not args.eager:
        train_step, eval_step = tg.compile(train_step), tg.compile(eval_step)

    def chunks(source):
        for i in range(0, len(source) - 1, args.bptt):
            n = min(args.bptt, len(source) - 1 - i)
            yield source[i : i + n], source[i + 1 : i + 1 + n].reshape(-1)

    def evaluate(source) -> float:
        model.eval()
        hidden, total = model.init_hidden(source.shape[1]), 0.0
        with tg.no_grad():
            for data, targets in chunks(source):
                loss, *out = eval_step(data, targets, *hidden)
                hidden = [np.array(h.data) for h in out]  # a copy: outputs are plan buffers
                total += len(data) * loss.item()
        return total / (len(source) - 1)

    best, history = None, []
    for epoch in range(1, args.epochs + 1):
        model.train()
        hidden, total = model.init_hidden(args.batch_size), 0.0
        for k, (data, targets) in enumerate(chunks(train_data)):
            loss, *out = train_step(data, targets, *hidden)
            hidden = [np.array(h.data) for h in out]
            total += loss.item()
            if k % args.log_interval == 0 and k:
                cur = total / args.log_interval
                say(
                    args.quiet,
                    f"epoch {epoch} batch {k}  lr {optimizer.param_groups[0]['lr']:g}"
                    f"  loss {cur:.2f}  ppl {math.exp(cur):.1f}",
                )
                total = 0.0
        val_loss = evaluate(val_data)
        history.append({"epoch": epoch, "val_loss": val_loss, "val_ppl": math.exp(val_loss)})
        say(
            args.quiet,
            f"end of epoch {epoch}: validation loss {val_loss:.2f}, "
            f"perplexity {math.exp(val_loss):.1f}",
        )
        if best is None or val_loss < best:
            best = val_loss
        else:  # no improvement: anneal the learning rate
            for g in optimizer.param_groups:
                g["lr"] /= 4.0
    return {"history": history, "model": model}


if __name__ == "__main__":
    main(sys.argv[1:])
