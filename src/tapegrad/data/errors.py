"""Errors raised by the dataset loaders.

Every message is one line that names the file (or dataset) and says what was expected, so a
broken download or a misplaced file can be fixed without reading a traceback.
"""

from __future__ import annotations


class DatasetError(ValueError):
    """A dataset file exists but is unusable: corrupt gzip, wrong magic, truncated, bad checksum."""


class DatasetNotFoundError(DatasetError, FileNotFoundError):
    """No local copy of a dataset was found (and none could be downloaded).

    Also a ``FileNotFoundError``, so generic ``except OSError`` handlers still catch it.
    """
