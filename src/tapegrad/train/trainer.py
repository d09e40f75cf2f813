"""The trainer: fit and evaluate a model, measuring each epoch the way the seed papers did."""

from __future__ import annotations

import math
import os
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

import numpy as np

from .. import distributed as dist
from .. import nn
from ..autodiff import Tensor, backend, compile, no_grad
from ..autodiff.plan import reduce_gradients
from ..data import Batches
from ..distributed.sharded import ShardedStep
from ..version import __version__
from .checkpoint import CheckpointError, config_differences, find_latest, save_checkpoint
from .measure import AllocationSampler, peak_rss_bytes, traced_step
from .report import EpochRecord, table_footer, table_header, table_row
from .signals import TrainingInterrupted, stop_on_signals  # noqa: F401  (run.py imports them here)
from .step_guard import NonFiniteLoss, stop_unless_finite, updates_in_step

TASKS = ("multiclass", "binary", "regression", "language-model")
#: Tasks without an accuracy: their table shows the train and the test (validation) loss.
NO_ACCURACY = ("regression", "language-model")


class TrainingDiverged(RuntimeError):
    """The loss became NaN or infinite; training stopped before updating with it."""


def _xy(split):
    if isinstance(split, tuple):
        return split
    return split.x, split.y


def _generators(model: nn.Module) -> list[tuple[str, np.random.Generator]]:
    """The random generators a model's modules draw from during training (dropout masks),
    by module name and attribute, in a fixed order: a checkpoint saves their states."""
    out = []
    for name, module in model.named_modules():
        for attr, value in sorted(vars(module).items()):
            if isinstance(value, np.random.Generator):
                out.append((f"{name}.{attr}" if name else attr, value))
    return out


def _progress_disabled() -> bool | None:
    # None lets tqdm decide (off when stderr is not a terminal); CI never gets a bar.
    return True if os.environ.get("CI", "").lower() in ("1", "true", "yes") else None


class Trainer:
    """Trains ``model`` with ``optimizer`` on a classification or regression task.

    ``task`` is ``"multiclass"`` (integer labels, softmax cross-entropy on class scores),
    ``"binary"`` (labels 0/1, binary cross-entropy on one logit per sample),
    ``"regression"`` (float targets, mean squared error; no accuracy) or ``"language-model"``
    (``(N, T)`` next-token ids for ``(N, T, vocabulary)`` scores, mean cross-entropy over every
    position; no accuracy; the test set is a validation set). ``scheduler`` (an
    ``optim.lr_scheduler`` object, optional) is stepped after every optimiser step.
    ``config`` (a JSON-ready dict, optional) describes the run; checkpoints carry it, and a
    resume from a checkpoint whose configuration differs is refused naming each difference.

    ``distributed=True`` (or a communicator from :mod:`tapegrad.distributed`) trains data-parallel
    when the process is one of several MPI ranks: rank 0's parameters and optimiser state are
    broadcast at the start, each rank takes its contiguous part of every global batch of
    ``batch_size`` samples, gradients are averaged with one allreduce per step, each rank
    applies the optimiser to its slice of the weights (``distributed/sharded.py``), and metrics are
    reduced across ranks (time, allocation and peak RSS: the largest rank's). Rank 0 alone
    logs, warns and writes checkpoints; a resume reads the checkpoint on rank 0, broadcasts it,
    and every rank makes the same checks (so a refusal is raised on every rank alike). A stop
    request (:meth:`request_stop`, a signal) travels with the next step's gradient allreduce:
    every rank stops after the same step. In a single process it changes nothing.

    ``device="cuda"`` moves the model (and with it the optimiser's state) to the GPU and
    trains there. Batches are cut on the host by the same seeded shuffler as on the CPU (the
    same batch order on every device) and each batch is copied to the device as it is used:
    one host-to-device copy of a few hundred KiB per step, which the step's own work hides
    on the seed models; the loss and the correct count come back once per step.
    """

    def __init__(
        self,
        model: nn.Module,
        optimizer,
        task: str = "multiclass",
        *,
        seed: int = 0,
        progress: bool = True,
        log: Callable[[str], None] | None = print,
        alloc_samples: int = 4,
        mode: str = "compiled",
        distributed: bool | dist.SingleWorld = False,
        scheduler=None,
        config: dict | None = None,
        warn: Callable[[str], None] | None = None,
        device=None,
    ):
        if task not in TASKS:
            raise ValueError(f"task must be one of {', '.join(TASKS)}, got {task!r}")
        if mode not in ("compiled", "eager"):
            raise ValueError(f"mode must be 'compiled' or 'eager', got {mode!r}")
        self.model, self.optimizer, self.task, self.seed = model, optimizer, task, seed
        self.mode = mode
        self.scheduler, self.config = scheduler, config
        self.progress = progress
        self.log = log or (lambda s: None)
        self.warn = warn or (lambda s: print(f"warning: {s}", file=sys.stderr))
        self.stop_requested: int | None = None
        self._last_checkpoint: Path | None = None
        self.checkpoint_failures: list[str] = []  # why each failed checkpoint write failed
        self.sampler = AllocationSampler(alloc_samples)
        self.records: list[EpochRecord] = []
        self.global_step = 0
        if distributed is True:
            distributed = dist.world()
        self.comm = distributed or dist.SingleWorld()
        self._reducer: dist.GradientAverager | None = None
        self._sharded = None  # the optimiser step split across ranks, when it can be
        if self.comm.distributed:
            dist.guard(self.comm)
            if self.comm.rank != 0:  # rank 0 alone reports
                self.progress, self.log, self.warn = False, lambda s: None, lambda s: None
        self.device = backend.get_device(device) if device is not None else None
        if self.device is not None:
            if self.comm.distributed and self.device is not backend.CPU:
                raise ValueError(
                    f"Trainer: data-parallel training (MPI) runs on the CPU; device "
                    f"{self.device.name!r} with several ranks is not supported"
                )
            model.to(self.device)
        self._compiled = compile(self._forward_backward) if mode == "compiled" else None
        self._updates_inside = updates_in_step(optimizer)  # its step inside ours

    # -- one step ------------------------------------------------------------------------------
    def loss(self, logits: Tensor, y) -> Tensor:
        """The task's mean loss; ``y`` as :meth:`targets` prepares it."""
        if self.task == "multiclass":
            return nn.functional.cross_entropy(logits, y)
        if self.task == "language-model":
            return nn.functional.cross_entropy(logits.reshape((-1, logits.shape[-1])), y)
        if self.task == "regression":
            return nn.functional.mse_loss(logits.reshape(y.shape), y)
        return nn.functional.binary_cross_entropy_with_logits(logits.reshape((-1,)), y)

    def targets(self, y: np.ndarray, dtype) -> np.ndarray:
        """Labels as the loss takes them: class ids (flattened for a language model), or floats
        of the outputs' dtype."""
        if self.task == "language-model":
            return y.reshape(-1)
        return y if self.task == "multiclass" else y.astype(dtype, copy=False)

    def correct(self, logits: np.ndarray, y: np.ndarray) -> int:
        """Correctly classified samples (0 for the tasks without an accuracy)."""
        if self.task in NO_ACCURACY:
            return 0
        logits = backend.to_host(logits)
        if self.task == "multiclass":
            return int(np.sum(np.argmax(logits, axis=1) == y))
        return int(np.sum((logits.reshape(-1) > 0) == (y > 0)))

    def request_stop(self, signum: int = signal.SIGINT) -> None:
        """Ask :meth:`fit` to stop after the step in progress (what a signal handler calls)."""
        self.stop_requested = signum

    def _forward_backward(self, x, y, training: bool = True, update: bool = False):
        # Traced once per input signature in compiled mode; ``training`` keys each plan to the
        # module mode it was traced in. With ``update`` the optimiser step is part of it (one
        # plan replays the whole step), behind a guard that raises NonFiniteLoss first.
        logits = self.model(x)
        loss = self.loss(logits, y)
        self.optimizer.zero_grad()
        if self._reducer is None:
            loss.backward()
        else:  # seeded with this rank's share of the global batch: gradients arrive scaled
            loss.backward(self._reducer.seed)
            reduce_gradients(self._reducer, loss)  # the allreduce, before the optimiser step
        if update:
            stop_unless_finite(loss)
            self.optimizer.step()
        return loss, logits

    def train_step(
        self, x: np.ndarray, y: np.ndarray, global_size: int | None = None
    ) -> tuple[float, int]:
        """One optimiser step on a batch; returns the batch's mean loss and correct count.

        When the loss is not finite the update is skipped and the loss returned, so the caller
        can stop with the parameters untouched. In a single process with a tapegrad optimiser
        the update is part of the step itself: compiled, one plan replays forward, backward,
        the guard on the loss and every parameter's update (``profile_step.py`` times them all);
        another optimiser object (or data-parallel training, whose sharded update follows the
        allreduce) steps after it. Data-parallel, ``(x, y)`` is this rank's part of
        a global batch of ``global_size`` samples; the loss returned is the global batch's (the
        same on every rank), the count this rank's own (:meth:`fit` sums the counts of all
        ranks once per epoch, sparing every step a second collective).
        """
        reducer = self._reducer
        if reducer is not None:
            reducer.weight = len(x) / (global_size or len(x))
            reducer.asks_stop = self.stop_requested is not None  # carried by the allreduce
            if len(x) == 0:  # a global batch smaller than the ranks: contribute nothing
                self.optimizer.zero_grad()
                reducer(np.zeros((), self._float_dtype()))
        # a single process with a tapegrad optimiser updates inside the step (one plan)
        inside = reducer is None and self._updates_inside
        if reducer is not None and len(x) == 0:
            value, correct = reducer.loss, 0
        else:
            yt = self._on_device(self.targets(y, self._float_dtype()))
            xd = self._on_device(x)
            try:
                if self._compiled is not None:
                    loss, logits = self._compiled(xd, yt, self.model.training, inside)
                else:
                    loss, logits = self._forward_backward(Tensor(xd), yt, True, inside)
            except NonFiniteLoss as stop:  # nothing was updated
                return stop.value, 0
            value = loss.item() if reducer is None else reducer.loss
            correct = self.correct(logits.data, y)
            if inside:
                if self.scheduler is not None:
                    self.scheduler.step()
                return value, correct
        if math.isfinite(value):
            if self._sharded is not None:
                self._sharded.step()
            else:
                self.optimizer.step()
            if self.scheduler is not None:
                self.scheduler.step()
        return value, correct

    def _on_device(self, a):
        """A batch array on the trainer's device (itself without one)."""
        return a if self.device is None else backend.copy_to_device(a, self.device)

    def _float_dtype(self):
        dtype = getattr(self, "_dtype", None)
        if dtype is None:
            dtype = next((p.data.dtype for p in self.model.parameters()), np.dtype(np.float32))
            self._dtype = dtype
        return dtype

    def evaluate(
        self, x: np.ndarray, y: np.ndarray, batch_size: int = 1000
    ) -> tuple[float, float | None]:
        """Mean loss and accuracy (None for regression and language models) over (x, y), in
        eval mode without recording a graph.

        Data-parallel, each rank evaluates its contiguous part of (x, y) and the sums are
        reduced, so every rank returns the figures for the whole set."""
        n_all = len(x)
        if self.comm.distributed:
            part = dist.shard(n_all, self.comm.rank, self.comm.size)
            x, y = x[part], y[part]
        was_training = self.model.training
        self.model.eval()
        total_loss, total_correct = 0.0, 0
        try:
            with no_grad():
                for lo in range(0, len(x), batch_size):
                    xb, yb = x[lo : lo + batch_size], y[lo : lo + batch_size]
                    logits = self.model(Tensor(self._on_device(xb)))
                    loss = self.loss(logits, self._on_device(self.targets(yb, logits.dtype)))
                    total_loss += loss.item() * len(xb)
                    total_correct += self.correct(logits.data, yb)
        finally:
            self.model.train(was_training)
        if self.comm.distributed:
            sums = self.comm.allreduce(np.array([total_loss, total_correct], dtype=np.float64))
            total_loss, total_correct = float(sums[0]), int(sums[1])
        n = max(n_all, 1)
        return total_loss / n, (None if self.task in NO_ACCURACY else total_correct / n)

    # -- the loop ------------------------------------------------------------------------------
    def fit(
        self,
        train,
        test=None,
        *,
        epochs: int,
        batch_size: int,
        max_steps: int | None = None,
        checkpoint_dir: str | os.PathLike | None = None,
        resume: bool = False,
        eval_batch_size: int = 1000,
    ) -> list[EpochRecord]:
        """Train for ``epochs`` epochs (or until ``max_steps`` optimiser steps in total).

        After each epoch: evaluate on ``test``, print a table row, save a checkpoint if
        ``checkpoint_dir`` is set. With ``resume``, continue from the newest valid checkpoint
        there (fresh if there is none; :class:`CheckpointError` if there are only damaged ones
        or it belongs to another run), ending with exactly the weights of an uninterrupted
        run. A NaN or infinite loss raises :class:`TrainingDiverged` before any update with it;
        the last checkpoint is left as it was. After :meth:`request_stop` the loop stops after
        the step in progress, writes a mid-epoch checkpoint (with ``checkpoint_dir``) and
        raises :class:`TrainingInterrupted`.
        """
        xt, yt = _xy(test) if test is not None else (None, None)
        comm = self.comm
        shard = (comm.rank, comm.size) if comm.distributed else None
        x, y, batches = self._batches(train, batch_size, shard)
        epoch, start, partial = 1, 0, None
        self.records = []
        self._batch_size = batch_size
        self.stop_requested = None  # a stop asked of an earlier fit does not carry over
        if comm.distributed:
            facts = dict(epochs=epochs, batch_size=batch_size, max_steps=max_steps)
            self._start_distributed(x, y, xt, yt, facts)
        if resume and checkpoint_dir is not None:
            epoch, start, partial = self._resume(checkpoint_dir, len(batches))
        self.log(table_header(self.task))
        for r in self.records:
            self.log(table_row(r, self.task))
        first_in_process = True
        self.model.train()
        while epoch <= epochs:
            if max_steps is not None and self.global_step >= max_steps:
                break
            n = len(batches)
            sums, done, stopped = self._epoch(
                batches, epoch, start, partial, shard, max_steps, checkpoint_dir
            )
            if stopped and checkpoint_dir is not None:
                self._save(checkpoint_dir, epoch, done, sums)
            record = self._record(
                epoch, n if not stopped else done, sums, first_in_process, xt, yt, eval_batch_size
            )
            first_in_process = False
            self.log(table_row(record, self.task))
            self.records.append(record)
            if stopped:
                break
            if checkpoint_dir is not None:
                self._save(checkpoint_dir, epoch + 1, 0, None)
            epoch, start, partial = epoch + 1, 0, None
            if self._stopping() and epoch <= epochs:
                raise TrainingInterrupted(
                    self._stop_signal(),
                    epoch,
                    0,
                    self._last_checkpoint if checkpoint_dir is not None else None,
                )
        if self._sharded is not None:
            self._sharded.push_state()  # the caller's optimiser holds the whole state again
        self.log(table_footer(self.records))
        return self.records

    def _batches(self, train, batch_size: int, shard):
        """(x, y, batches) of the training data: what identifies it, and its batch source."""
        if hasattr(train, "batches") and hasattr(train, "arrays"):  # draws its own batches
            x, y = train.arrays()  # (tapegrad.data.CharWindows); x, y: what identifies it
            return x, y, train.batches(batch_size, seed=self.seed, shard=shard)
        x, y = _xy(train)
        return x, y, Batches(x, y, batch_size, shuffle=True, seed=self.seed, shard=shard)

    def _resume(self, checkpoint_dir, n_batches: int):
        """(epoch, first batch, partial sums) of the newest valid checkpoint, its state loaded."""
        epoch, start, partial = self._restore(checkpoint_dir)
        if start >= n_batches:
            raise CheckpointError(
                f"checkpoint in {checkpoint_dir} places the run at batch {start} of an "
                f"epoch of {n_batches} batches: its metadata is not this run's"
            )
        if partial is not None and self.comm.rank != 0:
            partial = {**partial, "correct": 0}  # the saved count is all ranks': rank 0's
        if self._sharded is not None:
            self._sharded.pull_state()
        return epoch, start, partial

    def _epoch(self, batches, epoch, start, partial, shard, max_steps, checkpoint_dir):
        """Train one epoch from batch ``start``: (its sums, batches done, whether ``max_steps``
        stopped it before its end). A stop request raises :class:`TrainingInterrupted`."""
        n = len(batches)
        sums = dict(partial or {"loss": 0.0, "correct": 0, "seen": 0, "seconds": 0.0, "alloc": []})
        will_run = n if max_steps is None else min(n, start + max_steps - self.global_step)
        self.sampler.start_epoch(will_run, start)
        bar = self._bar(n, start, epoch)
        step_index = start
        stopped = False
        t0 = time.perf_counter()
        for step_index, (xb, yb) in enumerate(batches.epoch(epoch, start=start), start):
            global_size = batches.global_size(step_index)
            # one rank's part of the global batch; a single process keeps the plain call
            args = (xb, yb) if shard is None else (xb, yb, global_size)
            if self.sampler.wants(step_index):
                (value, correct), nbytes = traced_step(lambda a=args: self.train_step(*a))
                sums["alloc"].append(nbytes)
            else:
                value, correct = self.train_step(*args)
            if not math.isfinite(value):
                bar.close()
                raise self._diverged(value, epoch, step_index, checkpoint_dir)
            sums["loss"] += value * global_size
            sums["correct"] += correct
            sums["seen"] += global_size
            self.global_step += 1
            bar.update(1)
            if self._stopping() and step_index + 1 < n:
                bar.close()
                self._interrupted(checkpoint_dir, epoch, step_index + 1, sums, t0)
            if not bar.disable and step_index % 10 == 0:
                elapsed = sums["seconds"] + time.perf_counter() - t0
                bar.set_postfix(
                    loss=f"{sums['loss'] / sums['seen']:.4f}",
                    samples_s=f"{sums['seen'] / max(elapsed, 1e-9):.0f}",
                )
            if max_steps is not None and self.global_step >= max_steps:
                stopped = step_index + 1 < n
                break
        bar.close()
        sums["seconds"] += time.perf_counter() - t0
        return sums, (n if not stopped else step_index + 1), stopped

    def _diverged(self, value, epoch: int, step_index: int, checkpoint_dir) -> TrainingDiverged:
        where = f"; the last good checkpoint is {checkpoint_dir}" if checkpoint_dir else ""
        return TrainingDiverged(
            f"loss became {value} at epoch {epoch}, step {step_index + 1} "
            f"(global step {self.global_step + 1}); nothing was updated with it"
            f"{where}. Run the step under tapegrad.detect_anomaly() to find the "
            f"first operation that produced a NaN or Inf"
        )

    def _interrupted(self, checkpoint_dir, epoch: int, batch: int, sums: dict, t0: float):
        sums["seconds"] += time.perf_counter() - t0
        path = None
        if checkpoint_dir is not None:
            path = self._save(checkpoint_dir, epoch, batch, sums)
        raise TrainingInterrupted(self._stop_signal(), epoch, batch, path)

    def _stopping(self) -> bool:
        """Whether to stop after the step just made. Data-parallel, only a request every rank
        has seen counts: the one the step's allreduce carried (a signal that reached this rank
        after it travels with the next step), so all ranks stop after the same step."""
        if self._reducer is None:
            return self.stop_requested is not None
        return self._reducer.stop_requested

    def _stop_signal(self) -> int:
        """The signal that asked for the stop (data-parallel: the largest any rank received;
        collective, called by every rank when they stop together)."""
        if self._reducer is None:
            return int(self.stop_requested or signal.SIGINT)
        mine = np.array([self.stop_requested or 0], dtype=np.float64)
        return int(self.comm.allreduce(mine, op="max")[0]) or int(signal.SIGINT)

    # -- helpers -------------------------------------------------------------------------------
    def _start_distributed(self, x, y, xt, yt, facts: dict) -> None:
        """Check that every rank runs the same thing, give them all rank 0's parameters and
        optimiser state, and make the flat buffer gradients are averaged in."""
        comm, params = self.comm, list(self.model.parameters())
        data = dist.fingerprint(x, y, *(() if xt is None else (xt, yt)))
        shapes = [f"{n}{list(p.shape)}:{p.dtype}" for n, p in self.model.named_parameters()]
        dist.agree(
            comm,
            {
                "tapegrad version": __version__,
                "data": data,
                "parameters": shapes,
                "optimizer": type(self.optimizer).__name__,
                "seed": self.seed,
                "task": self.task,
                "mode": self.mode,
                **facts,
            },
        )
        for p in params:
            comm.bcast_array(p.data)
        state = comm.bcast(self.optimizer.state_dict())
        if comm.rank != 0:
            self.optimizer.load_state_dict(state)
        groups = getattr(self.optimizer, "param_groups", [])
        if len(groups) == 1 and {id(p) for p in groups[0]["params"]} == {id(p) for p in params}:
            params = list(groups[0]["params"])  # the optimiser's order: its step can be split
        self._reducer = dist.GradientAverager(comm, params)
        self._reducer.seeded = True  # _forward_backward seeds backward() with its weight
        if ShardedStep.supports(comm, self.optimizer, self._reducer):
            self._sharded = ShardedStep(comm, self.optimizer, self._reducer)
        if self._compiled is not None:
            self._compiled.clear()  # plans traced before the reduction existed lack it

    def _bar(self, total: int, initial: int, epoch: int):
        from tqdm.auto import tqdm

        disable = True if not self.progress else _progress_disabled()
        return tqdm(
            total=total,
            initial=initial,
            desc=f"epoch {epoch}",
            unit="batch",
            leave=False,
            disable=disable,
            file=sys.stderr,
            dynamic_ncols=True,
        )

    def _record(self, epoch, steps, sums, first, xt, yt, eval_batch_size) -> EpochRecord:
        t0 = time.perf_counter()
        test_loss = test_acc = None
        if xt is not None:
            test_loss, test_acc = self.evaluate(xt, yt, eval_batch_size)
        eval_seconds = time.perf_counter() - t0
        per_step = int(np.median(sums["alloc"])) if sums["alloc"] else None
        seconds, rss = sums["seconds"], peak_rss_bytes()
        if self.comm.distributed:  # the slowest, largest rank's figures
            worst = [seconds, eval_seconds, rss, -1 if per_step is None else per_step]
            seconds, eval_seconds, rss, per_step = self.comm.allreduce(np.array(worst), op="max")
            rss, per_step = int(rss), None if per_step < 0 else int(per_step)
        seen = max(sums["seen"], 1)
        return EpochRecord(
            epoch=epoch,
            steps=steps,
            seconds=seconds,
            samples_per_second=sums["seen"] / max(seconds, 1e-9),
            allocated_bytes=None if per_step is None else per_step * steps,
            allocated_per_step=per_step,
            peak_rss_bytes=rss,
            loss=sums["loss"] / seen,
            train_accuracy=(
                None if self.task in NO_ACCURACY else self._all_ranks(sums["correct"]) / seen
            ),
            test_loss=test_loss,
            test_accuracy=test_acc,
            eval_seconds=eval_seconds,
            first=first,
        )

    def _all_ranks(self, count: int) -> int:
        """The sum of every rank's ``count`` (collective when distributed)."""
        if not self.comm.distributed:
            return count
        return int(self.comm.allreduce(np.array([count], dtype=np.float64))[0])

    def _save(self, directory, epoch: int, start: int, partial: dict | None) -> Path | None:
        if self._sharded is not None:
            self._sharded.push_state()  # collective: every rank gets here
        if partial is not None and self.comm.distributed:
            partial = {**partial, "correct": self._all_ranks(partial["correct"])}
        if self.comm.rank != 0:
            return None  # rank 0 alone writes; every rank holds the same state
        meta = {
            "epoch": epoch,
            "start": start,
            "partial": partial,
            "seed": self.seed,
            "batch_size": self._batch_size,
            "task": self.task,
            "records": [asdict(r) for r in self.records],
            "config": self.config,
            "scheduler": None if self.scheduler is None else self.scheduler.state_dict(),
            "generators": {k: g.bit_generator.state for k, g in _generators(self.model)},
        }
        try:
            self._last_checkpoint = save_checkpoint(
                directory,
                self.global_step,
                self.model.state_dict(),
                self.optimizer.state_dict(),
                meta,
            )
        except OSError as e:  # a full disk, an I/O error: the run goes on, nothing is lost
            kept = self._last_checkpoint or "none"
            why = f"{e.strerror or e}" + (f": {e.filename}" if e.filename else "")
            self.checkpoint_failures.append(why)
            self.warn(
                f"could not write the checkpoint of global step {self.global_step} in "
                f"{directory} ({why}); the newest one written is {kept}; training goes on"
            )
            return None
        return self._last_checkpoint

    def _read_latest(self, directory) -> tuple[dict, dict, dict] | None:
        """:func:`find_latest` on rank 0, its checkpoint (or its refusal) on every rank."""
        if not self.comm.distributed:
            return find_latest(directory, warn=self.warn)
        found = error = None
        if self.comm.rank == 0:
            try:
                found = find_latest(directory, warn=self.warn)
            except CheckpointError as e:
                error = str(e)
        found, error = self.comm.bcast((found, error))
        if error is not None:
            raise CheckpointError(error)
        return found

    def _restore(self, directory) -> tuple[int, int, dict | None]:
        found = self._read_latest(directory)
        if found is None:
            self.log(f"no checkpoint in {directory} yet: starting fresh")
            return 1, 0, None
        model_state, optim_state, meta = found
        path = meta["path"]
        if "epoch" not in meta or "start" not in meta:
            raise CheckpointError(f"checkpoint {path} records no position (epoch, batch) to resume")
        mine = {"seed": self.seed, "batch_size": self._batch_size, "task": self.task}
        theirs = {k: meta.get(k, mine[k]) for k in mine}
        diffs = config_differences(theirs, mine)
        if isinstance(meta.get("config"), dict) and self.config is not None:
            diffs += config_differences(meta["config"], self.config, skip=tuple(mine))
            then, now = meta["config"].get("tapegrad"), self.config.get("tapegrad")
            if then != now:
                self.warn(
                    f"checkpoint {path} was written by tapegrad {then}, this is {now}: the "
                    f"resumed run may not be bit-identical to an uninterrupted one"
                )
        if diffs:
            raise CheckpointError(
                f"checkpoint {path} is from another run configuration: {'; '.join(diffs)}. "
                f"Resume with its settings, or use another --checkpoint-dir"
            )
        problems = _state_problems(self.model, model_state)
        if problems:
            raise CheckpointError(f"checkpoint {path} holds another model: {problems}")
        kind = optim_state.get("type")
        if kind != type(self.optimizer).__name__:
            raise CheckpointError(
                f"checkpoint {path} holds {kind} optimiser state; this run uses "
                f"{type(self.optimizer).__name__}"
            )
        try:
            self.optimizer.load_state_dict(optim_state)
            sched = meta.get("scheduler")
            if (sched is None) != (self.scheduler is None):
                raise ValueError(
                    f"the checkpoint has {'no' if sched is None else 'a'} learning-rate "
                    f"schedule, this run {'has one' if sched is None else 'none'}"
                )
            if sched is not None:
                self.scheduler.load_state_dict(sched)
        except (ValueError, TypeError, KeyError) as e:
            raise CheckpointError(f"checkpoint {path}: {str(e).splitlines()[0]}") from None
        self.model.load_state_dict(model_state)
        saved = meta.get("generators") or {}
        for k, g in _generators(self.model):  # dropout masks continue where they stopped
            if k in saved:
                g.bit_generator.state = saved[k]
        self.global_step = int(meta["global_step"])
        self.records = [EpochRecord(**r) for r in meta.get("records", [])]
        self.log(
            f"resumed from {meta['path']} (epoch {meta['epoch']}, batch {meta['start']}, "
            f"global step {self.global_step})"
        )
        return int(meta["epoch"]), int(meta["start"]), meta.get("partial")


def _state_problems(model, saved: dict) -> str:
    """'' when ``saved`` fits ``model``'s state dict (names, the older names its layers still
    load, shapes, dtypes), else the first problems."""
    own, saved = model.state_dict(), model._resolve_aliases(saved)
    out = [f"no {k}" for k in own if k not in saved]
    out += [f"unexpected {k}" for k in saved if k not in own]
    for k, v in own.items():
        if k in saved and (saved[k].shape != v.shape or saved[k].dtype != v.dtype):
            got, want = f"{saved[k].dtype}{list(saved[k].shape)}", f"{v.dtype}{list(v.shape)}"
            out.append(f"{k} is {got}, not {want}")
    if len(out) > 3:
        out = out[:3] + [f"{len(out) - 3} more"]
    return ", ".join(out)
