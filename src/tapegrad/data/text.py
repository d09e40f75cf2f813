"""The IMDB Large Movie Review Dataset v1.0 (Maas et al., 2011): 25,000 + 25,000 labelled reviews.

Source: the ``aclImdb/`` folder, or a tarball (``aclImdb_v1.tar.gz``, or the smaller
``aclImdb_v1_labelled.tar.gz`` without the unlabelled part) read straight from the archive:
``tarfile`` in streaming mode, nothing extracted to disk, and only regular-file members named
``aclImdb/{train,test}/{pos,neg}/<id>_<rating>.txt`` are read. An archive holding an absolute or
``..`` member name is refused as a whole. Sizes an archive announces are capped before anything
is read: a review above 1 MiB, a pax or GNU long-name header above 1 MiB, more than 64 global pax
keys, or more than 2 GiB of decompressed data are reported as a corrupt archive, so a small
crafted file cannot make the reader allocate or decompress gigabytes; members already read are
not kept, so memory does not grow with their number.

Preprocessing (see :func:`tokenize`): lower-case; ``<br />`` tags become spaces; tokens are the
maximal runs of Unicode letters and digits (regex ``[^\\W_]+``), so punctuation, apostrophes and
underscores split words (``"don't"`` -> ``don``, ``t``, as GloVe's vocabulary expects).
Optionally (``stopwords=``) the tokens in a given set are dropped before anything else;
:data:`STOPWORDS` is tapegrad's list of English function words, negations left out of it.
The vocabulary comes from the training split only: id 0 is padding ``<pad>``, id 1 unknown
``<unk>``, then the ``vocab_size - 2`` most frequent training words (ties broken alphabetically),
so every id is below ``vocab_size``. A word outside the vocabulary becomes ``<unk>``
(``oov="unk"``) or is left out (``oov="drop"``). Each review becomes exactly ``maxlen`` ids: by
default the *last* ``maxlen`` tokens are kept and short reviews are padded with zeros at the
*front* (``truncating="pre"``, ``padding="pre"``; both take ``"post"`` for the other end).
Within a split, reviews are ordered negative then positive, each by file id.

Why a window needs this: an IMDB review runs to about 230 tokens and half of them are function
words, so the text CNN's 130-token window sees half a review; with the function words and
out-of-vocabulary words left out, the same window holds most of one (see ``models.py``).
"""

from __future__ import annotations

import gzip
import re
import tarfile
import warnings
import zlib
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..safefile import open_regular
from . import _cache
from .batches import Split
from .errors import DatasetError
from .paths import IMDB_SOURCES, PathLike, resolve, verify_checksum

PAD, UNK = 0, 1
PAD_TOKEN, UNK_TOKEN = "<pad>", "<unk>"
_FORMAT_VERSION = 1
_MEMBER = re.compile(r"aclImdb/(train|test)/(pos|neg)/(\d+)_(\d+)\.txt")
_MAX_REVIEW_BYTES = 1 << 20  # the longest real review is ~14 KB
_MAX_EXTENDED_HEADER = 1 << 20  # pax / GNU long-name headers: real ones hold a path or two
_MAX_GLOBAL_PAX_KEYS = 64
_MAX_TAR_BYTES = 1 << 31  # decompressed; the full official archive is about a quarter of this
_BR = re.compile(r"<br\s*/?>", re.IGNORECASE)
_WORD = re.compile(r"[^\W_]+")
_ASCII_WORD = re.compile(r"[a-z0-9]+")  # the same matches as _WORD on lower-cased ASCII, faster


# English closed-class words: articles, pronouns, auxiliaries, prepositions, conjunctions and the
# pieces contractions leave ("it's" -> "it", "s"). Kept out of it on purpose, because they carry
# sentiment or turn it: no, not, nor, never, but, very, too, only, more, most, few, and the
# first halves of negated contractions ("don", "didn", "isn", ...).
STOPWORDS: frozenset[str] = frozenset(
    """
    a an the this that these those some any each both all such own same other
    i me my myself we our ours ourselves you your yours yourself yourselves he him his himself
    she her hers herself it its itself they them their theirs themselves
    what which who whom when where why how here there then once than so if because as until while
    am is are was were be been being have has had having do does did doing
    will would should can could
    of at by for with about against between into through during before after above below to from
    up down in out on off over under again further and or just also
    s t d ll m re ve y
    """.split()
)
OOV_RULES = ("unk", "drop")


def tokenize(text: str) -> list[str]:
    """Lower-case ``text``, drop ``<br />`` tags, return the runs of letters and digits."""
    text = _BR.sub(" ", text.lower())
    return (_ASCII_WORD if text.isascii() else _WORD).findall(text)


class Vocab:
    """Word <-> id mapping: ``id_to_word[i]`` is the word of id ``i``; 0 ``<pad>``, 1 ``<unk>``."""

    def __init__(self, id_to_word: Sequence[str]):
        words = list(id_to_word)
        if words[:2] != [PAD_TOKEN, UNK_TOKEN]:
            raise DatasetError(f"a Vocab must start with {PAD_TOKEN!r}, {UNK_TOKEN!r}")
        self.id_to_word: list[str] = words
        self.word_to_id: dict[str, int] = {w: i for i, w in enumerate(words)}
        if len(self.word_to_id) != len(words):
            raise DatasetError("a Vocab's words must be distinct")

    @classmethod
    def build(cls, token_lists: Iterable[Sequence[str]], size: int) -> Vocab:
        """The ``size - 2`` most frequent tokens (ties alphabetical) after ``<pad>``, ``<unk>``."""
        counts: Counter[str] = Counter()
        for toks in token_lists:
            counts.update(toks)
        counts.pop(PAD_TOKEN, None)
        counts.pop(UNK_TOKEN, None)
        ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[: max(size - 2, 0)]
        return cls([PAD_TOKEN, UNK_TOKEN, *(w for w, _ in ranked)])

    def __len__(self) -> int:
        return len(self.id_to_word)

    def __contains__(self, word: str) -> bool:
        return word in self.word_to_id

    def __getitem__(self, word: str) -> int:
        return self.word_to_id.get(word, UNK)

    def encode(self, text: str | Sequence[str], oov: str = "unk") -> np.ndarray:
        """Ids (int32) of a text (tokenized with :func:`tokenize`) or of a token list; words
        outside the vocabulary become ``<unk>`` (``oov="unk"``) or are left out (``"drop"``)."""
        _check_choice("Vocab.encode", "oov", oov, OOV_RULES)
        toks = tokenize(text) if isinstance(text, str) else text
        return np.array(self.ids(toks, oov), dtype=np.int32)

    def ids(self, tokens: Iterable[str], oov: str = "unk") -> list[int]:
        """The ids of ``tokens`` as a list, under the ``oov`` rule of :meth:`encode`."""
        get = self.word_to_id.get
        if oov == "drop":
            return [i for i in (get(t) for t in tokens) if i is not None]
        return [get(t, UNK) for t in tokens]

    def decode(self, ids: Iterable[int]) -> str:
        """Space-joined words of ``ids``, padding left out."""
        return " ".join(self.id_to_word[int(i)] for i in ids if int(i) != PAD)

    def __repr__(self) -> str:
        return f"Vocab({len(self)} words)"


@dataclass(frozen=True)
class TextDataset:
    """``train``/``test`` (``x`` int32 (N, maxlen) ids, ``y`` int64 0=neg 1=pos) and ``vocab``."""

    train: Split
    test: Split
    vocab: Vocab
    source: Path


def _check_member_name(name: str, archive: Path) -> str:
    norm = name[2:] if name.startswith("./") else name
    if norm.startswith(("/", "\\")) or ".." in re.split(r"[/\\]", norm):
        raise DatasetError(
            f"{archive}: unsafe member name {name!r} (absolute or '..'); refusing this archive"
        )
    return norm


_EXTENDED = (
    tarfile.GNUTYPE_LONGNAME,
    tarfile.GNUTYPE_LONGLINK,
    tarfile.XHDTYPE,
    tarfile.XGLTYPE,
    tarfile.SOLARIS_XHDTYPE,
)


class _BoundedTarInfo(tarfile.TarInfo):
    """A TarInfo that refuses oversized extended headers before tarfile reads them whole.

    tarfile reads a pax or GNU long-name header's announced size into memory in one piece, so
    without this check a 1 MB archive can claim (and, compressed, supply) gigabytes of header.
    """

    def _proc_member(self, tar):
        if self.size > _MAX_TAR_BYTES:
            raise tarfile.HeaderError(
                f"member {self.name!r} announces {self.size} bytes, above the "
                f"{_MAX_TAR_BYTES}-byte limit for the whole archive"
            )
        if self.type in _EXTENDED and self.size > _MAX_EXTENDED_HEADER:
            raise tarfile.HeaderError(
                f"member {self.name!r} announces a {self.size}-byte extended header, above the "
                f"{_MAX_EXTENDED_HEADER}-byte limit"
            )
        if self.type == tarfile.XGLTYPE and len(tar.pax_headers) > _MAX_GLOBAL_PAX_KEYS:
            raise tarfile.HeaderError(f"more than {_MAX_GLOBAL_PAX_KEYS} global pax header keys")
        return super()._proc_member(tar)


class _Capped:
    """A read-only stream that raises once more than ``limit`` bytes have been read from it, or
    once it has been read at its end many times.

    The second matters because tarfile skips an unread member by reading block after block up
    to the size its header announces, without stopping at the end of the data: a few bytes
    announcing 2**62 would keep it busy for ever.
    """

    _MAX_READS_AT_END = 64

    def __init__(self, stream, limit: int, path: Path):
        self.stream, self.left, self.limit, self.path = stream, limit, limit, path
        self.reads_at_end = 0

    def read(self, n: int = -1) -> bytes:
        data = self.stream.read(n if 0 <= n <= self.left + 1 else self.left + 1)
        self.left -= len(data)
        if self.left < 0:
            raise DatasetError(
                f"{self.path}: decompresses to more than {self.limit} bytes, above the limit "
                "for an IMDB archive (corrupt or not IMDB?)"
            )
        if not data and n != 0:
            self.reads_at_end += 1
            if self.reads_at_end > self._MAX_READS_AT_END:
                raise DatasetError(
                    f"{self.path}: corrupt or truncated tar archive (a member announces more "
                    "data than the file holds)"
                )
        return data


def _reviews_from_tar(path: Path) -> Iterator[tuple[str, str, int, bytes]]:
    try:
        with open_regular(path, DatasetError) as f:
            gz = f.read(2) == b"\x1f\x8b"
            f.seek(0)
            # Our own GzipFile (not tarfile's "r|gz") so a truncated or damaged archive raises:
            # gzip checks the stream's end and CRC, which tarfile's stream reader does not.
            stream = _Capped(gzip.GzipFile(fileobj=f, mode="rb") if gz else f, _MAX_TAR_BYTES, path)
            with tarfile.open(fileobj=stream, mode="r|", tarinfo=_BoundedTarInfo) as tar:
                while (member := tar.next()) is not None:
                    tar.members.clear()  # streaming: keep no list of every member seen
                    item = _review_member(tar, member, path)
                    if item is not None:
                        yield item
            while stream.read(1 << 20):  # read to the end: gzip's length and CRC check
                pass
    except (tarfile.TarError, EOFError, zlib.error, OSError) as err:
        raise DatasetError(f"{path}: corrupt or truncated tar archive ({err})") from err


def _review_member(
    tar: tarfile.TarFile, member: tarfile.TarInfo, path: Path
) -> tuple[str, str, int, bytes] | None:
    name = _check_member_name(member.name, path)
    m = _MEMBER.fullmatch(name)
    if m is None:
        return None
    if not member.isfile():
        raise DatasetError(f"{path}: member {name} is not a regular file (link or device)")
    if member.size > _MAX_REVIEW_BYTES:
        raise DatasetError(
            f"{path}: member {name} is {member.size} bytes, above the "
            f"{_MAX_REVIEW_BYTES}-byte limit for one review"
        )
    f = tar.extractfile(member)
    data = f.read() if f is not None else b""
    if len(data) != member.size:
        raise DatasetError(f"{path}: member {name} truncated")
    return m[1], m[2], int(m[3]), data


def _reviews_from_folder(path: Path) -> Iterator[tuple[str, str, int, bytes]]:
    for split in ("train", "test"):
        for label in ("neg", "pos"):
            folder = path / split / label
            if not folder.is_dir():
                continue
            for f in folder.iterdir():
                m = re.fullmatch(r"(\d+)_(\d+)\.txt", f.name)
                if m is not None and f.is_file():
                    yield split, label, int(m[1]), f.read_bytes()


def read_reviews(source: PathLike) -> dict[str, tuple[list[str], np.ndarray]]:
    """``{"train": (texts, labels), "test": ...}`` from an ``aclImdb`` folder or tarball."""
    source = Path(source)
    if source.is_dir():
        root = source / "aclImdb" if (source / "aclImdb").is_dir() else source
        items = _reviews_from_folder(root)
    else:
        items = _reviews_from_tar(source)
    found: dict[str, list[tuple[int, int, str]]] = {"train": [], "test": []}
    for split, label, file_id, data in items:
        text = data.decode("utf-8", errors="replace")
        found[split].append((int(label == "pos"), file_id, text))
    out = {}
    for split, rows in found.items():
        for label, label_name in ((0, "neg"), (1, "pos")):
            if not any(r[0] == label for r in rows):
                raise DatasetError(
                    f"{source}: no reviews in aclImdb/{split}/{label_name}/ (expected files "
                    "aclImdb/{train,test}/{pos,neg}/<id>_<rating>.txt)"
                )
        rows.sort(key=lambda r: (r[0], r[1]))
        out[split] = ([r[2] for r in rows], np.array([r[0] for r in rows], dtype=np.int64))
    return out


def _check_choice(where: str, arg: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        options = " or ".join(repr(a) for a in allowed)
        raise ValueError(f"{where}: {arg} must be {options}, got {value!r}")


def pad_sequences(
    seqs: Sequence[Sequence[int]], maxlen: int, padding: str = "pre", truncating: str = "pre"
) -> np.ndarray:
    """An int32 (len(seqs), maxlen) array; ``"pre"`` pads/cuts at the front, ``"post"`` the end."""
    for arg, value in (("padding", padding), ("truncating", truncating)):
        _check_choice("pad_sequences", arg, value, ("pre", "post"))
    out = np.zeros((len(seqs), maxlen), dtype=np.int32)
    for i, s in enumerate(seqs):
        s = s[-maxlen:] if truncating == "pre" else s[:maxlen]
        n = len(s)
        if n:
            if padding == "pre":
                out[i, maxlen - n :] = s
            else:
                out[i, :n] = s
    return out


def _stamp(source: Path) -> dict:
    if source.is_dir():
        root = source / "aclImdb" if (source / "aclImdb").is_dir() else source
        dirs = [root / s / lbl for s in ("train", "test") for lbl in ("neg", "pos")]
        return {"dir": str(root.resolve()), "mtimes": [_mtime(d) for d in dirs]}
    return _cache.source_stamp(source)


def _mtime(p: Path) -> int | None:
    return p.stat().st_mtime_ns if p.exists() else None


def imdb(
    data_dir: PathLike | None = None,
    maxlen: int = 130,
    vocab_size: int = 20000,
    cache: bool = True,
    *,
    padding: str = "pre",
    truncating: str = "pre",
    stopwords: Iterable[str] = (),
    oov: str = "unk",
    download: bool | None = None,
) -> TextDataset:
    """IMDB reviews as padded id matrices, with the training-split vocabulary.

    ``data_dir`` holds ``aclImdb/`` or one of the tarballs, directly or in an ``imdb/`` subfolder.
    ``vocab_size`` counts all ids including ``<pad>`` and ``<unk>`` (ids are < ``vocab_size``).
    ``stopwords``: tokens left out of every review before the vocabulary is counted (e.g.
    :data:`STOPWORDS`). ``oov``: ``"unk"`` maps words outside the vocabulary to ``<unk>``,
    ``"drop"`` leaves them out, so the ``maxlen`` window holds only vocabulary words.
    With ``cache=True`` the arrays are stored as ``.npz`` in the user cache, keyed by the
    source's size and modification time and by the parameters, and reused on the next call.
    """
    if maxlen < 1:
        raise ValueError(f"imdb: maxlen must be >= 1, got {maxlen}")
    if vocab_size < 2:
        raise ValueError(f"imdb: vocab_size must be >= 2 (<pad> and <unk>), got {vocab_size}")
    for arg, value in (("padding", padding), ("truncating", truncating)):
        _check_choice("imdb", arg, value, ("pre", "post"))
    _check_choice("imdb", "oov", oov, OOV_RULES)
    if isinstance(stopwords, str):
        raise TypeError("imdb: stopwords must be a collection of words, not one string")
    stop = frozenset(stopwords)
    (source,) = resolve("imdb", [IMDB_SOURCES], data_dir, download=download)

    key = {
        "source": _stamp(source),
        "maxlen": maxlen,
        "vocab_size": vocab_size,
        "padding": padding,
        "truncating": truncating,
        "version": _FORMAT_VERSION,
    }
    if stop or oov != "unk":  # keys of the default settings stay as they were
        key["stopwords"] = _cache.hash_strings(sorted(stop))
        key["oov"] = oov
    path = _cache.cache_path("imdb", key) if cache else None
    arrays = _cache.load(path) if path is not None else None
    if arrays is None:
        arrays = _build(source, maxlen, vocab_size, padding, truncating, stop, oov)
        if path is not None:
            try:
                _cache.save(path, arrays)
            except OSError as err:
                warnings.warn(f"imdb: could not write cache {path}: {err}", stacklevel=2)
    return TextDataset(
        train=Split(arrays["x_train"], arrays["y_train"]),
        test=Split(arrays["x_test"], arrays["y_test"]),
        vocab=Vocab(arrays["vocab"].tolist()),
        source=source,
    )


def _build(
    source: Path,
    maxlen: int,
    vocab_size: int,
    padding: str,
    truncating: str,
    stopwords: frozenset[str],
    oov: str,
) -> dict[str, np.ndarray]:
    verify_checksum(source)
    reviews = read_reviews(source)
    tokens = {
        split: [[t for t in tokenize(x) if t not in stopwords] for x in texts]
        for split, (texts, _) in reviews.items()
    }
    vocab = Vocab.build(tokens["train"], vocab_size)
    arrays: dict[str, np.ndarray] = {}
    for split in ("train", "test"):
        ids = [vocab.ids(toks, oov) for toks in tokens[split]]
        arrays[f"x_{split}"] = pad_sequences(ids, maxlen, padding, truncating)
        arrays[f"y_{split}"] = reviews[split][1]
    arrays["vocab"] = np.array(vocab.id_to_word, dtype=str)
    return arrays
