"""Where dataset files are found, and how missing ones are fetched.

Resolution order (first place that holds *all* requested files wins, so files of one dataset are
never mixed from two places):

1. an explicit ``data_dir`` (``data_dir/<subdir>/`` then ``data_dir/`` itself), which is then
   the only place searched: naming a folder that lacks the files is an error, never a silent
   fallback to the places below (nor a download);
2. ``$TAPEGRAD_DATA/<subdir>/`` (the layout of the shared data folder: ``mnist/``,
   ``fashion-mnist/``, ``imdb/``, ``glove/``);
3. the user cache ``$XDG_CACHE_HOME/tapegrad/<subdir>/`` (default ``~/.cache/tapegrad``);
4. for Fashion-MNIST only, Debian's ``/usr/share/datasets/fashion-mnist/``
   (package ``dataset-fashion-mnist``);
5. a download into the user cache with ``pooch``, verified against the official SHA-256, only when
   downloading is allowed: not with ``TAPEGRAD_OFFLINE=1`` (the tests set it), and only after a
   quick connection check to the host succeeds.

Only checksums confirmed against independent published sources are listed in ``_REMOTES``; a file
without one is never downloaded. Local files are checked against a ``SHA256SUMS`` file sitting
beside them, when there is one.
"""

from __future__ import annotations

import hashlib
import os
import socket
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from .errors import DatasetError, DatasetNotFoundError

PathLike = str | os.PathLike

ENV_DATA = "TAPEGRAD_DATA"
ENV_OFFLINE = "TAPEGRAD_OFFLINE"
#: How the not-found messages name the explicit folder; the CLI sets "--data-dir DIR".
DATA_DIR_OPTION = "data_dir="
#: Debian's dataset root; a module attribute so tests can point it elsewhere.
DEBIAN_DATASETS = Path("/usr/share/datasets")

MNIST_FILES = (
    "train-images-idx3-ubyte.gz",
    "train-labels-idx1-ubyte.gz",
    "t10k-images-idx3-ubyte.gz",
    "t10k-labels-idx1-ubyte.gz",
)
IMDB_SOURCES = ("aclImdb", "aclImdb_v1_labelled.tar.gz", "aclImdb_v1.tar.gz")
GLOVE_DIMS = (50, 100, 200, 300)


def glove_files(dim: int) -> tuple[str, str]:
    """The accepted names of the GloVe 6B file of dimension ``dim``, preferred first."""
    return (f"glove.6B.{dim}d.txt.gz", f"glove.6B.{dim}d.txt")


@dataclass(frozen=True)
class Remote:
    """An official download: mirrors of one file, its SHA-256, and optionally a zip member."""

    urls: tuple[str, ...]
    sha256: str
    archive: str | None = None  # the downloaded file's name when it is a zip holding `member`
    member: str | None = None


@dataclass(frozen=True)
class DatasetInfo:
    """A dataset's folder name, default files (each a tuple of alternatives) and Debian folder."""

    subdir: str
    files: tuple[tuple[str, ...], ...]
    debian: str | None = None
    remotes: dict[str, Remote] = field(default_factory=dict)


# SHA-256 per file, in MNIST_FILES order. MNIST: identical to the shared data's SHA256SUMS (the
# official files, byte for byte). Fashion-MNIST: the files Zalando Research publishes (official
# MD5s 8d4fb7e6..., 25c81989..., bef4ecab..., bb300cfd...); Debian's recompressed copies differ.
_MNIST_SHA256 = dict(
    zip(
        MNIST_FILES,
        (
            "440fcabf73cc546fa21475e81ea370265605f56be210a4024d2ca8f203523609",
            "3552534a0a558bbed6aed32b30c495cca23d567ec52cac8be1a0730e8010255c",
            "8d422c7b0a1c1c79245a5bcf07fe86e33eeafee792b84584aec276f5a2dbc4e6",
            "f7ae60f92e00ec6debd23a6088c31dbd2371eca3ffa0defaefb259924204aec6",
        ),
    )
)
_MNIST_MIRRORS = (
    "https://ossci-datasets.s3.amazonaws.com/mnist/",
    "https://storage.googleapis.com/cvdf-datasets/mnist/",
    "http://yann.lecun.com/exdb/mnist/",
)
_FASHION_SHA256 = dict(
    zip(
        MNIST_FILES,
        (
            "08dc20ab1689590a0bcd66e874647b6ee8464e2d501b5a3f1f78831db19a3fdc",
            "b0197879cbda89f3dc7b894f9fd52b858e68ea4182b6947c9d8c2b67e5f18dcc",
            "78dcbbfb5a27efaf1b6c1d616caca68560be8766c5bffcb2791df9273a534229",
            "42bd18137a62d5998cdeae52bf3a0676ac6b706f5cf8439b47bb5b151ae3dccf",
        ),
    )
)
_FASHION_MIRRORS = (
    "https://raw.githubusercontent.com/zalandoresearch/fashion-mnist/master/data/fashion/",
    "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/",
)
_IMDB_REMOTE = Remote(
    urls=("https://ai.stanford.edu/~amaas/data/sentiment/aclImdb_v1.tar.gz",),
    sha256="c40f74a18d3b61f90feba1e17730e0d38e8b97c05fde7008942e91923d1658fe",
)
_GLOVE_ZIP_URLS = (
    "https://nlp.stanford.edu/data/glove.6B.zip",
    "https://downloads.cs.stanford.edu/nlp/data/glove.6B.zip",
)
_GLOVE_ZIP_SHA256 = "617afb2fe6cbd085c235baf7a465b96f4112bd7f7ccb2b2cbd649fed9cbcf2fb"

DATASETS: dict[str, DatasetInfo] = {
    "mnist": DatasetInfo(
        "mnist",
        tuple((f,) for f in MNIST_FILES),
        remotes={
            f: Remote(tuple(m + f for m in _MNIST_MIRRORS), s) for f, s in _MNIST_SHA256.items()
        },
    ),
    "fashion-mnist": DatasetInfo(
        "fashion-mnist",
        tuple((f,) for f in MNIST_FILES),
        debian="fashion-mnist",
        remotes={
            f: Remote(tuple(m + f for m in _FASHION_MIRRORS), s) for f, s in _FASHION_SHA256.items()
        },
    ),
    "imdb": DatasetInfo("imdb", (IMDB_SOURCES,), remotes={"aclImdb_v1.tar.gz": _IMDB_REMOTE}),
    "glove": DatasetInfo(
        "glove",
        (glove_files(50),),
        remotes={
            f"glove.6B.{d}d.txt": Remote(
                _GLOVE_ZIP_URLS, _GLOVE_ZIP_SHA256, "glove.6B.zip", f"glove.6B.{d}d.txt"
            )
            for d in GLOVE_DIMS
        },
    ),
}


def cache_dir() -> Path:
    """The user cache root: ``$XDG_CACHE_HOME/tapegrad``, else ``~/.cache/tapegrad``."""
    base = os.environ.get("XDG_CACHE_HOME")
    return (Path(base) if base else Path.home() / ".cache") / "tapegrad"


def downloads_enabled() -> bool:
    """False when ``TAPEGRAD_OFFLINE`` is set to anything but ``0``/``false``/``no``/empty."""
    flag = os.environ.get(ENV_OFFLINE, "").strip().lower()
    return flag in ("", "0", "false", "no")


def _reachable(url: str, timeout: float = 3.0) -> bool:
    """A quick TCP connection to the URL's host, so that offline machines fail fast."""
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        with socket.create_connection((parts.hostname, port), timeout=timeout):
            return True
    except OSError:
        return False


def _info(name: str) -> DatasetInfo:
    try:
        return DATASETS[name]
    except KeyError:
        raise DatasetError(
            f"unknown dataset {name!r}; known datasets: {', '.join(DATASETS)}"
        ) from None


def _locations(info: DatasetInfo, data_dir: PathLike | None) -> list[tuple[str, Path]]:
    """(label, folder) pairs in search order; labels appear in the not-found message."""
    places: list[tuple[str, Path]] = []
    if data_dir is not None:  # an explicit folder is used alone
        root = Path(data_dir).expanduser()
        return [("data_dir", root / info.subdir), ("data_dir", root)]
    env = os.environ.get(ENV_DATA)
    if env:
        places.append((f"${ENV_DATA}", Path(env).expanduser() / info.subdir))
    places.append(("cache", cache_dir() / info.subdir))
    if info.debian is not None:
        places.append(("debian", DEBIAN_DATASETS / info.debian))
    return places


def _normalise(files: Sequence[str | Sequence[str]]) -> list[tuple[str, ...]]:
    return [(f,) if isinstance(f, str) else tuple(f) for f in files]


def _find_in(folder: Path, wanted: list[tuple[str, ...]]) -> list[Path] | None:
    found = []
    for alternatives in wanted:
        hit = next((folder / a for a in alternatives if (folder / a).exists()), None)
        if hit is None:
            return None
        found.append(hit)
    return found


def _describe_wanted(wanted: list[tuple[str, ...]]) -> str:
    return ", ".join(" or ".join(alts) for alts in wanted)


def resolve(
    name: str,
    files: Sequence[str | Sequence[str]] | None = None,
    data_dir: PathLike | None = None,
    *,
    download: bool | None = None,
) -> list[Path]:
    """Paths of ``files`` of dataset ``name``, one per entry, from the first place holding all.

    Each entry of ``files`` is a file name or a tuple of alternative names (first present wins;
    a folder name such as ``aclImdb`` counts too). ``files=None`` means the dataset's defaults.
    ``download=None`` downloads only when :func:`downloads_enabled` and the host answers;
    ``False`` never downloads. Raises :class:`DatasetNotFoundError` (one line: what is missing,
    where it looked, where to put the files) when nothing is found.
    """
    info = _info(name)
    wanted = _normalise(files if files is not None else info.files)
    places = _locations(info, data_dir)
    for _, folder in places:
        found = _find_in(folder, wanted)
        if found is not None:
            return found

    cache = cache_dir() / info.subdir
    if data_dir is not None:
        root = Path(data_dir).expanduser()
        state = (
            "does not exist"
            if not root.exists()
            else ("is not a folder" if not root.is_dir() else "lacks them")
        )
        hint = DATA_DIR_OPTION.split()[0].rstrip("=")
        raise DatasetNotFoundError(
            f"{name}: could not find {_describe_wanted(wanted)} in {root / info.subdir}/ or "
            f"{root}/: {root} {state}. A folder given with {hint} is the only place searched; "
            f"put the file(s) there, or leave it out to use ${ENV_DATA}/{info.subdir}/, "
            f"{cache}/ or a download"
        )
    note = ""
    allowed = downloads_enabled() if download is None else download
    if not allowed:
        note = f"downloading is off ({ENV_OFFLINE}=1)" if download is None else "download=False"
    else:
        remotes = []
        for alternatives in wanted:
            remote = next(((a, info.remotes[a]) for a in alternatives if a in info.remotes), None)
            remotes.append(remote)
        missing = [w for w, r in zip(wanted, remotes) if r is None]
        if missing:
            note = (
                f"no verified official checksum for {_describe_wanted(missing)}, "
                "so tapegrad will not download it"
            )
        else:
            try:
                return [_download(fname, remote, cache) for fname, remote in remotes]
            except DatasetError as err:
                note = str(err)

    searched = ", ".join(f"{folder} ({label})" for label, folder in places)
    raise DatasetNotFoundError(
        f"{name}: could not find {_describe_wanted(wanted)}; searched {searched}; {note}. "
        f"Put the file(s) in {cache}/ or in ${ENV_DATA}/{info.subdir}/, or pass {DATA_DIR_OPTION}"
    )


def _download(fname: str, remote: Remote, dest: Path) -> Path:
    """Fetch one file into ``dest`` with pooch, verified by SHA-256; extract a zip member."""
    import pooch  # imported lazily: only a download needs it

    dest.mkdir(parents=True, exist_ok=True)
    errors = []
    for url in remote.urls:
        if not _reachable(url):
            errors.append(f"{urlsplit(url).hostname} unreachable")
            continue
        try:
            got = Path(
                pooch.retrieve(
                    url,
                    known_hash=f"sha256:{remote.sha256}",
                    fname=remote.archive or fname,
                    path=dest,
                    progressbar=False,
                )
            )
        except Exception as err:  # network errors and hash mismatches alike: try the next mirror
            errors.append(f"{url}: {type(err).__name__}: {str(err).splitlines()[0]}")
            continue
        if remote.member is None:
            return got
        return _extract_member(got, remote.member, dest / fname)
    raise DatasetError(f"download of {fname} failed ({'; '.join(errors)})")


def _extract_member(archive: Path, member: str, target: Path) -> Path:
    """Copy one member of a zip to ``target`` atomically (temp file, then rename)."""
    from ..serialization import atomic_file  # imported here: serialization needs the engine

    try:
        with zipfile.ZipFile(archive) as zf, zf.open(member) as src, atomic_file(target) as out:
            while chunk := src.read(1 << 20):
                out.write(chunk)
    except (zipfile.BadZipFile, KeyError) as err:
        raise DatasetError(f"{archive}: cannot extract {member}: {err}") from err
    return target


# --- checksums -------------------------------------------------------------------------------

_verified: set[tuple[str, int, int]] = set()


def sha256_file(path: PathLike) -> str:
    """Hex SHA-256 of a file, read in 1 MiB chunks."""
    h = hashlib.sha256()
    from ..safefile import open_regular

    with open_regular(path, DatasetError) as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def read_sha256sums(path: PathLike) -> dict[str, str]:
    """``{file name: hex digest}`` from ``sha256sum`` output (``HEX  name`` or ``HEX *name``)."""
    from ..safefile import open_regular

    with open_regular(path, DatasetError, limit=1 << 20) as f:  # a list of names: small
        text = f.read().decode("utf-8", errors="replace")
    sums = {}
    for lineno, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split(maxsplit=1)
        if len(parts) != 2 or len(parts[0]) != 64:
            raise DatasetError(f"{path}:{lineno}: expected '<64 hex digits>  <file>', got {line!r}")
        sums[parts[1].lstrip("*")] = parts[0].lower()
    return sums


def verify_checksum(path: PathLike) -> bool:
    """Check ``path`` against a ``SHA256SUMS`` beside it; True if checked, False if not listed.

    Raises :class:`DatasetError` on a mismatch. A file already verified in this process (same
    size and modification time) is not hashed again.
    """
    path = Path(path)
    sums_file = path.parent / "SHA256SUMS"
    if not path.is_file() or not sums_file.is_file():
        return False
    expected = read_sha256sums(sums_file).get(path.name)
    if expected is None:
        return False
    st = path.stat()
    key = (str(path.resolve()), st.st_size, st.st_mtime_ns)
    if key in _verified:
        return True
    actual = sha256_file(path)
    if actual != expected:
        raise DatasetError(
            f"{path}: checksum mismatch: {sums_file} expects sha256 {expected}, file has {actual}"
        )
    _verified.add(key)
    return True


def describe(data_dir: PathLike | None = None) -> dict[str, str | None]:
    """For each known dataset, where its default files were found (``None`` if nowhere).

    A single-file dataset reports the file, a multi-file one its folder. Never downloads.
    """
    out: dict[str, str | None] = {}
    for name, info in DATASETS.items():
        try:
            found = resolve(name, info.files, data_dir, download=False)
        except DatasetNotFoundError:
            out[name] = None
            continue
        out[name] = str(found[0] if len(found) == 1 else found[0].parent)
    return out
