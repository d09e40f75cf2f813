"""Pack the datasets a GPU session needs into a folder small enough to carry to the device
machine (its working tree may be at most 64 MiB, and it reaches no network): MNIST and the IMDB
tarball as they are (40 MB), and GloVe 50d cut down to the rows of the text presets' vocabulary
(from 68 MB to a few hundred KB). The cut file gives exactly the embedding matrix the full one
gives, since the presets only ever read those rows; it has no SHA256SUMS, so nothing checks it
against the official file's checksum.

    python benchmarks/gpu_data.py .gpu-data        # from $TAPEGRAD_DATA (or --data-dir)
    echo /.gpu-data/ >> .git/info/exclude            # then carry it: run(carry=[".gpu-data"])
"""

from __future__ import annotations

import argparse
import gzip
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from tapegrad.data.paths import glove_files, resolve  # noqa: E402
from tapegrad.models import PRESETS  # noqa: E402
from tapegrad.train.experiment import load_dataset  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folder", help="where to write mnist/, imdb/ and glove/")
    ap.add_argument("--data-dir", help="the source data folder (default: $TAPEGRAD_DATA)")
    args = ap.parse_args(argv)
    out = Path(args.folder)
    for name in ("mnist", "imdb"):
        for f in resolve(name, None, args.data_dir, download=False):
            (out / name).mkdir(parents=True, exist_ok=True)
            shutil.copy2(f, out / name / Path(f).name)
    words: set[str] = set()
    for preset in PRESETS.values():
        if preset.needs_glove:
            ds, _ = load_dataset("imdb", args.data_dir, **preset.extra)
            words.update(ds.vocab.id_to_word)
    (source,) = resolve("glove", [glove_files(50)], args.data_dir, download=False)
    (out / "glove").mkdir(parents=True, exist_ok=True)
    kept = 0
    with (
        gzip.open(source, "rt", encoding="utf8") as src,
        gzip.open(out / "glove" / Path(source).name, "wt", encoding="utf8") as dst,
    ):
        for line in src:
            if line.split(" ", 1)[0] in words:
                dst.write(line)
                kept += 1
    size = sum(f.stat().st_size for f in out.rglob("*") if f.is_file())
    print(f"{out}: MNIST, IMDB and {kept} GloVe rows, {size / 2**20:.1f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
