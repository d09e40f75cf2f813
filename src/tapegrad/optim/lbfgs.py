"""L-BFGS: a quasi-Newton method that re-evaluates the loss through a closure.

``LBFGS`` treats all parameters as one flat vector ``x``. Each ``step(closure)`` runs up to
``max_iter`` iterations: the direction is ``-H g`` with ``H`` the inverse-Hessian estimate made
from the last ``history_size`` pairs (``s = x_{k+1} - x_k``, ``y = g_{k+1} - g_k``) by the
two-loop recursion, the step length is ``lr`` (the very first iteration: ``lr * min(1,
1 / |g|_1)``) or the one a strong-Wolfe line search finds. It follows PyTorch's ``LBFGS``
(minFunc's algorithm) decision for decision, so the two trajectories agree to rounding.

Memory: the history holds ``2 * history_size`` vectors the size of all parameters together,
plus eleven work vectors (PyTorch's keeps a similar number). Buffers are allocated once (the
history grows until it is full, then its oldest pair is reused), so apart from the closure a
steady-state step allocates (almost) nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from ..autodiff import Tensor, enable_grad
from ..autodiff.core.state import active_trace
from ..autodiff.plan import TraceError
from .optimizer import Optimizer

__all__ = ["LBFGS"]

_WOLFE_TOLERANCE = 1e-9  # the line search's own bracket tolerance (PyTorch's, fixed)


class LBFGS(Optimizer):
    """L-BFGS over all parameters as one vector; ``step(closure)`` needs a ``closure`` that
    zeroes the gradients, computes the loss, calls ``backward()`` and returns the loss, since
    each iteration (and each line-search trial) re-evaluates it. ``step`` returns the loss of
    the closure's first call.

    ``max_iter`` iterations at most per step, ``max_eval`` closure calls at most (default
    ``max_iter * 5 // 4``); a step ends early when the largest gradient entry is at most
    ``tolerance_grad``, or when the step, the directional derivative or the change of loss is
    below ``tolerance_change``. ``history_size`` pairs are kept. ``line_search_fn`` is None
    (fixed step ``lr``) or ``"strong_wolfe"`` (Armijo ``c1 = 1e-4``, curvature ``c2 = 0.9``,
    cubic interpolation; its bracket tolerance is 1e-9 whatever ``tolerance_change`` is, as in
    PyTorch).

    One parameter group only, and all parameters of one dtype (they form one vector);
    parameters whose ``grad`` is None count as zero gradient. Eager only: because the closure
    is re-evaluated a number of times that depends on the values, a step cannot be replayed
    by ``tg.compile``, and calling it while tracing raises ``tg.TraceError``.
    """

    def __init__(
        self,
        params: Iterable[Tensor] | Iterable[dict],
        lr: float = 1.0,
        max_iter: int = 20,
        max_eval: int | None = None,
        tolerance_grad: float = 1e-7,
        tolerance_change: float = 1e-9,
        history_size: int = 100,
        line_search_fn: str | None = None,
    ):
        defaults = dict(
            lr=lr,
            max_iter=max_iter,
            max_eval=max_eval,
            tolerance_grad=tolerance_grad,
            tolerance_change=tolerance_change,
            history_size=history_size,
            line_search_fn=line_search_fn,
        )
        super().__init__(params, defaults)
        params = self.param_groups[0]["params"]
        dtypes = sorted({str(p.data.dtype) for p in params})
        if len(dtypes) != 1:
            raise TypeError(
                f"LBFGS: all parameters must have one dtype (they form one vector), got {dtypes}"
            )
        self._sizes = [p.data.size for p in params]
        self._n = sum(self._sizes)
        self._dtype = params[0].data.dtype
        self._work: dict[str, np.ndarray] | None = None
        self._spare: tuple[np.ndarray, np.ndarray] | None = None

    def add_param_group(self, group: dict[str, Any]) -> None:
        if self.param_groups:
            raise ValueError(
                "LBFGS: takes one parameter group (its state is one vector over all "
                "parameters); per-group options are not supported"
            )
        super().add_param_group(group)

    def _check_group(self, group: dict[str, Any], where: str = "") -> None:
        super()._check_group(group, where)
        group["max_iter"] = self._integer(group, "max_iter", where)
        if group["max_eval"] is None:
            group["max_eval"] = group["max_iter"] * 5 // 4
        group["max_eval"] = self._integer(group, "max_eval", where)
        group["tolerance_grad"] = self._number(group, "tolerance_grad", where, lo=0.0)
        group["tolerance_change"] = self._number(group, "tolerance_change", where, lo=0.0)
        group["history_size"] = self._integer(group, "history_size", where)
        if group["line_search_fn"] not in (None, "strong_wolfe"):
            place = f"LBFGS{' ' + where if where else ''}"
            raise ValueError(
                f"{place}: line_search_fn must be None or 'strong_wolfe', "
                f"got {group['line_search_fn']!r}"
            )

    # -- the flat vector -----------------------------------------------------------------------
    def _buffers(self) -> dict[str, np.ndarray]:
        """Work vectors, allocated on the first step: four gradient slots for the line search
        (values it holds are never overwritten while it may still read them), the direction's
        recursion ``q``, a temporary, and the parameters saved before a line search."""
        if self._work is None:
            n, dt = self._n, self._dtype
            slots = np.empty((4, n), dt)
            self._work = {
                "slots": slots,
                "q": np.empty(n, dt),
                "tmp": np.empty(n, dt),
                "x0": np.empty(n, dt),
            }
        return self._work

    def _segments(self, flat: np.ndarray):
        """(parameter array, the matching piece of ``flat`` shaped like it) for each parameter."""
        offset = 0
        for p, n in zip(self.param_groups[0]["params"], self._sizes):
            data = p.data
            yield p, data, flat[offset : offset + n].reshape(data.shape)
            offset += n

    def _gather_grad(self, out: np.ndarray) -> np.ndarray:
        for j, (p, data, seg) in enumerate(self._segments(out)):
            g = p.grad
            if g is None:
                seg.fill(0)
                continue
            if g.shape != data.shape or g.dtype != data.dtype:
                raise ValueError(
                    f"LBFGS: parameter {j} has shape {data.shape} dtype {data.dtype} but its "
                    f"grad has shape {g.shape} dtype {g.dtype}"
                )
            np.copyto(seg, g)
        return out

    def _add_to_params(self, t, d: np.ndarray) -> None:
        """``x += t * d``."""
        tmp = self._buffers()["tmp"]
        np.multiply(d, t, out=tmp)
        for _, data, seg in self._segments(tmp):
            np.add(data, seg, out=data)

    def _save_params(self, out: np.ndarray) -> None:
        for _, data, seg in self._segments(out):
            np.copyto(seg, data)

    def _restore_params(self, saved: np.ndarray) -> None:
        for _, data, seg in self._segments(saved):
            np.copyto(data, seg)

    def _abs_max(self, v: np.ndarray):
        tmp = self._buffers()["tmp"]
        np.abs(v, out=tmp)
        return tmp.max()

    @staticmethod
    def _evaluate(closure: Callable[[], Any]) -> Any:
        with enable_grad():
            return closure()

    # -- the step --------------------------------------------------------------------------------
    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """Run up to ``max_iter`` L-BFGS iterations; returns the closure's first loss."""
        self._check_closure(closure)
        group = self.param_groups[0]
        max_iter, max_eval = group["max_iter"], group["max_eval"]
        tol_grad, tol_change = group["tolerance_grad"], group["tolerance_change"]
        work = self._buffers()
        st = self.state.setdefault(0, {"func_evals": 0, "n_iter": 0})

        first_loss = self._evaluate(closure)
        loss = float(first_loss)
        evals = 1
        st["func_evals"] += 1
        g = self._gather_grad(work["slots"][0])
        if self._abs_max(g) <= tol_grad:
            return first_loss

        d, t = st.get("d"), st.get("t")
        dirs, steps, rho = st.get("old_dirs"), st.get("old_stps"), st.get("ro")
        h_diag, prev_g, prev_loss = st.get("H_diag"), st.get("prev_flat_grad"), st.get("prev_loss")
        if d is None:
            d = np.empty(self._n, self._dtype)
        done_iters = 0
        while done_iters < max_iter:
            done_iters += 1
            st["n_iter"] += 1

            # direction
            if st["n_iter"] == 1:
                np.negative(g, out=d)
                dirs, steps, rho = [], [], []
                h_diag = 1
            else:
                h_diag = self._remember(g, prev_g, d, t, dirs, steps, rho, h_diag)
                self._two_loop(g, d, dirs, steps, rho, h_diag)

            if prev_g is None:
                prev_g = np.array(g, copy=True)
            else:
                np.copyto(prev_g, g)
            prev_loss = loss

            t = self._first_step_length(g) if st["n_iter"] == 1 else group["lr"]
            gtd = g.dot(d)
            if gtd > -tol_change:  # not a descent direction (any more)
                break
            last = done_iters == max_iter
            loss, g, t, used = self._move(closure, t, d, loss, g, gtd, max_eval - evals, last)
            small_grad = used > 0 and self._abs_max(g) <= tol_grad
            evals += used
            st["func_evals"] += used

            if last or evals >= max_eval or small_grad:
                break
            np.multiply(d, t, out=work["q"])
            if self._abs_max(work["q"]) <= tol_change:  # the step hardly moves x
                break
            if abs(loss - prev_loss) < tol_change:
                break

        st.update(d=d, t=t, old_dirs=dirs, old_stps=steps, ro=rho, H_diag=h_diag)
        st.update(prev_flat_grad=prev_g, prev_loss=prev_loss)
        return first_loss

    @staticmethod
    def _check_closure(closure) -> None:
        if closure is None:
            raise TypeError(
                "LBFGS.step needs a closure that zeroes the gradients, computes the loss, "
                "calls backward() and returns the loss: step(closure)"
            )
        if active_trace() is not None:
            raise TraceError(
                "LBFGS.step cannot be compiled: it re-evaluates its closure a number of times "
                "that depends on the values; call it outside tg.compile"
            )

    def _remember(self, g, prev_g, d, t, dirs, steps, rho, h_diag):
        """Add the last step's pair (gradient change, step) to the history when the curvature
        is positive; the new scale of the initial inverse Hessian."""
        group = self.param_groups[0]
        y, s = self._spare or (np.empty(self._n, self._dtype), np.empty(self._n, self._dtype))
        self._spare = None
        np.subtract(g, prev_g, out=y)
        np.multiply(d, t, out=s)
        ys = y.dot(s)
        if ys <= 1e-10:
            self._spare = (y, s)
            return h_diag
        # drop the oldest pair(s): more than one only if history_size was lowered
        # mid-run (PyTorch then keeps the longer history for good)
        while len(dirs) >= group["history_size"]:
            self._spare = (dirs.pop(0), steps.pop(0))
            rho.pop(0)
        dirs.append(y)
        steps.append(s)
        rho.append(1.0 / ys)
        return ys / y.dot(y)

    def _first_step_length(self, g) -> float:
        tmp = self._buffers()["tmp"]
        np.abs(g, out=tmp)
        return min(1.0, 1.0 / tmp.sum()) * self.param_groups[0]["lr"]

    def _move(self, closure, t, d, loss, g, gtd, max_ls, last: bool):
        """Move the parameters along ``d``: by the line search's step, or by ``t`` (then
        evaluated unless ``last``: its loss would go unused). (loss, gradient, t, evaluations)."""
        if self.param_groups[0]["line_search_fn"] == "strong_wolfe":
            self._save_params(self._buffers()["x0"])
            loss, g, t, used = self._strong_wolfe(closure, t, d, loss, g, gtd, max_ls)
            self._add_to_params(t, d)
            return loss, g, t, used
        self._add_to_params(t, d)
        if last:
            return loss, g, t, 0
        loss = float(self._evaluate(closure))
        return loss, self._gather_grad(g), t, 1

    def _two_loop(self, g, d, dirs, steps, rho, h_diag) -> None:
        """``d = -H g`` by the two-loop recursion over the stored pairs, in place."""
        work = self._buffers()
        q, tmp = work["q"], work["tmp"]
        np.negative(g, out=q)
        alphas = [None] * len(dirs)
        for i in range(len(dirs) - 1, -1, -1):
            alphas[i] = steps[i].dot(q) * rho[i]
            np.multiply(dirs[i], -alphas[i], out=tmp)
            np.add(q, tmp, out=q)
        np.multiply(q, h_diag, out=d)
        for i in range(len(dirs)):
            beta = dirs[i].dot(d) * rho[i]
            np.multiply(steps[i], alphas[i] - beta, out=tmp)
            np.add(d, tmp, out=d)

    # -- strong Wolfe line search ----------------------------------------------------------
    def _strong_wolfe(self, closure, t, d, f, g, gtd, max_ls, c1=1e-4, c2=0.9):
        """A step length ``t`` along ``d`` from the parameters saved in ``x0`` (loss ``f``,
        gradient ``g``, directional derivative ``gtd < 0``) that satisfies the strong Wolfe
        conditions ``f(t) <= f + c1 t gtd`` and ``|g(t).d| <= -c2 gtd``, found by bracketing
        and then zooming with safeguarded cubic interpolation, in at most ``max_ls`` further
        evaluations. Returns (loss, gradient, t, evaluations); the parameters are left at
        ``x0``. Each trial's gradient goes into a slot no kept value is using."""
        search = _LineSearch(self, closure, d, f, g, gtd, max_ls, c1, c2)
        found = search.bracket(t)
        low = search.zoom(*found)
        bracket, b_f, b_g = found[:3]
        return b_f[low], b_g[low], bracket[low], search.evals

    # -- state dict --------------------------------------------------------------------------------
    # The state lives under parameter 0 (as PyTorch keeps it): the counts ``func_evals`` and
    # ``n_iter``; after the first iteration also ``d``, ``prev_flat_grad`` (vectors), ``t``,
    # ``H_diag``, ``prev_loss`` (numbers) and the history as arrays ``old_dirs``,
    # ``old_stps`` (one row per pair) and ``ro``.
    _VECTORS = ("d", "prev_flat_grad")
    _NUMBERS = ("t", "H_diag", "prev_loss")
    _HISTORY = ("old_dirs", "old_stps", "ro")

    def _saved_state(self, state: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {"func_evals": state["func_evals"], "n_iter": state["n_iter"]}
        if "d" not in state:
            return out
        n, dt = self._n, self._dtype
        out.update({k: state[k] for k in self._VECTORS})
        out.update({k: float(state[k]) for k in self._NUMBERS})
        out["old_dirs"] = np.array(state["old_dirs"], dt).reshape(-1, n)
        out["old_stps"] = np.array(state["old_stps"], dt).reshape(-1, n)
        out["ro"] = np.array(state["ro"], dt).reshape(-1)
        return out

    def _loaded_state(self, saved, index_map, group_of, groups) -> dict[int, dict[str, Any]]:
        name = "LBFGS.load_state_dict"
        if not saved:
            return {}
        if set(saved) != {0}:
            raise ValueError(
                f"{name}: LBFGS keeps its state under parameter 0, got {sorted(saved)}"
            )
        entries = saved[0]
        counts = ("func_evals", "n_iter")
        full = set(counts) | set(self._VECTORS) | set(self._NUMBERS) | set(self._HISTORY)
        if set(entries) not in (set(counts), full):
            raise ValueError(
                f"{name}: state has {sorted(entries)}, expected {sorted(counts)} or {sorted(full)}"
            )
        like = np.empty(0, self._dtype)
        st: dict[str, Any] = {k: self._loaded_count(f"state.0.{k}", entries[k]) for k in counts}
        if "d" in entries:
            for k in self._VECTORS:
                st[k] = self._loaded_array(
                    f"state.0.{k}", entries[k], like, (self._n,), "all parameters'"
                )
            for k in self._NUMBERS:
                st[k] = self._loaded_real(f"state.0.{k}", entries[k], finite=k != "prev_loss")
            ro = entries["ro"]
            k = ro.shape[0] if isinstance(ro, np.ndarray) and ro.ndim == 1 else -1
            rows = (max(k, 0), self._n)
            dirs = self._loaded_array(
                "state.0.old_dirs", entries["old_dirs"], like, rows, "len(ro) x all parameters'"
            )
            stps = self._loaded_array(
                "state.0.old_stps", entries["old_stps"], like, rows, "len(ro) x all parameters'"
            )
            st["ro"] = list(self._loaded_array("state.0.ro", ro, like, (max(k, 0),), "a vector"))
            st["old_dirs"], st["old_stps"] = list(dirs), list(stps)
        self._spare = None
        return {0: st}


def _cubic_minimum(x1, f1, g1, x2, f2, g2, bounds=None):
    """The minimiser of the cubic through (x1, f1) and (x2, f2) with slopes g1, g2, clamped to
    ``bounds`` (default: the interval between x1 and x2); the interval's middle when the cubic
    has no minimum. Scalars keep their NumPy dtype, so float32 parameters give float32 steps."""
    lo, hi = bounds if bounds is not None else ((x1, x2) if x1 <= x2 else (x2, x1))
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        d1 = g1 + g2 - 3 * (f1 - f2) / (x1 - x2)
        disc = d1**2 - g1 * g2
        if disc >= 0:
            d2 = np.sqrt(disc)
            if x1 <= x2:
                x = x2 - (x2 - x1) * ((g2 + d2 - d1) / (g2 - g1 + 2 * d2))
            else:
                x = x1 - (x1 - x2) * ((g1 + d2 - d1) / (g1 - g2 + 2 * d2))
            return min(max(x, lo), hi)
    return (lo + hi) / 2.0


class _LineSearch:
    """The strong Wolfe line search of one L-BFGS iteration (see :meth:`LBFGS._strong_wolfe`):
    bracketing, then zooming. ``evals`` counts the closure's evaluations, ``it`` the trials
    after the first."""

    def __init__(self, opt: LBFGS, closure, d, f, g, gtd, max_ls, c1, c2):
        self.opt, self.closure, self.d = opt, closure, d
        self.f, self.g, self.gtd, self.max_ls, self.c1, self.c2 = f, g, gtd, max_ls, c1, c2
        work = opt._buffers()
        self.slots, self.x0 = work["slots"], work["x0"]
        self.evals = self.it = 0

    def trial(self, t, *keep):
        """The loss and gradient (in a slot none of ``keep`` uses) at ``x0 + t d``."""
        opt = self.opt
        out = next(b for b in self.slots if not any(b is k for k in keep))
        opt._add_to_params(t, self.d)
        try:
            value = float(opt._evaluate(self.closure))
            opt._gather_grad(out)
        finally:
            opt._restore_params(self.x0)
        self.evals += 1
        return value, out

    def bracket(self, t):
        """Grow ``t`` until the interval [t_prev, t] must hold an acceptable point: (bracket,
        its losses, gradients, directional derivatives, whether a point already satisfies both
        conditions)."""
        f, g, gtd, c1, c2, d = self.f, self.g, self.gtd, self.c1, self.c2, self.d
        f_new, g_new = self.trial(t, g)
        gtd_new = g_new.dot(d)
        t_prev, f_prev, g_prev, gtd_prev = 0, f, g, gtd
        while self.it < self.max_ls:
            pair = ([t_prev, t], [f_prev, f_new], [g_prev, g_new], [gtd_prev, gtd_new])
            if f_new > f + c1 * t * gtd or (self.it > 1 and f_new >= f_prev):
                return (*pair, False)
            if abs(gtd_new) <= -c2 * gtd:
                return [t], [f_new], [g_new], None, True
            if gtd_new >= 0:
                return (*pair, False)
            lo, hi = t + 0.01 * (t - t_prev), t * 10
            t_prev, t = t, _cubic_minimum(t_prev, f_prev, gtd_prev, t, f_new, gtd_new, (lo, hi))
            f_prev, g_prev, gtd_prev = f_new, g_new, gtd_new
            f_new, g_new = self.trial(t, g, g_prev)
            gtd_new = g_new.dot(d)
            self.it += 1
        return [0, t], [f, f_new], [g, g_new], None, False

    def zoom(self, bracket, b_f, b_g, b_gtd, done) -> int:
        """Shrink the bracket (in place) around a point satisfying both conditions; the index
        of its best end."""
        f, g, gtd, c1, c2, d = self.f, self.g, self.gtd, self.c1, self.c2, self.d
        d_norm = self.opt._abs_max(d)
        stalled = False
        low, high = (0, 1) if b_f[0] <= b_f[-1] else (1, 0)
        while not done and self.it < self.max_ls:
            if abs(bracket[1] - bracket[0]) * d_norm < _WOLFE_TOLERANCE:
                break
            t = _cubic_minimum(bracket[0], b_f[0], b_gtd[0], bracket[1], b_f[1], b_gtd[1])
            # keep away from the ends: a trial at an end teaches nothing new
            top, bottom = max(bracket), min(bracket)
            margin = 0.1 * (top - bottom)
            if min(top - t, t - bottom) < margin:
                if stalled or t >= top or t <= bottom:
                    t = top - margin if abs(t - top) < abs(t - bottom) else bottom + margin
                    stalled = False
                else:
                    stalled = True
            else:
                stalled = False
            f_new, g_new = self.trial(t, g, *b_g)
            gtd_new = g_new.dot(d)
            self.it += 1
            if f_new > f + c1 * t * gtd or f_new >= b_f[low]:
                bracket[high], b_f[high], b_g[high], b_gtd[high] = t, f_new, g_new, gtd_new
                low, high = (0, 1) if b_f[0] <= b_f[1] else (1, 0)
            else:
                if abs(gtd_new) <= -c2 * gtd:
                    done = True
                elif gtd_new * (bracket[high] - bracket[low]) >= 0:
                    bracket[high], b_f[high] = bracket[low], b_f[low]
                    b_g[high], b_gtd[high] = b_g[low], b_gtd[low]
                bracket[low], b_f[low], b_g[low], b_gtd[low] = t, f_new, g_new, gtd_new
        return low
