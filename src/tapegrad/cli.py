"""The ``tapegrad`` command: train | evaluate | info | bench.

User mistakes (unknown preset or option, a bad value, an output that cannot be written, missing
or corrupt data, a bad model file or checkpoint, a resume with other settings, a checkpoint
folder another run holds) end with a one-line message on stderr and exit status 2, never a
traceback; output targets are checked before any data loads. A diverged run exits with 3; a
benchmark whose frameworks disagree (different first-step losses or accuracies) with 4; a run
that trained but could not write an output or a checkpoint where asked with 5 (each failure
named, the weights saved elsewhere, the earlier checkpoint kept); a benchmark whose
self-check fails (a peer's worker more than 10% off that peer's plain training loop) with 6.
SIGINT and SIGTERM stop training after the current step, write a mid-epoch checkpoint (with
--checkpoint-dir) and print the command that resumes it; the exit status is then 130 or 143.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import math
import os
import platform
import shlex
import signal
import sys

import numpy as np

EXIT_USAGE, EXIT_DIVERGED, EXIT_MISMATCH, EXIT_OUTPUT = 2, 3, 4, 5
RANKS_HELP = (
    "train data-parallel on N MPI ranks (launches mpiexec; threads per rank = cores / N); "
    "needs tapegrad[mpi]; SIGINT/SIGTERM reach every rank, which stop after the same step "
    "(default: 1, this process alone)"
)


class UserError(Exception):
    """A mistake in how the command was called; reported in one line.

    ``every_rank``: under MPI, every rank raised it together (see :func:`_on_rank_0`), so rank
    0 reports it and all exit; any other is one rank's own and aborts the job."""

    def __init__(self, message: str, every_rank: bool = False):
        super().__init__(message)
        self.every_rank = every_rank


class _Terminated(Exception):
    """SIGTERM outside the training loop (which handles it itself)."""


def _preset(name):
    from .train.experiment import find_preset

    try:
        return find_preset(name)
    except ValueError as e:
        raise UserError(str(e)) from None


# -- ranks (tapegrad.distributed) ----------------------------------------------------------------
def _launch_ranks(args) -> int | None:
    """With ``--ranks N`` (N > 1) outside MPI: run this very command as N MPI ranks and return
    the job's exit status; None when this process should do the work itself."""
    from .distributed import launched_size

    ranks, under_mpi = args.ranks, launched_size()
    if ranks is None:
        return None
    if ranks < 1:
        raise UserError(f"--ranks must be at least 1, got {ranks}")
    if under_mpi > 1:
        if ranks != under_mpi:
            raise UserError(f"--ranks {ranks}, but mpiexec started {under_mpi} ranks")
        return None
    if ranks == 1:
        return None
    if args.device not in (None, "cpu"):
        raise UserError(f"--device {args.device}: data-parallel training (--ranks) runs on the CPU")
    if args.rank_timeout is not None and not args.rank_timeout > 0:
        raise UserError(
            f"--rank-timeout must be a positive number of seconds, got {args.rank_timeout}"
        )
    from .distributed.launch import DEFAULT_RANK_TIMEOUT, run_ranks

    cpus = _cpus()
    if ranks > cpus and not args.oversubscribe:
        print(
            f"tapegrad {args.command}: warning: --ranks {ranks} on {cpus} CPUs: ranks share "
            f"cores and run slower than {cpus} would (--oversubscribe to mean it)",
            file=sys.stderr,
            flush=True,
        )
    timeout = args.rank_timeout or DEFAULT_RANK_TIMEOUT
    return run_ranks(ranks, [args.command, *_without_ranks(args.argv)], args.command, timeout)


def _cpus() -> int:
    """CPUs this process may run on (its affinity, where the system tells it)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _without_ranks(argv: list[str]) -> list[str]:
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a == "--ranks":
            skip = True
        elif not a.startswith("--ranks="):
            out.append(a)
    return out


def _world():
    """The MPI world when this process is one of several ranks (else a single process)."""
    from .distributed import world
    from .distributed.launch import THREAD_VARIABLES, threads_per_rank

    comm = world()
    if comm.distributed and not any(v in os.environ for v in THREAD_VARIABLES):
        import numba  # started by a bare mpiexec: share the machine's cores between its ranks

        numba.set_num_threads(min(threads_per_rank(comm.local_size()), numba.get_num_threads()))
    return comm


def _threads() -> int:
    import numba

    return numba.get_num_threads()


def _on_rank_0(comm, check) -> None:
    """Run ``check()`` on rank 0 alone (it reads or writes files rank 0 alone uses); under MPI
    a mistake it finds is raised on every rank alike, in rank 0's words."""
    from .train.checkpoint import CheckpointError
    from .train.outputs import OutputError

    if not comm.distributed:
        check()
        return
    error = None
    if comm.rank == 0:
        try:
            check()
        except (UserError, CheckpointError, OutputError) as e:
            error = str(e)
    error = comm.bcast(error)
    if error is not None:
        raise UserError(error, every_rank=True)


def _say(message: str) -> None:
    print(f"tapegrad: {message}", file=sys.stderr)


# -- train ---------------------------------------------------------------------------------------
def _check_train_args(args, preset) -> str:
    """Everything about a train command that can be checked before data loads; the dataset."""
    from .train.experiment import GENERIC, is_npz

    dataset = args.dataset or preset.dataset
    if preset.name in GENERIC and not is_npz(dataset):
        raise UserError(f"{preset.name} trains on your own data: pass --dataset path/to/data.npz")
    if is_npz(dataset):
        if not os.path.lexists(dataset):
            raise UserError(f"--dataset {dataset}: no such file")
        if args.data_dir:
            raise UserError(
                "--data-dir names where named datasets are; a .npz is read from its path"
            )
    elif dataset not in preset.datasets:
        raise UserError(
            f"preset {preset.name} trains on {' or '.join(preset.datasets)}, not {dataset!r}"
        )
    optimizer = args.optimizer or preset.optimizer
    if args.momentum and optimizer not in ("sgd", "rmsprop"):
        raise UserError(
            f"--momentum applies to sgd and rmsprop; {optimizer} (the "
            f"{'chosen' if args.optimizer else preset.name + ' default'}) has none"
        )
    if args.momentum is not None and args.momentum >= 1:
        raise UserError(
            f"--momentum {args.momentum:g}: momentum must be below 1 (0.9 is usual); at 1 or "
            f"more every update grows without bound"
        )
    if args.step_every is not None and args.scheduler != "step":
        raise UserError(
            "--step-every sets the step schedule's decay interval: add --scheduler step"
            + (f" (the {args.scheduler} schedule has none)" if args.scheduler else "")
        )
    if args.resume and not args.checkpoint_dir:
        raise UserError("--resume needs --checkpoint-dir (where the checkpoints are)")
    if args.data_dir and not os.path.isdir(os.path.expanduser(args.data_dir)):
        state = "is not a folder" if os.path.exists(args.data_dir) else "does not exist"
        raise UserError(f"--data-dir {args.data_dir} {state}")
    if args.threads is not None and args.threads > (os.cpu_count() or 1):
        raise UserError(f"--threads {args.threads}: this machine has {os.cpu_count()} CPUs")
    return dataset


def _scheduler_spec(args, epochs: int) -> dict | None:
    if args.scheduler is None:
        return None
    if args.scheduler == "step":
        return {"name": "step", "every": args.step_every or 1, "gamma": args.gamma}
    return {"name": args.scheduler, "epochs": epochs}


def _settings(args, preset, dataset: str, epochs: int, **known) -> dict:
    from .train.experiment import optimizer_settings, run_config

    optimizer, momentum, weight_decay = optimizer_settings(
        preset, args.optimizer, args.momentum, args.weight_decay
    )
    return run_config(
        preset.name,
        dataset,
        optimizer=optimizer,
        lr=args.lr or preset.lr,
        momentum=momentum,
        weight_decay=weight_decay,
        scheduler=_scheduler_spec(args, epochs),
        batch_size=args.batch_size or preset.batch_size,
        seed=args.seed,
        **known,
    )


def _check_checkpoints(args, settings: dict) -> None:
    """Before data loads: a fresh run refuses a folder holding another run's checkpoints; a
    resume refuses damaged-only checkpoints and other settings."""
    from .train.checkpoint import config_differences, find_latest, list_checkpoints

    if not args.checkpoint_dir:
        return
    existing = list_checkpoints(args.checkpoint_dir)
    if not args.resume:
        if existing:
            raise UserError(
                f"--checkpoint-dir {args.checkpoint_dir} holds checkpoints of an earlier run "
                f"(newest {existing[-1].name}): add --resume to continue it, or choose another "
                f"folder"
            )
        return
    found = find_latest(args.checkpoint_dir)  # CheckpointError: damaged ones only
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


_held_locks: list = []  # the checkpoint folder this process owns (see _lock_checkpoints)


def _lock_checkpoints(args) -> None:
    """Own ``--checkpoint-dir`` for this run: a second run on it refuses naming this one; a
    lock left by a run that died is taken over with a notice (see tapegrad.train.dirlock)."""
    from .train.dirlock import FolderLock

    if args.checkpoint_dir:
        command = shlex.join(["tapegrad", "train", *args.argv])
        _held_locks.append(FolderLock(args.checkpoint_dir, command, notice=_say).acquire())


def _release_locks() -> None:
    while _held_locks:
        _held_locks.pop().release()


def _set_threads(n: int | None) -> None:
    if n is None:
        return
    import numba

    from .blas import threads_setter

    numba.set_num_threads(min(n, numba.config.NUMBA_NUM_THREADS))
    blas = threads_setter()
    if blas is not None:
        blas[0](n)


def _resume_command(args, ranks: int = 1) -> str:
    argv = ["tapegrad", "train", *args.argv]
    if "--resume" not in argv:
        argv.append("--resume")
    if ranks > 1 and not any(a == "--ranks" or a.startswith("--ranks=") for a in argv):
        argv += ["--ranks", str(ranks)]  # a rank's argv lacks what the launcher consumed
    return shlex.join(argv)


def cmd_train(args) -> int:
    from . import save
    from .train import Trainer, plot, write_csv, write_json
    from .train.experiment import make_scheduler, setup
    from .train.outputs import check_outputs, write_outputs
    from .train.trainer import TrainingInterrupted, stop_on_signals

    launched = _launch_ranks(args)
    if launched is not None:
        return launched
    preset = _preset(args.preset)
    dataset = _check_train_args(args, preset)
    files = {"--save": args.save, "--json": args.json, "--csv": args.csv, "--plot": args.plot}
    epochs = args.epochs or preset.epochs
    comm = _world()
    say = print if comm.rank == 0 else _quiet  # rank 0 alone reports and writes
    if comm.distributed:
        from .distributed import agree

        agree(comm, {**vars_of(args), "tapegrad version": versions()["tapegrad"]})
    # rank 0 alone writes the outputs and reads the checkpoints: it checks them before data loads
    _on_rank_0(comm, lambda: check_outputs(files, args.checkpoint_dir))
    _on_rank_0(comm, lambda: _lock_checkpoints(args))
    _on_rank_0(comm, lambda: _check_checkpoints(args, _settings(args, preset, dataset, epochs)))
    _set_threads(args.threads)
    device = _device(args.device, comm)

    try:
        exp = setup(
            preset,
            dataset,
            args.data_dir,
            seed=args.seed,
            lr=args.lr,
            optimizer=args.optimizer,
            momentum=args.momentum,
            weight_decay=args.weight_decay,
            log=say,
        )
    except ValueError as e:
        raise UserError(str(e).splitlines()[0]) from None
    ds, model = exp.data, exp.model
    n_train = len(ds.train)
    asked = args.batch_size or preset.batch_size
    batch_size = min(asked, n_train)
    steps_per_epoch = -(-n_train // batch_size)
    spec = _scheduler_spec(args, epochs)
    config = _settings(
        args, preset, dataset, epochs, task=exp.task, data=exp.fingerprint, model=exp.config
    )
    n_params = sum(p.data.size for p in model.parameters())
    extras = ""
    if exp.momentum:
        extras += f", momentum {exp.momentum:g}"
    if exp.weight_decay:
        extras += f", weight decay {exp.weight_decay:g}"
    if spec is not None:
        extras += f", {_describe_schedule(spec)}"
    batch = f"batch {batch_size}"
    if batch_size != asked:
        batch += f" (the whole training set; {asked} asked)"
    task = "" if exp.task == preset.task else f" ({exp.task})"
    n = _threads()
    ranks = f", {comm.size} ranks x {n} thread{'s' if n > 1 else ''}" if comm.distributed else ""
    on = f", on {device.name}" if device is not None else ""
    if exp.task == "language-model":
        sizes = (
            f"{n_train} windows of {ds.train.context} characters an epoch / "
            f"{len(ds.test.y)} validation windows"
        )
    else:
        sizes = f"{n_train} train / {len(ds.test.y)} test samples"
    say(
        f"{preset.name} on {exp.dataset}{task}: {sizes}, {n_params} parameters, "
        f"{exp.optimizer_name} lr {exp.lr:g}{extras}, {batch}, {epochs} epochs, "
        f"seed {args.seed}{ranks}{on}"
    )
    trainer = Trainer(
        model,
        exp.optimizer,
        exp.task,
        seed=args.seed,
        mode="eager" if args.eager else "compiled",
        distributed=comm,
        scheduler=make_scheduler(spec, exp.optimizer, steps_per_epoch),
        config=config,
        warn=lambda m: _say(f"warning: {m}"),
        device=device,
    )
    try:
        with stop_on_signals(trainer):
            records = trainer.fit(
                ds.train,
                ds.test,
                epochs=epochs,
                batch_size=batch_size,
                max_steps=args.max_steps,
                checkpoint_dir=args.checkpoint_dir,
                resume=args.resume,
            )
    except TrainingInterrupted as e:
        if comm.rank != 0:  # every rank stopped after the same step; rank 0 reports
            return 128 + e.signum
        name = signal.Signals(e.signum).name
        where = f"epoch {e.epoch}, batch {e.batch} of {steps_per_epoch}"
        if e.checkpoint is None and args.checkpoint_dir:
            print(
                f"tapegrad train: {name}: stopped at {where}; the checkpoint could not be "
                f"written (see above); the newest one is {_newest(args.checkpoint_dir)}. "
                f"Resume with: {_resume_command(args, comm.size)}",
                file=sys.stderr,
            )
        elif e.checkpoint is not None:
            print(
                f"tapegrad train: {name}: stopped at {where}; saved checkpoint {e.checkpoint}. "
                f"Resume with: {_resume_command(args, comm.size)}",
                file=sys.stderr,
            )
        else:
            print(
                f"tapegrad train: {name}: stopped at {where}; nothing saved (no "
                f"--checkpoint-dir). Pass --checkpoint-dir DIR to be able to resume",
                file=sys.stderr,
            )
        return 128 + e.signum

    info = {
        "preset": preset.name,
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
        "seed": args.seed,
        "max_steps": args.max_steps,
        "parameters": int(n_params),
        "global_steps": trainer.global_step,
        "mode": trainer.mode,
        "threads": args.threads,
        "ranks": comm.size,
        "threads_per_rank": _threads(),
        "data_fingerprint": exp.fingerprint,
        "command": shlex.join(["tapegrad", "train", *args.argv]),
        "versions": versions(),
    }
    if comm.rank != 0:
        return 0
    meta = {
        "preset": preset.name,
        "dataset": exp.dataset,
        "task": exp.task,
        "seed": str(args.seed),
        "config": json.dumps(exp.config),
    }
    writers = []
    if args.json:
        writers.append(("--json", args.json, lambda p: write_json(p, records, info)))
    if args.csv:
        writers.append(("--csv", args.csv, lambda p: write_csv(p, records)))
    if args.plot:
        title = f"{preset.name} on {exp.dataset}"
        writers.append(("--plot", args.plot, lambda p: plot(p, records, title=title)))
    if args.save:
        writers.append(("--save", args.save, lambda p: save(model, p, metadata=meta)))
    failed = write_outputs(
        writers,
        report=print,
        error=lambda m: print(f"tapegrad train: error: {m}", file=sys.stderr),
        fallback_dirs=[args.checkpoint_dir] if args.checkpoint_dir else [],
        fallback_name=f"{preset.name}-weights",
    )
    failures = trainer.checkpoint_failures
    if failures:
        print(
            f"tapegrad train: error: {len(failures)} checkpoint(s) could not be written in "
            f"{args.checkpoint_dir} ({failures[-1]}); the newest there is "
            f"{_newest(args.checkpoint_dir)}",
            file=sys.stderr,
        )
    return EXIT_OUTPUT if failed or trainer.checkpoint_failures else 0


def _newest(directory) -> str:
    """The newest valid checkpoint in ``directory`` (what a resume would use), or 'none'."""
    from .train.checkpoint import load_latest

    found = load_latest(directory)
    return found[2]["path"] if found else "none"


def _describe_schedule(spec: dict) -> str:
    if spec["name"] == "step":
        return f"lr x{spec['gamma']:g} every {spec['every']} epoch(s)"
    return f"{spec['name']} schedule over {spec['epochs']} epochs"


# -- evaluate ------------------------------------------------------------------------------------
def _json_field(path, meta: dict, key: str, kind=dict):
    """``meta[key]`` decoded from JSON; a one-line error naming the file if malformed."""
    raw = meta.get(key)
    if raw is None:
        return None
    try:
        value = json.loads(raw)
    except (json.JSONDecodeError, RecursionError):
        raise UserError(f"{path}: metadata {key!r} is not valid JSON") from None
    if not isinstance(value, kind):
        raise UserError(f"{path}: metadata {key!r} is a JSON {type(value).__name__}, not an object")
    return value


def _read_model_file(path: str, plain: bool = False) -> tuple[dict, dict]:
    """(weights, description: preset, dataset, task, config, kind) of a file written by
    ``train --save`` or a checkpoint; with ``plain``, also of a safetensors file written by
    another program (no tapegrad checksum or metadata: the caller names the preset)."""
    from .serialization import ModelFileError, read_file
    from .train.checkpoint import meta_problem

    if not os.path.lexists(path):
        raise UserError(f"{path}: no such file")
    try:
        arrays, meta, kind = read_file(path, checksum=not plain)
    except ModelFileError as e:
        if "has no tapegrad checksum" not in str(e):
            raise
        raise UserError(f"{e}; pass --preset NAME to evaluate such a file unverified") from None
    if kind == "plain":
        _say(f"note: {path} has no tapegrad checksum (written by another program): read unverified")
        desc = {"preset": None, "dataset": None, "task": None, "config": {}, "kind": "weights"}
        return arrays, desc
    if kind == "arrays":
        ckpt = _json_field(path, meta, "meta") or {}
        run = ckpt.get("config")
        if "global_step" not in ckpt or not isinstance(run, dict):
            raise UserError(
                f"{path} is not a tapegrad checkpoint with a run configuration (nor a model "
                f"file from 'tapegrad train --save')"
            )
        problem = meta_problem(ckpt)
        if problem is not None:
            raise UserError(f"{path}: a checkpoint whose metadata {problem}")
        weights = {k[6:]: v for k, v in arrays.items() if k.startswith("model/")}
        model = run.get("model", {})
        if not isinstance(model, dict):
            raise UserError(f"{path}: the checkpoint's model settings are not an object")
        desc = {
            "preset": run.get("preset"),
            "dataset": run.get("dataset"),
            "task": run.get("task"),
            "config": model,
            "kind": f"checkpoint (global step {ckpt['global_step']})",
        }
        return _checked_settings(path, weights, desc)
    desc = {
        "preset": meta.get("preset"),
        "dataset": meta.get("dataset"),
        "task": meta.get("task"),
        "config": _json_field(path, meta, "config") or {},
        "kind": "weights",
    }
    return _checked_settings(path, arrays, desc)


def _checked_settings(path: str, weights: dict, desc: dict) -> tuple[dict, dict]:
    """(weights, desc) once the settings a file records are of the types and sizes a model
    can be built from."""
    from .train.experiment import config_problem
    from .train.trainer import TASKS

    for key in ("preset", "dataset", "task"):
        if desc[key] is not None and not isinstance(desc[key], str):
            raise UserError(f"{path}: its metadata's {key} is not a name")
    if desc["task"] is not None and desc["task"] not in TASKS:
        raise UserError(
            f"{path}: its metadata's task {desc['task']!r} is none of {', '.join(TASKS)}"
        )
    problem = config_problem(desc["config"])
    if problem is not None:
        raise UserError(f"{path}: {problem}")
    return weights, desc


def _fitting_presets(weights: dict, config: dict) -> list[str]:
    """The presets whose model (with ``config``'s shapes, else the defaults) these weights fit."""
    from .models import PRESETS, build_model
    from .train.trainer import _state_problems

    fits = []
    for name, p in PRESETS.items():
        kw = {"vocab_size": 5000, "maxlen": 130, **p.extra, **config}
        try:
            model = build_model(p, seed=0, **kw)
        except Exception:  # a config meant for another architecture
            continue
        if not _state_problems(model, weights):
            fits.append(name)
    return fits


DEVICE_HELP = (
    "cpu or cuda (a GPU through CuPy: pip install cupy-cuda12x or cupy-cuda13x, and numba-cuda; "
    "default: cpu)"
)


def _quiet(*args, **kwargs) -> None:
    pass


def _device(name, comm=None):
    """The device ``--device`` names (None: the CPU, as without the flag), checked before any
    data loads: a device this machine cannot serve ends in one line saying what to install."""
    if name is None or name == "cpu":
        return None
    from .autodiff.backend import DeviceError, get_device

    if comm is not None and comm.distributed:
        raise UserError(f"--device {name}: data-parallel training (--ranks) runs on the CPU")
    try:
        return get_device(name)
    except DeviceError as e:
        raise UserError(f"--device {name}: {e}") from None


def vars_of(args) -> dict:
    """The parsed command line as plain values (what every rank must have been given)."""
    return {k: v for k, v in sorted(vars(args).items()) if k not in ("func", "argv")}


def _check_data_fits(path: str, dataset: str, saved: dict, data: dict) -> None:
    """Refuse data the saved model cannot read (another width, sequence length, more classes
    or words than it has), before any evaluation."""
    words = {"inputs": "values per sample", "maxlen": "tokens per sample"}
    for key, have in data.items():
        want = saved.get(key)
        if want is None or want == have:
            continue
        if key in words:
            raise UserError(
                f"{path} takes {want} {words[key]}; {dataset}'s samples have {have}: "
                f"evaluate it on data shaped like its training data"
            )
        if have > want:  # classes, outputs, vocab_size: the data needs more than the model has
            raise UserError(
                f"{path} has {want} {key.replace('_', ' ')}; {dataset} needs {have}: these "
                f"weights were trained on other data"
            )


def _fit_without_data(preset, config: dict, weights: dict) -> bool:
    """Whether ``weights`` fit ``preset``'s model with the settings the file recorded alone
    (the model it was trained as), the data's shapes left out."""
    from .models import build_model
    from .train.trainer import _state_problems

    try:
        model = build_model(preset, seed=0, **{**preset.extra, **config})
    except Exception:  # settings meant for another architecture
        return False
    return not _state_problems(model, weights)


def cmd_evaluate(args) -> int:
    from .models import build_model
    from .train import Trainer
    from .train.experiment import fit_features, is_npz, load_dataset, load_npz, shape_for_data
    from .train.trainer import _state_problems

    path = args.model_file
    device = _device(args.device)
    weights, desc = _read_model_file(path, plain=args.preset is not None)
    name = desc["preset"]
    if name is None and args.preset is None:
        fits = _fitting_presets(weights, desc["config"])
        hint = f"; its weights fit preset {' or '.join(fits)}" if fits else ""
        raise UserError(
            f"{path} names no preset in its metadata (not written by 'tapegrad train --save')"
            f"{hint}: pass --preset NAME"
        )
    if name is not None and args.preset is not None and args.preset != name:
        raise UserError(f"{path} holds {desc['kind']} of preset {name}, not {args.preset}")
    preset = _preset(name or args.preset)
    dataset = args.dataset or desc["dataset"] or preset.dataset
    config, task = dict(desc["config"]), desc["task"] or preset.task
    if is_npz(dataset):
        if not os.path.lexists(dataset):
            base = os.path.basename(dataset)
            raise UserError(f"{path} was trained on {dataset}: pass --dataset path/to/{base}")
        ds = load_npz(dataset)
        task, shaped = shape_for_data(preset, ds)
        _check_data_fits(path, dataset, config, shaped)
        config = {**shaped, **config}
        fit_features(preset, ds)
    elif dataset not in preset.datasets:
        raise UserError(
            f"{path} holds a {preset.name} model, which takes "
            f"{' or '.join(preset.datasets)}, not {dataset!r}"
        )
    try:
        model = build_model(preset, seed=0, **{**preset.extra, **config})
    except TypeError as e:
        raise UserError(
            f"{path}: its model settings do not fit preset {preset.name} ({e})"
        ) from None
    problems = _state_problems(model, weights)
    if problems and is_npz(dataset) and _fit_without_data(preset, desc["config"], weights):
        raise UserError(
            f"{path} holds {preset.name} weights for data of another shape than {dataset}'s "
            f"(samples {list(ds.test.x.shape[1:])}, {task}): evaluate it on data shaped like "
            f"its training data"
        )
    if problems:  # checked before any data loads
        fits = [f for f in _fitting_presets(weights, desc["config"]) if f != preset.name]
        owner = f"they are weights of preset {' or '.join(fits)}" if fits else "they fit no preset"
        raise UserError(f"{path}: not {preset.name} weights ({problems}); {owner}")
    if not is_npz(dataset):
        ds, _ = load_dataset(dataset, args.data_dir, **{**preset.extra, **config})
        features = int(np.prod(ds.test.x.shape[1:]))
        _check_data_fits(path, dataset, config, {"inputs": features})
    model.load_state_dict(weights)
    trainer = Trainer(model, optimizer=None, task=task, log=None, device=device)
    loss, acc = trainer.evaluate(ds.test.x, ds.test.y)
    shown = os.path.basename(dataset) if is_npz(dataset) else dataset
    if task == "language-model":
        print(
            f"{preset.name} on {shown} validation set ({len(ds.test.y)} windows): "
            f"loss {loss:.4f} nats per character"
        )
        return 0
    score = f"MSE {loss:.4f}" if acc is None else f"loss {loss:.4f}, accuracy {100 * acc:.2f}%"
    print(f"{preset.name} on {shown} test set ({len(ds.test.y)} samples): {score}")
    return 0


def versions() -> dict:
    import numba

    from . import __version__

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


def cmd_info(args) -> int:
    from . import data

    for k, v in versions().items():
        print(f"{k:<10} {v}")
    try:
        import numba

        threads = numba.get_num_threads()
    except Exception:  # pragma: no cover - numba always importable here
        threads = "?"
    print(f"{'cpus':<10} {os.cpu_count()} (numba threads {threads})")
    print(f"{'machine':<10} {platform.machine()} {platform.system()}")
    from .blas import describe as describe_blas

    print(f"{'blas':<10} {describe_blas()}")
    print(f"{'cuda':<10} {_cuda_status()}")
    print("datasets:")
    for name, where in data.describe(args.data_dir).items():
        print(f"  {name:<14} {where if where else 'not found'}")
    return 0


def _cuda_status() -> str:
    """``--device cuda``'s status here: the GPU it would use, or why it cannot."""
    from .cuda import unavailable_reason

    reason = unavailable_reason()
    if reason is not None:
        return f"not available: {reason}"
    import cupy

    props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
    return f"{props['name'].decode()} (CuPy {cupy.__version__})"


def cmd_bench(args) -> int:
    """Run a seed workload (or the micro-benchmarks) with tapegrad and its peers side by side."""
    if args.workload == "micro":
        return _bench_micro(args)
    if args.ranks is not None:
        return _bench_ranks(args)
    from .bench import BenchError, format_table, run_benchmarks
    from .bench.harness import parse_threads
    from .bench.selfcheck import EXIT_SELF_CHECK

    peers = _split(args.vs, "torch,jax")
    try:
        combined = run_benchmarks(
            args.workload,
            peers,
            threads=parse_threads(args.threads),
            epochs=args.epochs,
            steps=args.steps,
            repeats=3 if args.repeats is None else args.repeats,
            data_dir=args.data_dir,
            seed=args.seed,
            mode=args.mode,
            batch_size=args.batch_size,
            width=args.width,
            self_check=not args.no_self_check,
            allocator=args.allocator,
            perturb_peer=args.perturb_peer,
        )
    except BenchError as e:
        raise UserError(str(e)) from None
    command = "tapegrad bench " + " ".join(args.argv)
    results = combined["results"]
    for result in results:
        result["command"] = command
        print(format_table(result) + "\n")
    if args.json:  # one thread setting: its result alone; several: all of them
        _write_json(
            args.json, results[0] if len(results) == 1 else {**combined, "command": command}
        )
    status = 0
    for result in results:
        for failure in result["self_check"]["failures"]:
            print(f"tapegrad bench: {failure}", file=sys.stderr)
            status = EXIT_SELF_CHECK
    for result in results:
        for failure in result["guard"]["failures"]:
            print(f"tapegrad bench: frameworks disagree: {failure}", file=sys.stderr)
            status = EXIT_MISMATCH
    return status


def _bench_ranks(args) -> int:
    """``bench WORKLOAD --ranks N``: N ranks x cores/N threads against one process."""
    from .bench.scaling import ScalingError, markdown, measure

    if args.ranks < 2:
        raise UserError(f"bench --ranks compares N >= 2 ranks with one process, got {args.ranks}")
    try:
        result = measure(
            [args.workload],
            ranks=args.ranks,
            repeats=3 if args.repeats is None else args.repeats,
            epochs=args.epochs,
            max_steps=args.steps,
            seed=args.seed,
            data_dir=args.data_dir,
        )
    except ScalingError as e:
        raise UserError(str(e)) from None
    result["command"] = "tapegrad bench " + " ".join(args.argv)
    print(markdown(result))
    if args.json:
        _write_json(args.json, result)
    return 0


def _split(value: str | None, default: str) -> list[str]:
    return [v.strip() for v in (value or default).split(",") if v.strip()]


def _write_json(path: str, result: dict) -> None:
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    from .serialization import atomic_file

    with atomic_file(path) as f:
        f.write((json.dumps(result, indent=1) + "\n").encode())
    print(f"wrote {path}")


def _micro_threads(text: str | None) -> int:
    """``bench micro --threads N``: one setting (default 1); ``all`` is every usable CPU."""
    from .bench.harness import BenchError, parse_threads

    try:
        settings = parse_threads(text or "1")
    except BenchError as e:
        raise UserError(str(e)) from None
    if len(settings) != 1:
        raise UserError(f"bench micro runs one thread setting at a time, got --threads {text}")
    return settings[0]


def _bench_micro(args) -> int:
    try:
        from .bench import micro
    except ImportError as e:
        raise UserError(f"the micro-benchmarks are not available in this build ({e})") from None
    frameworks = ["tapegrad", "tapegrad-compiled", *_split(args.vs, "torch,jax,autograd")]
    try:
        result = micro.run(
            frameworks,
            repeats=7 if args.repeats is None else args.repeats,
            quick=args.quick,
            threads=_micro_threads(args.threads),
        )
    except ValueError as e:
        raise UserError(str(e)) from None
    result["command"] = "tapegrad bench " + " ".join(args.argv)
    print(micro.markdown(result))
    if args.json:
        _write_json(args.json, result)
    return 0


# -- parser --------------------------------------------------------------------------------------
class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors (no usage block) naming the command and the problem."""

    def error(self, message: str):
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _number(kind: str):
    def parse(text: str):
        try:
            v = int(text) if kind.endswith("int") else float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        if not math.isfinite(v):
            raise argparse.ArgumentTypeError(f"must be finite, got {text}")
        if kind.startswith("positive") and v <= 0:
            raise argparse.ArgumentTypeError(f"must be positive, got {text}")
        if kind.startswith("nonnegative") and v < 0:
            raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
        return v

    parse.__name__ = kind
    return parse


_POS_INT, _POS_FLOAT, _NONNEG_FLOAT, _NONNEG_INT = (
    _number("positive int"),
    _number("positive float"),
    _number("nonnegative float"),
    _number("nonnegative int"),
)


def _presets_epilog() -> str:
    from .models import PRESETS
    from .train.experiment import GENERIC

    lines = ["presets and their defaults (each flag left out takes the preset's value):"]
    for p in [*PRESETS.values(), *GENERIC.values()]:
        data = "your .npz" if p.datasets == ("npz",) else "/".join(p.datasets)
        lines.append(
            f"  {p.name:<17} {data:<20} {p.optimizer:<5} lr {p.lr:<7g} batch {p.batch_size:<4} "
            f"{p.epochs} epochs"
        )
    lines += [
        "",
        "--dataset also takes a .npz file with arrays x_train, y_train, x_test, y_test: integer",
        "labels train a classifier, float targets a regression (mean squared error); the",
        "preset's architecture (or 'linear') is shaped to the data.",
    ]
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    from . import __version__
    from .models import PRESETS
    from .train.experiment import GENERIC, OPTIMIZERS, SCHEDULERS

    p = _Parser(
        prog="tapegrad", description="Train and evaluate the seed papers' models with tapegrad."
    )
    p.add_argument("--version", action="version", version=f"tapegrad {__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="{train,evaluate,info,bench}")

    t = sub.add_parser(
        "train",
        help="train a preset and print its per-epoch table",
        description="Train PRESET and print one table row per epoch.",
        epilog=_presets_epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    t.add_argument(
        "preset", help=f"one of: {', '.join([*PRESETS, *GENERIC])} (defaults listed below)"
    )
    t.add_argument(
        "--dataset",
        metavar="{mnist,fashion-mnist,imdb,PATH.npz}",
        help="what to train on (default: the preset's first dataset)",
    )
    t.add_argument("--epochs", type=_POS_INT, help="passes over the data (default: the preset's)")
    t.add_argument(
        "--batch-size", type=_POS_INT, help="samples per optimiser step (default: the preset's)"
    )
    t.add_argument("--lr", type=_POS_FLOAT, help="learning rate (default: the preset's)")
    t.add_argument("--optimizer", choices=OPTIMIZERS, help="optimiser (default: the preset's)")
    t.add_argument(
        "--momentum",
        type=_NONNEG_FLOAT,
        help="sgd/rmsprop momentum (default: the preset's with its optimiser, else 0)",
    )
    t.add_argument(
        "--weight-decay",
        type=_NONNEG_FLOAT,
        help="L2 penalty (adamw: decoupled) (default: the preset's with its optimiser, else 0)",
    )
    t.add_argument(
        "--scheduler",
        choices=SCHEDULERS,
        help="learning-rate schedule, stepped every batch: step (x --gamma every --step-every "
        "epochs), cosine (to 0 over the run), onecycle (up to --lr, then down) (default: none)",
    )
    t.add_argument(
        "--step-every", type=_POS_INT, help="step schedule: epochs between decays (default: 1)"
    )
    t.add_argument(
        "--gamma", type=_POS_FLOAT, default=0.1, help="step schedule: decay factor (default: 0.1)"
    )
    t.add_argument(
        "--seed", type=_NONNEG_INT, default=0, help="weights and batch order (default: 0)"
    )
    t.add_argument("--threads", type=_POS_INT, help="numba and BLAS threads (default: all CPUs)")
    t.add_argument(
        "--data-dir",
        help="the only folder searched for the named datasets (default: $TAPEGRAD_DATA, "
        "then ~/.cache/tapegrad, then a checked download)",
    )
    t.add_argument(
        "--max-steps", type=_POS_INT, help="stop after this many optimiser steps (default: none)"
    )
    t.add_argument(
        "--json",
        metavar="PATH",
        help="write settings and per-epoch results as JSON (default: none)",
    )
    t.add_argument(
        "--csv", metavar="PATH", help="write the per-epoch records as CSV (default: none)"
    )
    t.add_argument(
        "--plot", metavar="PATH", help="plot loss, accuracy, time, memory to a PNG (default: none)"
    )
    t.add_argument(
        "--save", metavar="PATH", help="write the final weights, safetensors (default: none)"
    )
    t.add_argument(
        "--checkpoint-dir",
        metavar="DIR",
        help="save a checkpoint here after each epoch and when stopped by Ctrl-C/SIGTERM "
        "(default: none)",
    )
    t.add_argument(
        "--resume",
        action="store_true",
        help="continue from the newest valid checkpoint in --checkpoint-dir (fresh if none); "
        "refused if its settings differ (default: off)",
    )
    t.add_argument(
        "--eager",
        action="store_true",
        help="run every step eagerly instead of replaying a compiled plan, with the same "
        "results (default: off, compiled)",
    )
    t.add_argument("--ranks", type=int, help=RANKS_HELP)
    t.add_argument(
        "--rank-timeout",
        type=float,
        metavar="S",
        help="with --ranks: a rank silent this long (stopped, frozen) is named and the job "
        "ends, exit 124; the last checkpoint stays resumable (default: 60)",
    )
    t.add_argument(
        "--oversubscribe",
        action="store_true",
        help="with --ranks: more ranks than CPUs is meant (no warning) (default: off)",
    )
    t.add_argument("--device", help=DEVICE_HELP)
    t.set_defaults(func=cmd_train)

    e = sub.add_parser(
        "evaluate",
        help="evaluate weights from 'train --save' or a checkpoint on the test set",
        description="Evaluate MODEL_FILE (from 'train --save', or a checkpoint) on the test set.",
    )
    e.add_argument("model_file", help="a .safetensors file from 'train --save' or a checkpoint")
    e.add_argument(
        "--dataset",
        metavar="{mnist,fashion-mnist,imdb,PATH.npz}",
        help="test set to use (default: the one the file was trained on)",
    )
    e.add_argument(
        "--preset",
        help="the preset the weights are for (default: the one the file names); needed for "
        "weights saved without tapegrad's metadata",
    )
    e.add_argument("--data-dir", help="the only folder searched for the dataset")
    e.add_argument("--device", help=DEVICE_HELP)
    e.set_defaults(func=cmd_evaluate)

    i = sub.add_parser("info", help="versions, threads, and where each dataset was found")
    i.add_argument("--data-dir", help="the folder to report on (default: the usual places)")
    i.set_defaults(func=cmd_info)

    from .bench.harness import WORKLOADS

    b = sub.add_parser(
        "bench",
        help="time a workload against PyTorch and JAX (same weights, batches, threads)",
        description="Train WORKLOAD with tapegrad and each peer in its own process, alternating, "
        "from the same initial weights and batch order; print time, memory and accuracy side "
        "by side with the FLOP floor. Exits 4 if the frameworks disagree.",
    )
    b.add_argument("workload", choices=[*WORKLOADS, "micro"])
    b.add_argument("--vs", help="peers, comma-separated (default torch,jax; micro adds autograd)")
    length = b.add_mutually_exclusive_group()
    length.add_argument("--epochs", type=int, help="epochs per run (default: the preset's)")
    length.add_argument("--steps", type=int, help="optimiser steps per run instead of epochs")
    b.add_argument("--repeats", type=int, help="runs per framework (default 3; micro 7)")
    b.add_argument(
        "--threads",
        help="threads for every framework: N, 'all' (the default: every usable CPU; micro 1), "
        "or several separated by commas, measured alternately in one run (all,1)",
    )
    b.add_argument(
        "--batch-size", type=int, help="batch size for every framework (default: the preset's)"
    )
    b.add_argument(
        "--width",
        type=int,
        help="every hidden size this many times larger (seed-cnn and mlp; default 1)",
    )
    b.add_argument(
        "--no-self-check",
        action="store_true",
        help="skip the peers' plain training loops (run beside the bench's workers, the run "
        "fails with 6 when a worker is more than 10%% off its plain loop)",
    )
    b.add_argument(
        "--allocator",
        choices=("keep", "system"),
        default="keep",
        help="keep: every process's malloc keeps the memory it frees (the default, see "
        "BENCHMARKS.md); system: malloc as configured",
    )
    b.add_argument("--json", help="write the full results as JSON here")
    b.add_argument("--data-dir", help="where the datasets are (else TAPEGRAD_DATA, the cache, ...)")
    b.add_argument("--seed", type=int, default=0)
    b.add_argument(
        "--mode",
        choices=("compiled", "eager"),
        default="compiled",
        help="tapegrad's execution mode (default compiled)",
    )
    b.add_argument(
        "--eager", dest="mode", action="store_const", const="eager", help="same as --mode eager"
    )
    b.add_argument("--quick", action="store_true", help="micro: small sizes, for a smoke test")
    b.add_argument("--perturb-peer", action="store_true", help=argparse.SUPPRESS)
    b.add_argument(
        "--ranks",
        type=int,
        help="compare N MPI ranks x cores/N threads with 1 process (1 thread, all cores) "
        "training the workload; needs tapegrad[mpi] (default: none, the peers instead)",
    )
    b.set_defaults(func=cmd_bench)
    return p


def _on_sigterm(signum, frame):
    raise _Terminated


def main(argv: list[str] | None = None) -> int:
    from .data import DatasetError, paths
    from .distributed import DistributedError
    from .serialization import ModelFileError
    from .train import TrainingDiverged
    from .train.checkpoint import CheckpointError
    from .train.outputs import OutputError

    parser = build_parser()
    try:
        args = parser.parse_args(argv)  # a one-line error (see _Parser), or --help/--version
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else EXIT_USAGE
    args.argv = list(sys.argv[1:] if argv is None else argv)[1:]
    previous = None
    if argv is None:  # the command itself, not a test calling main()
        previous = signal.signal(signal.SIGTERM, _on_sigterm)
    wording, paths.DATA_DIR_OPTION = paths.DATA_DIR_OPTION, "--data-dir DIR"
    try:
        return args.func(args)
    except (
        UserError,
        DatasetError,
        ModelFileError,
        CheckpointError,
        OutputError,
        FileNotFoundError,
        DistributedError,
    ) as e:
        # ranks that disagree, a refused checkpoint and a mistake rank 0 found (see _on_rank_0)
        # are met by every rank together; any other is one rank's own
        shared = isinstance(e, DistributedError | CheckpointError) or getattr(e, "every_rank", 0)
        return _fail(args, EXIT_USAGE, f"error: {e}", shared=bool(shared))
    except TrainingDiverged as e:
        return _fail(args, EXIT_DIVERGED, f"training diverged: {e}", shared=True)
    except KeyboardInterrupt:
        return _fail(args, 128 + signal.SIGINT, "interrupted (SIGINT)")
    except _Terminated:
        return _fail(args, 128 + signal.SIGTERM, "terminated (SIGTERM)")
    finally:
        _release_locks()
        paths.DATA_DIR_OPTION = wording
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _fail(args, code: int, message: str, shared: bool = False) -> int:
    """Report a failure in one line and return ``code``: the one error path of every command.

    Under MPI: before MPI started (bad arguments), every rank fails alike, rank 0 reports and
    all exit. After, a failure every rank meets together (ranks that disagree, a refused
    checkpoint, a mistake rank 0 found and broadcast, a diverged global loss: ``shared``) is
    reported by rank 0 and all exit; any other (a signal outside the training loop included)
    is this rank's own, so it is reported with the rank's number and the whole job is
    aborted, lest the other ranks wait for this one forever.
    """
    from . import distributed

    comm = distributed.active()
    line = f"tapegrad {args.command}: {message}"
    if comm is None or not comm.distributed:
        if distributed.launched_rank() == 0:
            print(line, file=sys.stderr)
        return code
    if shared:
        if comm.rank == 0:
            print(line, file=sys.stderr)
        return code
    distributed.fail(comm, line, code)
    return code  # pragma: no cover - abort does not return


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
