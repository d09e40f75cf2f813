"""A ``tapegrad train`` run from its :class:`~tapegrad.train.config.RunConfig`.

:func:`run` does the whole run: launch the ranks (``--ranks N``, see ``ranks.py``), check the
outputs and the checkpoint folder and lock it (rank 0, before any data loads), build the
experiment, fit (resuming where asked), and report: the settings line, an interrupted run's
resume command, the outputs. It returns the command's exit status; mistakes raise
:class:`~tapegrad.train.config.UserError` (and the errors of data, checkpoints and outputs).
"""

from __future__ import annotations

import importlib.metadata
import json
import platform
import signal
import sys

import numpy as np

from ..autodiff.backend import DeviceError, get_device
from ..distributed import agree
from .checkpoint import config_differences, find_latest, list_checkpoints, load_latest
from .config import RunConfig, UserError
from .dirlock import FolderLock
from .experiment import make_scheduler, setup
from .outputs import check_outputs, write_outputs
from .ranks import launch_ranks, on_rank_0, threads, world
from .trainer import Trainer, TrainingInterrupted, stop_on_signals

EXIT_OUTPUT = 5


def run(config: RunConfig) -> int:
    """Train as ``config`` says; the exit status: 0, :data:`EXIT_OUTPUT` for an output or
    checkpoint not written, 128 + the signal for a run stopped by SIGINT or SIGTERM."""
    launched = launch_ranks(config)
    if launched is not None:
        return launched
    held: list = []  # the checkpoint folder's lock, once taken
    try:
        return _run(config, held)
    finally:
        while held:
            held.pop().release()


def _run(config: RunConfig, held: list) -> int:

    preset = config.find_preset()
    dataset = config.check(preset)
    files = {"--save": config.save, "--json": config.json, "--csv": config.csv}
    files["--plot"] = config.plot
    epochs = config.epochs or preset.epochs
    comm = world()
    say = print if comm.rank == 0 else _quiet  # rank 0 alone reports and writes
    if comm.distributed:
        agree(comm, {**config.facts(), "tapegrad version": versions()["tapegrad"]})

    def lock() -> None:
        if config.checkpoint_dir:
            folder = FolderLock(config.checkpoint_dir, config.command(), notice=note)
            held.append(folder.acquire())

    # rank 0 alone writes the outputs and reads the checkpoints: it checks them before data loads
    on_rank_0(comm, lambda: check_outputs(files, config.checkpoint_dir))
    on_rank_0(comm, lock)
    settings = config.settings(preset, dataset, epochs)
    on_rank_0(comm, lambda: check_checkpoints(config, settings))
    set_threads(config.threads)
    device = device_for(config.device, comm)
    try:
        exp = setup(
            preset,
            dataset,
            config.data_dir,
            seed=config.seed,
            lr=config.lr,
            optimizer=config.optimizer,
            momentum=config.momentum,
            weight_decay=config.weight_decay,
            log=say,
        )
    except ValueError as e:
        raise UserError(str(e).splitlines()[0]) from None
    return _fit(config, comm, exp, epochs, device, say)


def _fit(config: RunConfig, comm, exp, epochs: int, device, say) -> int:
    """Train the experiment; report an interrupted run or write the outputs."""

    n_train = len(exp.data.train)
    asked = config.batch_size or exp.preset.batch_size
    batch_size = min(asked, n_train)
    steps_per_epoch = -(-n_train // batch_size)
    spec = config.scheduler_spec(epochs)
    known = {"task": exp.task, "data": exp.fingerprint, "model": exp.config}
    say(_describe(config, comm, exp, epochs, asked, batch_size, spec, device))
    trainer = Trainer(
        exp.model,
        exp.optimizer,
        exp.task,
        seed=config.seed,
        mode="eager" if config.eager else "compiled",
        distributed=comm,
        scheduler=make_scheduler(spec, exp.optimizer, steps_per_epoch),
        config=config.settings(exp.preset, exp.dataset, epochs, **known),
        warn=lambda m: note(f"warning: {m}"),
        device=device,
    )
    try:
        with stop_on_signals(trainer):
            records = trainer.fit(
                exp.data.train,
                exp.data.test,
                epochs=epochs,
                batch_size=batch_size,
                max_steps=config.max_steps,
                checkpoint_dir=config.checkpoint_dir,
                resume=config.resume,
            )
    except TrainingInterrupted as e:
        return _interrupted(config, comm, e, steps_per_epoch)
    info = {
        "preset": exp.preset.name,
        "dataset": exp.dataset,
        "task": exp.task,
        "optimizer": exp.optimizer_name,
        "lr": exp.lr,
        "momentum": exp.momentum,
        "weight_decay": exp.weight_decay,
        "evaluated_on": "validation" if exp.task == "language-model" else "test",
        "scheduler": spec,
        "batch_size": batch_size,
        "batch_size_asked": asked,
        "epochs": epochs,
        "seed": config.seed,
        "max_steps": config.max_steps,
        "parameters": _n_params(exp),
        "global_steps": trainer.global_step,
        "mode": trainer.mode,
        "threads": config.threads,
        "ranks": comm.size,
        "threads_per_rank": threads(),
        "data_fingerprint": exp.fingerprint,
        "command": config.command(),
        "versions": versions(),
    }
    if comm.rank != 0:
        return 0
    return _write_outputs(config, exp, records, info, trainer)


def _n_params(exp) -> int:
    return int(sum(p.data.size for p in exp.model.parameters()))


def _describe(config: RunConfig, comm, exp, epochs, asked, batch_size, spec, device) -> str:
    """The line that opens a run: data, model size, optimiser, batch, epochs, where it runs."""
    preset, ds = exp.preset, exp.data
    n_train = len(ds.train)
    extras = ""
    if exp.momentum:
        extras += f", momentum {exp.momentum:g}"
    if exp.weight_decay:
        extras += f", weight decay {exp.weight_decay:g}"
    if spec is not None:
        extras += f", {describe_schedule(spec)}"
    batch = f"batch {batch_size}"
    if batch_size != asked:
        batch += f" (the whole training set; {asked} asked)"
    task = "" if exp.task == preset.task else f" ({exp.task})"
    n = threads()
    ranks = f", {comm.size} ranks x {n} thread{'s' if n > 1 else ''}" if comm.distributed else ""
    on = f", on {device.name}" if device is not None else ""
    if exp.task == "language-model":
        sizes = (
            f"{n_train} windows of {ds.train.context} characters an epoch / "
            f"{len(ds.test.y)} validation windows"
        )
    else:
        sizes = f"{n_train} train / {len(ds.test.y)} test samples"
    return (
        f"{preset.name} on {exp.dataset}{task}: {sizes}, {_n_params(exp)} parameters, "
        f"{exp.optimizer_name} lr {exp.lr:g}{extras}, {batch}, {epochs} epochs, "
        f"seed {config.seed}{ranks}{on}"
    )


def _interrupted(config: RunConfig, comm, e, steps_per_epoch: int) -> int:
    """Say where a run stopped by a signal stopped and how to resume it; 128 + the signal."""
    if comm.rank != 0:  # every rank stopped after the same step; rank 0 reports
        return 128 + e.signum
    name = signal.Signals(e.signum).name
    where = f"epoch {e.epoch}, batch {e.batch} of {steps_per_epoch}"
    if e.checkpoint is None and config.checkpoint_dir:
        message = (
            f"stopped at {where}; the checkpoint could not be written (see above); the newest "
            f"one is {newest(config.checkpoint_dir)}. "
            f"Resume with: {config.resume_command(comm.size)}"
        )
    elif e.checkpoint is not None:
        message = (
            f"stopped at {where}; saved checkpoint {e.checkpoint}. "
            f"Resume with: {config.resume_command(comm.size)}"
        )
    else:
        message = (
            f"stopped at {where}; nothing saved (no --checkpoint-dir). Pass --checkpoint-dir "
            f"DIR to be able to resume"
        )
    print(f"tapegrad train: {name}: {message}", file=sys.stderr)
    return 128 + e.signum


def _write_outputs(config: RunConfig, exp, records, info: dict, trainer) -> int:
    """Rank 0 writes --json, --csv, --plot and --save; :data:`EXIT_OUTPUT` if one or a
    checkpoint could not be written (each named, the weights saved elsewhere)."""
    # looked up at the call: tests replace them to make an output fail
    from .. import serialization
    from . import plot, write_csv, write_json

    meta = {
        "preset": exp.preset.name,
        "dataset": exp.dataset,
        "task": exp.task,
        "seed": str(config.seed),
        "config": json.dumps(exp.config),
    }
    writers = []
    if config.json:
        writers.append(("--json", config.json, lambda p: write_json(p, records, info)))
    if config.csv:
        writers.append(("--csv", config.csv, lambda p: write_csv(p, records)))
    if config.plot:
        title = f"{exp.preset.name} on {exp.dataset}"
        writers.append(("--plot", config.plot, lambda p: plot(p, records, title=title)))
    if config.save:
        save = serialization.save_object
        writers.append(("--save", config.save, lambda p: save(exp.model, p, metadata=meta)))
    failed = write_outputs(
        writers,
        report=print,
        error=lambda m: print(f"tapegrad train: error: {m}", file=sys.stderr),
        fallback_dirs=[config.checkpoint_dir] if config.checkpoint_dir else [],
        fallback_name=f"{exp.preset.name}-weights",
    )
    failures = trainer.checkpoint_failures
    if failures:
        print(
            f"tapegrad train: error: {len(failures)} checkpoint(s) could not be written in "
            f"{config.checkpoint_dir} ({failures[-1]}); the newest there is "
            f"{newest(config.checkpoint_dir)}",
            file=sys.stderr,
        )
    return EXIT_OUTPUT if failed or failures else 0


def check_checkpoints(config: RunConfig, settings: dict) -> None:
    """Before data loads: a fresh run refuses a folder holding another run's checkpoints; a
    resume refuses damaged-only checkpoints and other settings."""
    folder = config.checkpoint_dir
    if not folder:
        return
    existing = list_checkpoints(folder)
    if not config.resume:
        if existing:
            raise UserError(
                f"--checkpoint-dir {folder} holds checkpoints of an earlier run (newest "
                f"{existing[-1].name}): add --resume to continue it, or choose another folder"
            )
        return
    found = find_latest(folder)  # CheckpointError: damaged ones only
    if found is None:
        return
    saved = found[2].get("config")
    if not isinstance(saved, dict):
        raise UserError(
            f"checkpoint {found[2]['path']} records no run configuration (written by an older "
            f"tapegrad), so a resume cannot check its settings; use another --checkpoint-dir"
        )
    later = ("data", "model", "task", "batch_size")  # compared once the data is loaded
    diffs = config_differences(saved, settings, skip=later)
    if saved.get("batch_size") != settings["batch_size"]:
        diffs.append(
            f"batch size {saved.get('batch_size')} (checkpoint) vs {settings['batch_size']} (now)"
        )
    if diffs:
        raise UserError(
            f"checkpoint {found[2]['path']} is from another run configuration: "
            f"{'; '.join(diffs)}. Resume with its settings, or use another --checkpoint-dir"
        )


def newest(directory) -> str:
    """The newest valid checkpoint in ``directory`` (what a resume would use), or 'none'."""
    found = load_latest(directory)
    return found[2]["path"] if found else "none"


def describe_schedule(spec: dict) -> str:
    if spec["name"] == "step":
        return f"lr x{spec['gamma']:g} every {spec['every']} epoch(s)"
    return f"{spec['name']} schedule over {spec['epochs']} epochs"


def note(message: str) -> None:
    """A line on stderr: ``tapegrad: message``."""
    print(f"tapegrad: {message}", file=sys.stderr)


def _quiet(*args, **kwargs) -> None:
    pass


def set_threads(n: int | None) -> None:
    """``--threads N``: numba's and the BLAS's threads."""
    if n is None:
        return
    import numba

    from ..blas import threads_setter

    numba.set_num_threads(min(n, numba.config.NUMBA_NUM_THREADS))
    blas = threads_setter()
    if blas is not None:
        blas[0](n)


def device_for(name, comm=None):
    """The device ``--device`` names (None: the CPU, as without the flag), checked before any
    data loads: a device this machine cannot serve ends in one line saying what to install."""
    if name is None or name == "cpu":
        return None
    if comm is not None and comm.distributed:
        raise UserError(f"--device {name}: data-parallel training (--ranks) runs on the CPU")
    try:
        return get_device(name)
    except DeviceError as e:
        raise UserError(f"--device {name}: {e}") from None


def versions() -> dict:
    """The versions a run records: tapegrad, Python, NumPy, numba (and PyTorch if installed)."""
    import numba

    from ..version import __version__

    out = {
        "tapegrad": __version__,
        "python": platform.python_version(),
        "numpy": np.__version__,
        "numba": numba.__version__,
    }
    try:  # the installed version, without importing PyTorch (seconds) into a training run
        out["torch"] = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        pass
    return out
