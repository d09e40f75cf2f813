"""A sequence-to-sequence GRU that learns to reverse digit strings of varied lengths: the
encoder reads padded batches through ``pack_padded_sequence`` (each sequence for exactly its
length), the decoder attends over the encoder's outputs (padding masked) and is trained with
teacher forcing; cross-entropy ignores the padding."""

import argparse

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence, pad_sequence

PAD, SOS, EOS = 0, 1, 2
VOCAB = 13  # PAD, SOS, EOS and ten digits


class Encoder(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.embedding = nn.Embedding(VOCAB, hidden, padding_idx=PAD)
        self.gru = nn.GRU(hidden, hidden, batch_first=True, bidirectional=True)
        self.bridge = nn.Linear(2 * hidden, hidden)

    def forward(self, src, lengths):
        packed = pack_padded_sequence(
            self.embedding(src), lengths, batch_first=True, enforce_sorted=False
        )
        outputs, hidden = self.gru(packed)
        outputs, _ = pad_packed_sequence(outputs, batch_first=True)
        outputs = self.bridge(outputs)
        hidden = torch.tanh(self.bridge(torch.cat([hidden[0], hidden[1]], dim=1)))
        return outputs, hidden.unsqueeze(0)


class AttnDecoder(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.embedding = nn.Embedding(VOCAB, hidden, padding_idx=PAD)
        self.gru = nn.GRU(2 * hidden, hidden, batch_first=True)
        self.out = nn.Linear(2 * hidden, VOCAB)

    def forward(self, tgt_in, hidden, enc_outputs, src_mask):
        logits = []
        context = torch.zeros_like(hidden[0])
        for t in range(tgt_in.size(1)):
            emb = self.embedding(tgt_in[:, t])
            output, hidden = self.gru(torch.cat([emb, context], dim=1).unsqueeze(1), hidden)
            query = output.squeeze(1)
            scores = torch.bmm(enc_outputs, query.unsqueeze(2)).squeeze(2)
            scores = scores.masked_fill(~src_mask, float("-inf"))
            weights = F.softmax(scores, dim=1)
            context = torch.bmm(weights.unsqueeze(1), enc_outputs).squeeze(1)
            logits.append(self.out(torch.cat([query, context], dim=1)))
        return torch.stack(logits, dim=1)


class Seq2Seq(nn.Module):
    def __init__(self, hidden=24):
        super().__init__()
        self.encoder = Encoder(hidden)
        self.decoder = AttnDecoder(hidden)

    def forward(self, src, lengths, tgt_in):
        enc_outputs, hidden = self.encoder(src, lengths)
        src_mask = src[:, : enc_outputs.size(1)] != PAD
        return self.decoder(tgt_in, hidden, enc_outputs, src_mask)


def make_batch(rng, batch_size, max_len):
    lengths = rng.integers(2, max_len + 1, batch_size)
    seqs = [torch.from_numpy(rng.integers(3, VOCAB, n)) for n in lengths]
    src = pad_sequence(seqs, batch_first=True, padding_value=PAD)
    eos, sos = torch.tensor([EOS]), torch.tensor([SOS])
    tgt = pad_sequence(
        [torch.cat([s.flip(0), eos]) for s in seqs], batch_first=True, padding_value=PAD
    )
    sos = sos.expand(batch_size).unsqueeze(1)
    tgt_in = torch.cat([sos, tgt[:, :-1]], dim=1)
    tgt_in = tgt_in.masked_fill(tgt_in == EOS, PAD)
    return src, torch.from_numpy(lengths), tgt_in, tgt


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
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--max-len", type=int, default=6)
    parser.add_argument("--double", action="store_true", help="compute in float64")
    parser.add_argument("--save-init")
    parser.add_argument("--load-init")
    args = parser.parse_args(argv)
    if args.double:
        torch.set_default_dtype(torch.float64)
    torch.manual_seed(0)
    rng = np.random.default_rng(0)

    model = Seq2Seq()
    exchange_weights(model, args)
    optimizer = torch.optim.Adam(model.parameters(), lr=5e-3)
    criterion = nn.CrossEntropyLoss(ignore_index=PAD)
    for step in range(args.steps):
        src, lengths, tgt_in, tgt = make_batch(rng, args.batch_size, args.max_len)
        model.train()
        logits = model(src, lengths, tgt_in)
        loss = criterion(logits.reshape(-1, VOCAB), tgt.reshape(-1))
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
        optimizer.step()
        with torch.no_grad():
            mask = tgt != PAD
            correct = ((logits.argmax(-1) == tgt) & mask).sum().item()
        print(f"step {step} loss {loss.item():.12g} token_accuracy {correct}/{mask.sum().item()}")


if __name__ == "__main__":
    main()
