"""One run's settings: what ``tapegrad train`` was asked for, checked before any data loads.

The command line parses into a :class:`RunConfig`; :func:`tapegrad.train.run.run` consumes it
(builds the experiment, resumes, locks the checkpoint folder, fits, reports). A setting left
None takes the preset's value. :meth:`RunConfig.check` refuses impossible combinations with a
one-line :class:`UserError`, before any data loads.
"""

from __future__ import annotations

import os
import shlex
from dataclasses import asdict, dataclass, fields

from ..models import GENERIC, Preset, find_preset
from .experiment import is_npz, optimizer_settings, run_config


class UserError(Exception):
    """A mistake in how the command was called; reported in one line.

    ``every_rank``: under MPI, every rank raised it together (see
    :func:`tapegrad.train.run.on_rank_0`), so rank 0 reports it and all exit; any other is one
    rank's own and aborts the job."""

    def __init__(self, message: str, every_rank: bool = False):
        super().__init__(message)
        self.every_rank = every_rank


@dataclass(frozen=True)
class RunConfig:
    """Everything ``tapegrad train`` takes (None: the preset's value, or none)."""

    preset: str
    dataset: str | None = None
    epochs: int | None = None
    batch_size: int | None = None
    lr: float | None = None
    optimizer: str | None = None
    momentum: float | None = None
    weight_decay: float | None = None
    scheduler: str | None = None
    step_every: int | None = None
    gamma: float = 0.1
    seed: int = 0
    threads: int | None = None
    data_dir: str | None = None
    max_steps: int | None = None
    json: str | None = None
    csv: str | None = None
    plot: str | None = None
    save: str | None = None
    checkpoint_dir: str | None = None
    resume: bool = False
    eager: bool = False
    ranks: int | None = None
    rank_timeout: float | None = None
    oversubscribe: bool = False
    device: str | None = None
    # the command line after ``tapegrad train`` (resume hints, the folder lock's record, ranks)
    argv: tuple[str, ...] = ()

    @classmethod
    def from_namespace(cls, args) -> RunConfig:
        """The configuration an ``argparse`` namespace of ``tapegrad train`` holds."""
        given = vars(args)
        values = {f.name: given[f.name] for f in fields(cls) if f.name in given}
        return cls(**{**values, "argv": tuple(given.get("argv", ()))})

    def facts(self) -> dict:
        """The settings as plain values, in name order: what every rank must have been given."""
        out = {k: v for k, v in asdict(self).items() if k != "argv"}
        return dict(sorted({**out, "command": "train"}.items()))

    def find_preset(self) -> Preset:
        try:
            return find_preset(self.preset)
        except ValueError as e:
            raise UserError(str(e)) from None

    def check(self, preset: Preset) -> str:
        """Everything that can be checked before data loads; the dataset to train on."""
        dataset = self.dataset or preset.dataset
        if preset.name in GENERIC and not is_npz(dataset):
            raise UserError(
                f"{preset.name} trains on your own data: pass --dataset path/to/data.npz"
            )
        if is_npz(dataset):
            if not os.path.lexists(dataset):
                raise UserError(f"--dataset {dataset}: no such file")
            if self.data_dir:
                raise UserError(
                    "--data-dir names where named datasets are; a .npz is read from its path"
                )
        elif dataset not in preset.datasets:
            raise UserError(
                f"preset {preset.name} trains on {' or '.join(preset.datasets)}, not {dataset!r}"
            )
        self._check_optimizer(preset)
        if self.resume and not self.checkpoint_dir:
            raise UserError("--resume needs --checkpoint-dir (where the checkpoints are)")
        if self.data_dir and not os.path.isdir(os.path.expanduser(self.data_dir)):
            state = "is not a folder" if os.path.exists(self.data_dir) else "does not exist"
            raise UserError(f"--data-dir {self.data_dir} {state}")
        if self.threads is not None and self.threads > (os.cpu_count() or 1):
            raise UserError(f"--threads {self.threads}: this machine has {os.cpu_count()} CPUs")
        return dataset

    def _check_optimizer(self, preset: Preset) -> None:
        optimizer = self.optimizer or preset.optimizer
        if self.momentum and optimizer not in ("sgd", "rmsprop"):
            raise UserError(
                f"--momentum applies to sgd and rmsprop; {optimizer} (the "
                f"{'chosen' if self.optimizer else preset.name + ' default'}) has none"
            )
        if self.momentum is not None and self.momentum >= 1:
            raise UserError(
                f"--momentum {self.momentum:g}: momentum must be below 1 (0.9 is usual); at 1 "
                f"or more every update grows without bound"
            )
        if self.step_every is not None and self.scheduler != "step":
            raise UserError(
                "--step-every sets the step schedule's decay interval: add --scheduler step"
                + (f" (the {self.scheduler} schedule has none)" if self.scheduler else "")
            )

    def scheduler_spec(self, epochs: int) -> dict | None:
        if self.scheduler is None:
            return None
        if self.scheduler == "step":
            return {"name": "step", "every": self.step_every or 1, "gamma": self.gamma}
        return {"name": self.scheduler, "epochs": epochs}

    def settings(self, preset: Preset, dataset: str, epochs: int, **known) -> dict:
        """What a checkpoint records of this run and a resume must match (see
        :func:`tapegrad.train.experiment.run_config`)."""
        optimizer, momentum, weight_decay = optimizer_settings(
            preset, self.optimizer, self.momentum, self.weight_decay
        )
        return run_config(
            preset.name,
            dataset,
            optimizer=optimizer,
            lr=self.lr or preset.lr,
            momentum=momentum,
            weight_decay=weight_decay,
            scheduler=self.scheduler_spec(epochs),
            batch_size=self.batch_size or preset.batch_size,
            seed=self.seed,
            **known,
        )

    def command(self) -> str:
        """The command line that started this run."""
        return shlex.join(["tapegrad", "train", *self.argv])

    def resume_command(self, ranks: int = 1) -> str:
        argv = ["tapegrad", "train", *self.argv]
        if "--resume" not in argv:
            argv.append("--resume")
        if ranks > 1 and not any(a == "--ranks" or a.startswith("--ranks=") for a in argv):
            argv += ["--ranks", str(ranks)]  # a rank's argv lacks what the launcher consumed
        return shlex.join(argv)
