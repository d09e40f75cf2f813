"""Variable-length sequences for the recurrent layers, in PyTorch's forms: ``pad_sequence``,
``pack_padded_sequence``, ``pack_sequence``, ``pad_packed_sequence`` and ``PackedSequence``.

A :class:`PackedSequence` holds the valid time steps only, time-major as PyTorch lays them out
(``data`` row by row: step 0 of every sequence, longest first, then step 1, ...), with
``batch_sizes`` (how many sequences are still running at each step) and the sorting
permutation. ``RNN``/``LSTM``/``GRU`` take one and return one; each sequence is run for exactly
its length (sequences of one length are batched together), so the outputs, the final states
``h_n``/``c_n`` and their gradients are those of the unpadded sequences, bidirectional layers
included. Packing and unpacking are indexing operations: gradients flow through them.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ...autodiff import ops
from ...autodiff.errors import ShapeError
from ...autodiff.tensor import Tensor

__all__ = [
    "PackedSequence",
    "pad_sequence",
    "pack_padded_sequence",
    "pack_sequence",
    "pad_packed_sequence",
]


class PackedSequence(NamedTuple):
    """Packed valid steps of a batch of sequences (see the module's docstring)."""

    data: Tensor
    batch_sizes: Tensor
    sorted_indices: Tensor | None = None
    unsorted_indices: Tensor | None = None

    def lengths(self) -> np.ndarray:
        """Each sequence's length, in the batch's original order."""
        bs = np.asarray(self.batch_sizes.data)
        in_sorted = (bs[None, :] > np.arange(bs[0])[:, None]).sum(1)
        if self.sorted_indices is None:
            return in_sorted
        out = np.empty_like(in_sorted)
        out[np.asarray(self.sorted_indices.data)] = in_sorted
        return out

    def to(self, *args, **kwargs) -> PackedSequence:
        return self._replace(data=self.data.to(*args, **kwargs))


def _lengths(lengths) -> np.ndarray:
    arr = np.asarray(lengths.data if isinstance(lengths, Tensor) else lengths)
    if arr.ndim != 1 or (arr.size and arr.dtype.kind not in "iu"):
        raise ShapeError(f"pack_padded_sequence: lengths must be a 1-d list of ints, got {arr}")
    return arr.astype(np.int64)


def _order(lens: np.ndarray) -> np.ndarray:
    return np.argsort(-lens, kind="stable")


def _packed_index(lens_sorted: np.ndarray, order: np.ndarray):
    """(batch index, time index) of each packed row, and the batch sizes per step."""
    steps = int(lens_sorted[0]) if len(lens_sorted) else 0
    batch_sizes = (lens_sorted[None, :] > np.arange(steps)[:, None]).sum(1)
    b_idx = np.concatenate([order[:n] for n in batch_sizes]) if steps else np.zeros(0, np.int64)
    t_idx = np.repeat(np.arange(steps), batch_sizes)
    return b_idx, t_idx, batch_sizes.astype(np.int64)


def pack_padded_sequence(
    input,
    lengths,
    batch_first: bool = False,
    enforce_sorted: bool = True,  # noqa: A002
) -> PackedSequence:
    """Pack a padded batch ``(T, B, *)`` (``(B, T, *)`` with ``batch_first``) whose sequences
    have ``lengths``. ``enforce_sorted``: the lengths must be in decreasing order (PyTorch's
    check); otherwise they are sorted here and the permutation kept."""
    x = input if isinstance(input, Tensor) else Tensor(input)
    lens = _lengths(lengths)
    B = x.shape[0 if batch_first else 1]
    if len(lens) != B:
        raise ShapeError(f"pack_padded_sequence: {len(lens)} lengths for a batch of {B}")
    T = x.shape[1 if batch_first else 0]
    if len(lens) and (lens.min() <= 0 or lens.max() > T):
        raise ValueError(
            f"pack_padded_sequence: lengths must be in 1..{T} (the padded length), got "
            f"{lens.tolist()}"
        )
    if enforce_sorted:
        if np.any(np.diff(lens) > 0):
            raise ValueError(
                "pack_padded_sequence: lengths must be sorted in decreasing order with "
                "enforce_sorted=True; pass enforce_sorted=False to sort them here"
            )
        order = np.arange(B)
    else:
        order = _order(lens)
    b_idx, t_idx, batch_sizes = _packed_index(lens[order], order)
    data = x[b_idx, t_idx] if batch_first else x[t_idx, b_idx]
    if enforce_sorted:
        return PackedSequence(data, Tensor(batch_sizes))
    return PackedSequence(
        data, Tensor(batch_sizes), Tensor(order.astype(np.int64)), Tensor(np.argsort(order))
    )


def pad_packed_sequence(
    sequence: PackedSequence,
    batch_first: bool = False,
    padding_value: float = 0.0,
    total_length: int | None = None,
) -> tuple[Tensor, Tensor]:
    """The padded batch ``(T, B, *)`` (``(B, T, *)`` with ``batch_first``) of a packed one,
    in the original batch order, and the lengths (int64)."""
    lens = sequence.lengths()
    order = (
        np.arange(len(lens))
        if sequence.sorted_indices is None
        else np.asarray(sequence.sorted_indices.data)
    )
    b_idx, t_idx, _ = _packed_index(lens[order], order)
    T = int(lens.max()) if len(lens) else 0
    if total_length is not None:
        if total_length < T:
            raise ValueError(
                f"pad_packed_sequence: total_length {total_length} is below the longest "
                f"sequence ({T})"
            )
        T = int(total_length)
    data = sequence.data
    rows = np.full((len(lens), T), len(b_idx), dtype=np.int64)  # the padding row by default
    rows[b_idx, t_idx] = np.arange(len(b_idx))
    filler = Tensor(np.full((1, *data.shape[1:]), padding_value, dtype=data.dtype))
    padded = ops.concatenate([data, filler], 0)[rows]
    if not batch_first:
        padded = ops.transpose(padded, (1, 0, *range(2, padded.ndim)))
    return padded, Tensor(lens.astype(np.int64))


def pad_sequence(
    sequences, batch_first: bool = False, padding_value: float = 0.0, padding_side: str = "right"
) -> Tensor:
    """Stack tensors of shapes ``(L_i, *)`` into ``(max L, B, *)`` (``(B, max L, *)`` with
    ``batch_first``), padding with ``padding_value`` on ``padding_side``."""
    seqs = [s if isinstance(s, Tensor) else Tensor(s) for s in sequences]
    if not seqs:
        raise ValueError("pad_sequence: no sequences")
    if padding_side not in ("right", "left"):
        raise ValueError(
            f"pad_sequence: padding_side must be 'right' or 'left', got {padding_side!r}"
        )
    rest = {tuple(s.shape[1:]) for s in seqs}
    if len(rest) != 1 or any(s.ndim == 0 for s in seqs):
        shapes = [tuple(s.shape) for s in seqs]
        raise ShapeError(f"pad_sequence: sequences must share their trailing shape, got {shapes}")
    T = max(s.shape[0] for s in seqs)
    padded = []
    for s in seqs:
        gap = T - s.shape[0]
        width = [(gap, 0) if padding_side == "left" else (0, gap)] + [(0, 0)] * (s.ndim - 1)
        padded.append(ops.pad(s, width, value=padding_value) if gap else s)
    return ops.stack(padded, 0 if batch_first else 1)


def pack_sequence(sequences, enforce_sorted: bool = True) -> PackedSequence:
    """Pack a list of tensors ``(L_i, *)`` (see :func:`pack_padded_sequence`)."""
    lens = [s.shape[0] for s in sequences]
    return pack_padded_sequence(pad_sequence(sequences), lens, enforce_sorted=enforce_sorted)


# -- running a recurrent layer over a packed batch ----------------------------------------------
def _state_part(state, idx):
    if state is None:
        return None
    if isinstance(state, (tuple, list)):
        return type(state)(_state_part(s, idx) for s in state)
    return state[:, idx]


def _state_join(parts, inverse):
    first = parts[0]
    if isinstance(first, (tuple, list)):
        return type(first)(_state_join([p[k] for p in parts], inverse) for k in range(len(first)))
    return ops.concatenate(parts, 1)[:, inverse]


def run_packed(layer, packed: PackedSequence, hx=None):
    """``layer(packed, hx)`` for ``RNN``/``LSTM``/``GRU``: each group of sequences of one
    length runs for exactly that length; returns ``(PackedSequence, final state)``."""
    padded, lens_t = pad_packed_sequence(packed, batch_first=True)
    lens = np.asarray(lens_t.data)
    T = padded.shape[1]
    outs, states, members = [], [], []
    for L in sorted(set(lens.tolist()), reverse=True):
        idx = np.flatnonzero(lens == L)
        x = padded[idx, :L]
        if not layer.batch_first:
            x = ops.transpose(x, (1, 0, *range(2, x.ndim)))
        out, state = layer(x, _state_part(hx, idx))
        if not layer.batch_first:
            out = ops.transpose(out, (1, 0, 2))
        if L < T:
            out = ops.pad(out, [(0, 0), (0, T - L), (0, 0)])
        outs.append(out)
        states.append(state)
        members.append(idx)
    inverse = np.argsort(np.concatenate(members))
    out = ops.concatenate(outs, 0)[inverse]
    order = (
        np.arange(len(lens))
        if packed.sorted_indices is None
        else np.asarray(packed.sorted_indices.data)
    )
    b_idx, t_idx, _ = _packed_index(lens[order], order)
    result = PackedSequence(out[b_idx, t_idx], *packed[1:])
    return result, _state_join(states, inverse)
