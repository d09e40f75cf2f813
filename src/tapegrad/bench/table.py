"""The bench's table: one result printed as Markdown, time, memory and accuracy side by side
with the FLOP floor and the notes a reader needs (see :func:`format_table`)."""

from __future__ import annotations

from . import selfcheck
from .summary import agreement_terms


def _score(result: dict) -> str:
    """ ", test accuracy A%" (", validation loss L" for a language model) of one run."""
    if result.get("test_accuracy") is not None:
        return f", test accuracy {100 * result['test_accuracy']:.2f}%"
    if result.get("test_loss") is not None:
        return f", validation loss {result['test_loss']:.4f}"
    return ""


def _accuracy(s: dict) -> str:
    if s.get("test_accuracy") is None:
        return f"{'val ' + format(s['test_loss'], '.3f'):>9}"
    return f"{100 * s['test_accuracy']:>8.2f}%"


def _mib(n) -> str:
    return "n/a" if n is None else f"{n / 2**20:.1f} MiB"


def _bytes(n) -> str:
    if n is None:
        return "n/a"
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


def _secs(s: dict | None, spread: bool = True) -> str:
    if s is None:
        return "n/a"
    if not spread or s["n"] == 1:
        return f"{s['median']:.3f}s"
    return f"{s['median']:.3f}s [{s['min']:.3f}-{s['max']:.3f}]"


def first_epoch_note(result: dict) -> str | None:
    """tapegrad's first epoch with a cold and a warm kernel cache, against its steady epoch."""
    s = result["summary"]["tapegrad"]
    cold, warm, steady = s.get("first_cold"), s["first"], s["steady"]
    if result["unit"] != "epoch" or not cold or not warm or not steady:
        return None
    if warm == cold:  # every run was cold (one repeat): "first" fell back to them, none is warm
        return None
    return (
        f"First epoch of tapegrad: {warm['median']:.2f}s with a warm kernel cache "
        f"({warm['n']} run(s)), {cold['median']:.2f}s with a cold one (an empty "
        f"NUMBA_CACHE_DIR: every kernel compiles); warm, it costs "
        f"{warm['median'] - steady['median']:+.2f}s over a steady epoch, cold "
        f"{cold['median'] - steady['median']:+.2f}s"
    )


def _cores(s: dict) -> str:
    if "cores_busy" not in s:
        return "n/a"
    threads = f"/{s['busy_threads']}" if "busy_threads" in s else ""
    return f"{s['cores_busy']:.2f}{threads}"


def format_table(result: dict) -> str:
    """The terminal table: one row per framework and plain loop, ratios, the floor, the
    guard's and the self-check's verdicts."""
    unit = result["unit"]
    head = (
        f"{'framework':<12} {'first ' + unit:>14} {'steady ' + unit + ' median [min-max]':>34} "
        f"{'cores/thr':>9} {'peak RSS':>11} {'alloc/epoch':>12} {'loss':>8} {'test acc':>9}"
    )
    lines = [f"{result['workload']}, {result['threads']} thread(s):", head]
    for fw, s in result["summary"].items():
        lines.append(
            f"{fw:<12} {_secs(s['first'], False):>14} {_secs(s['steady']):>34} "
            f"{_cores(s):>9} {_mib(s['peak_rss']):>11} {_bytes(s['alloc_per_epoch']):>12} "
            f"{s['final_loss']:>8.4f} {_accuracy(s)}"
        )
    for peer, s in result.get("plain", {}).items():
        lines.append(
            f"{peer + ' plain':<12} {_secs(s['first'], False):>14} {_secs(s['steady']):>34} "
            f"{_cores(s):>9} {'':>11} {'':>12} {s['final_loss']:>8.4f}"
        )
    for peer, r in result["ratios"].items():
        steady = r["steady"]
        text = (
            f"steady {steady['median']:.2f}x [{steady['min']:.2f}-{steady['max']:.2f}]"
            if steady
            else "steady n/a"
        )
        name = f"{peer.removesuffix('-plain')}'s plain loop" if peer.endswith("-plain") else peer
        lines.append(
            f"tapegrad / {name}: {text}, first {unit} {r['first']['median']:.2f}x "
            f"(time ratio, repeat by repeat; > 1 means tapegrad is slower)"
        )
    lines.append("cores/thr: CPU time over wall time while training, and the threads that did work")
    note = first_epoch_note(result)
    if note:
        lines.append(note)
    fl = result["floor"]
    key = "epoch_seconds" if unit == "epoch" else "step_seconds"
    lines.append(
        f"floor: {result['facts']['flops']['per_sample_train'] / 1e6:.3f} MFLOP per sample "
        f"trained -> {fl[key]:.3f}s per {unit} at the measured "
        f"{fl['gemm_flops_per_second'] / 1e9:.1f} GFLOP/s float32 GEMM rate"
    )
    g = result["guard"]
    if g["passed"]:
        lines.append(
            f"guard: passed (first-step losses within {g['loss_rtol']:g} relative, "
            f"{agreement_terms(g, result['summary'])})"
        )
    else:
        lines.extend(f"guard FAILED: {f}" for f in g["failures"])
    check = result.get("self_check")
    if check and check["checks"]:
        for peer, c in check["checks"].items():
            verdict = "passed" if c["passed"] else "FAILED"
            lines.append(f"self-check {verdict}: {selfcheck.describe(peer, c, unit)}")
    elif check is not None:
        lines.append("self-check: not run (no peer, or --no-self-check)")
    return "\n".join(lines)
