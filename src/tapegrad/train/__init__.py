"""Training: the Trainer (fit, evaluate), per-epoch measurements, checkpoints, reports."""

from .checkpoint import load_latest, save_checkpoint  # noqa: F401
from .measure import AllocationSampler, format_bytes, peak_rss_bytes, traced_step  # noqa: F401
from .report import EpochRecord, plot, table_header, table_row, write_csv, write_json  # noqa: F401
from .trainer import Trainer, TrainingDiverged  # noqa: F401
