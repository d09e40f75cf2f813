"""PyTorch's word-level language model example, small: an LSTM (with tied input and output
embeddings) or a Transformer encoder with sinusoidal positions and a causal mask, trained by
truncated backpropagation through time with gradient clipping and a manual SGD update, on a
generated corpus (sentences of a tiny grammar) or ``--data`` (a text file)."""

import argparse
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class RNNModel(nn.Module):
    """Embedding, a stacked LSTM, a decoder tied to the embedding."""

    def __init__(self, ntoken, ninp, nhid, nlayers, dropout=0.5, tie_weights=True):
        super().__init__()
        self.drop = nn.Dropout(dropout)
        self.encoder = nn.Embedding(ntoken, ninp)
        self.rnn = nn.LSTM(ninp, nhid, nlayers, dropout=dropout)
        self.decoder = nn.Linear(nhid, ntoken)
        if tie_weights:
            self.decoder.weight = self.encoder.weight
        self.nhid, self.nlayers = nhid, nlayers
        initrange = 0.1
        nn.init.uniform_(self.encoder.weight, -initrange, initrange)
        nn.init.zeros_(self.decoder.bias)

    def forward(self, input, hidden):
        emb = self.drop(self.encoder(input))
        output, hidden = self.rnn(emb, hidden)
        output = self.drop(output)
        decoded = self.decoder(output).view(-1, self.decoder.out_features)
        return F.log_softmax(decoded, dim=1), hidden

    def init_hidden(self, bsz):
        weight = next(self.parameters())
        return (
            weight.new_zeros(self.nlayers, bsz, self.nhid),
            weight.new_zeros(self.nlayers, bsz, self.nhid),
        )


class PositionalEncoding(nn.Module):
    def __init__(self, d_model, dropout=0.1, max_len=500):
        super().__init__()
        self.dropout = nn.Dropout(p=dropout)
        pe = torch.zeros(max_len, d_model)
        position = torch.arange(0, max_len, dtype=torch.float).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, d_model, 2).float() * (-math.log(10000.0) / d_model))
        pe[:, 0::2] = torch.sin(position * div_term)
        pe[:, 1::2] = torch.cos(position * div_term)
        self.register_buffer("pe", pe.unsqueeze(0).transpose(0, 1))

    def forward(self, x):
        return self.dropout(x + self.pe[: x.size(0), :])


class TransformerModel(nn.Module):
    """A causal Transformer encoder over token embeddings."""

    def __init__(self, ntoken, ninp, nhead, nhid, nlayers, dropout=0.5):
        super().__init__()
        self.src_mask = None
        self.pos_encoder = PositionalEncoding(ninp, dropout)
        layer = nn.TransformerEncoderLayer(ninp, nhead, nhid, dropout)
        self.transformer_encoder = nn.TransformerEncoder(layer, nlayers, enable_nested_tensor=False)
        self.encoder = nn.Embedding(ntoken, ninp)
        self.ninp = ninp
        self.decoder = nn.Linear(ninp, ntoken)
        initrange = 0.1
        nn.init.uniform_(self.encoder.weight, -initrange, initrange)
        nn.init.zeros_(self.decoder.bias)
        nn.init.uniform_(self.decoder.weight, -initrange, initrange)

    def forward(self, src):
        if self.src_mask is None or self.src_mask.size(0) != len(src):
            self.src_mask = nn.Transformer.generate_square_subsequent_mask(len(src))
        src = self.pos_encoder(self.encoder(src) * math.sqrt(self.ninp))
        output = self.transformer_encoder(src, self.src_mask)
        return F.log_softmax(self.decoder(output), dim=-1)


def generated_corpus(n_sentences, seed):
    rng = np.random.default_rng(seed)
    subjects, verbs = ["the cat", "a dog", "my friend"], ["sat on", "ran to", "looked at"]
    objects = ["the mat", "a tree", "the house", "my car"]
    return " . ".join(
        f"{rng.choice(subjects)} {rng.choice(verbs)} {rng.choice(objects)}"
        for _ in range(n_sentences)
    ).split()


def batchify(data, bsz):
    nbatch = data.size(0) // bsz
    data = data.narrow(0, 0, nbatch * bsz)
    return data.view(bsz, -1).t().contiguous()


def get_batch(source, i, bptt):
    seq_len = min(bptt, len(source) - 1 - i)
    return source[i : i + seq_len], source[i + 1 : i + 1 + seq_len].reshape(-1)


def repackage_hidden(h):
    """Hidden states cut from their history."""
    if isinstance(h, torch.Tensor):
        return h.detach()
    return tuple(repackage_hidden(v) for v in h)


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
    parser.add_argument("--model", default="LSTM", choices=["LSTM", "Transformer"])
    parser.add_argument("--data", help="a text file (default: a generated corpus)")
    parser.add_argument("--emsize", type=int, default=32)
    parser.add_argument("--nhid", type=int, default=32)
    parser.add_argument("--nlayers", type=int, default=2)
    parser.add_argument("--nhead", type=int, default=2)
    parser.add_argument("--lr", type=float, default=5.0)
    parser.add_argument("--clip", type=float, default=0.25)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--bptt", type=int, default=12)
    parser.add_argument("--dropout", type=float, default=0.2)
    parser.add_argument("--sentences", type=int, default=120)
    parser.add_argument("--log-interval", type=int, default=5)
    parser.add_argument("--double", action="store_true", help="compute in float64")
    parser.add_argument("--save-init")
    parser.add_argument("--load-init")
    args = parser.parse_args(argv)
    if args.double:
        torch.set_default_dtype(torch.float64)
    torch.manual_seed(1111)

    if args.data:
        with open(args.data) as f:
            words = f.read().split()
    else:
        words = generated_corpus(args.sentences, seed=0)
    vocab = {w: i for i, w in enumerate(sorted(set(words)))}
    ids = torch.tensor([vocab[w] for w in words], dtype=torch.long)
    split = len(ids) * 9 // 10
    train_data = batchify(ids[:split], args.batch_size)
    val_data = batchify(ids[split:], 2)
    ntokens = len(vocab)
    if args.model == "Transformer":
        model = TransformerModel(
            ntokens, args.emsize, args.nhead, args.nhid, args.nlayers, args.dropout
        )
    else:
        model = RNNModel(ntokens, args.emsize, args.nhid, args.nlayers, args.dropout)
    exchange_weights(model, args)
    criterion = nn.NLLLoss()

    def evaluate(data_source, bsz):
        model.eval()
        total_loss = 0.0
        hidden = None if args.model == "Transformer" else model.init_hidden(bsz)
        with torch.no_grad():
            for i in range(0, data_source.size(0) - 1, args.bptt):
                data, targets = get_batch(data_source, i, args.bptt)
                if args.model == "Transformer":
                    output = model(data).view(-1, ntokens)
                else:
                    output, hidden = model(data, hidden)
                    hidden = repackage_hidden(hidden)
                total_loss += len(data) * criterion(output, targets).item()
        return total_loss / (len(data_source) - 1)

    lr = args.lr
    for epoch in range(1, args.epochs + 1):
        model.train()
        hidden = None if args.model == "Transformer" else model.init_hidden(args.batch_size)
        for batch, i in enumerate(range(0, train_data.size(0) - 1, args.bptt)):
            data, targets = get_batch(train_data, i, args.bptt)
            model.zero_grad()
            if args.model == "Transformer":
                output = model(data).view(-1, ntokens)
            else:
                hidden = repackage_hidden(hidden)
                output, hidden = model(data, hidden)
            loss = criterion(output, targets)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
            with torch.no_grad():
                for p in model.parameters():
                    p.add_(p.grad, alpha=-lr)
            if batch % args.log_interval == 0:
                print(f"epoch {epoch} batch {batch} lr {lr:.4g} loss {loss.item():.12g}")
        val_loss = evaluate(val_data, 2)
        print(f"end of epoch {epoch} valid loss {val_loss:.12g} ppl {math.exp(val_loss):.12g}")
        lr /= 4.0


if __name__ == "__main__":
    main()
