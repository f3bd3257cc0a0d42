"""Live progress of a run: the phase, a bar with the time left, and each tier's read/write bandwidth and p95.

Phases: set-up (tiers opened, preload), warm-up, measuring, drain (in-flight storage work finishing) and
writing results.  On a terminal it is a rich live display on stderr, redrawn as the runner's interval
points arrive.  Without a terminal (CI logs, pipes) ``auto`` prints one plain line every
``PLAIN_EVERY_S`` seconds, and one when a phase starts after that long, so a long run shows it is alive
and where it is, and a short one adds nothing to the log;
``on`` prints a plain line for every interval; ``off`` (and ``--quiet``) prints nothing.  The bar's time
left is exact (warm-up + duration are known), not an estimate from a rate.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from typing import Any, TextIO

#: Without a terminal, ``auto`` writes one plain line this often (seconds).
PLAIN_EVERY_S = 10.0
PHASE_LABELS = {"setup": "set-up", "warmup": "warm-up", "measure": "measuring", "drain": "drain",
                "results": "writing results"}


@dataclass(frozen=True)
class ProgressScope:
    """Whose figures the lines show, known before the first line (the set-up line comes before any client
    exists): one process's (the default), several clients' summed (``"2 clients "``, p95 the worst
    client's), or an MPI rank's own."""

    prefix: str = ""
    p95_of: str | None = None  # whose p95 an aggregate line shows; None: this process's own


class ProgressPrinter:
    """Called with each progress point (``runner`` intervals) and with ``phase(name)`` between them."""

    def __init__(self, mode: str | bool = "auto", stream: TextIO | None = None, prefix: str = "",
                 plain_every_s: float = PLAIN_EVERY_S, duration_s: float | None = None,
                 warmup_s: float = 0.0, scope: ProgressScope = ProgressScope()) -> None:
        mode = {True: "on", False: "off"}.get(mode, mode)  # YAML 1.1 reads on/off as booleans
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty()
        self.enabled = mode != "off"
        self.prefix = prefix + scope.prefix
        self.plain_every_s = 0.0 if mode == "on" else plain_every_s
        self._started = time.monotonic()
        self._last_plain = self._started
        self._plain_phase: str | None = None
        self._live: _LiveView | None = None
        self._last: dict[str, Any] = {"duration_s": duration_s, "warmup_s": warmup_s, "p95_of": scope.p95_of}

    def phase(self, name: str) -> None:
        """A phase without interval points of its own: set-up, writing results."""
        self({"phase": name})

    def __call__(self, point: dict[str, Any]) -> None:
        """Show ``point``; fields it lacks (a bare ``{"phase": "drain"}``) keep their last values."""
        if not self.enabled:
            return
        point = self._last = {**self._last, **point}
        if self.tty:
            if self._live is None:
                self._live = _LiveView(self.stream, self.prefix)
            self._live.update(point)
            return
        now = time.monotonic()
        # A new phase of a run that has gone on for a while (the drain, writing results) gets its line at
        # once; a short run (a test, a smoke check) still prints nothing.
        changed = point.get("phase") != self._plain_phase and now - self._started >= self.plain_every_s
        if changed or now - self._last_plain >= self.plain_every_s:
            self._last_plain, self._plain_phase = now, point.get("phase")
            self.stream.write(self.prefix + format_progress(point) + "\n")
            self.stream.flush()

    def finish(self) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None


def fraction_done(point: dict[str, Any]) -> tuple[float, float] | None:
    """(seconds done, seconds in all) over warm-up + measured duration; None without a duration."""
    total = point.get("duration_s")
    if not total:
        return None
    warmup = point.get("warmup_s") or 0.0
    phase = point.get("phase")
    if phase == "setup":
        done = 0.0
    elif phase == "warmup":
        done = min(point.get("t_s", 0.0), warmup)
    elif phase == "measure":
        done = warmup + min(point.get("elapsed_s", 0.0), total)
    else:  # drain, results: the timed part is over
        done = warmup + total
    return done, warmup + total


def format_progress(point: dict[str, Any]) -> str:
    """One plain line: phase and time, requests, bandwidth per tier, p95s."""
    phase = PHASE_LABELS.get(point.get("phase", ""), point.get("phase", ""))
    progress = fraction_done(point)
    head = (phase if progress is None else f"{phase} {progress[0]:.0f}/{progress[1]:.0f}s") + clients_note(point)
    p95 = point.get("e2e_p95_ms") or {}
    worst = max((v for v in p95.values() if v is not None), default=None)
    parts = [f"[{head}] users {point.get('users', 0)}  req {point.get('requests', 0)}"]
    parts += [f"{name} r {_gbps(t.get('read_bytes_per_s'))} w {_gbps(t.get('write_bytes_per_s'))} GB/s "
              f"p95 r {_ms(t.get('read_p95_ms'))} w {_ms(t.get('write_p95_ms'))}"
              for name, t in tiers_in_order(point)]
    parts.append(f"e2e p95 {_ms(worst)}  storage p95 {_ms(point.get('storage_p95_ms'))}  "
                 f"queue {point.get('queue', 0)}")
    if point.get("p95_of"):  # an aggregate of several clients' points (scaleout/multiclient.py)
        parts.append(f"(p95: {point['p95_of']})")
    return "  ".join(parts)


def clients_note(point: dict[str, Any]) -> str:
    """While the clients of a scaled-out run cross from warm-up to measuring, how many already measure
    (the line's figures are every client's, in whichever phase it is); in warm-up, before every client has
    reported, how many the figures are of."""
    measuring = point.get("clients_measuring")
    return f", {measuring} clients" if measuring else ""


def tiers_in_order(point: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """The point's per-tier figures, top tier first (occupancy lists the tiers in the waterfall's order)."""
    order = list(point.get("occupancy") or {})
    tiers = point.get("tiers") or {}
    return sorted(tiers.items(), key=lambda item: order.index(item[0]) if item[0] in order else len(order))


class _LiveView:
    """The terminal view: a rich progress bar and a per-tier table under it, on stderr."""

    def __init__(self, stream: TextIO, prefix: str) -> None:
        from rich.console import Console, Group
        from rich.live import Live
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
        from rich.table import Table

        self._group, self._table_cls = Group, Table
        self.progress = Progress(TextColumn(prefix + "[bold]{task.fields[phase]:<15}"), BarColumn(),
                                 TextColumn("{task.percentage:>3.0f}%"), TimeElapsedColumn(),
                                 TextColumn("{task.fields[left]}"), TextColumn("{task.fields[requests]}"))
        self.task = self.progress.add_task("run", total=None, phase="set-up", left="", requests="")
        self.table = Table()
        self.live = Live(self._group(self.progress, self.table), console=Console(file=stream), refresh_per_second=4,
                         transient=True)  # gone when the run ends: the summary stands alone
        self.live.start()

    def update(self, point: dict[str, Any]) -> None:
        progress = fraction_done(point)
        fields = {"phase": PHASE_LABELS.get(point.get("phase", ""), point.get("phase", "")) + clients_note(point),
                  "requests": f"users {point.get('users', 0)}  req/interval {point.get('requests', 0)}  "
                              f"queue {point.get('queue', 0)}"}
        if progress is None:
            self.progress.update(self.task, **fields, left="")
        else:
            done, total = progress
            self.progress.update(self.task, completed=done, total=total, left=f"{total - done:.0f} s left",
                                 **fields)
        self.table = self._tier_table(point)
        self.live.update(self._group(self.progress, self.table), refresh=True)

    def _tier_table(self, point: dict[str, Any]) -> Any:
        table = self._table_cls(box=None, pad_edge=False)
        for column in ("tier", "read GB/s", "write GB/s", "read p95 ms", "write p95 ms"):
            table.add_column(column, justify="left" if column == "tier" else "right")
        for name, figures in tiers_in_order(point):
            table.add_row(name, _gbps(figures.get("read_bytes_per_s")), _gbps(figures.get("write_bytes_per_s")),
                          _ms(figures.get("read_p95_ms"), unit=False), _ms(figures.get("write_p95_ms"), unit=False))
        p95 = point.get("e2e_p95_ms") or {}
        latencies = (f"e2e p95 per class: {', '.join(f'{q} {_ms(v)}' for q, v in p95.items()) or '-'}; "
                     f"storage p95 {_ms(point.get('storage_p95_ms'))}"
                     + (f" (p95: {point['p95_of']})" if point.get("p95_of") else ""))
        return self._group(table, latencies)

    def stop(self) -> None:
        self.live.stop()


def _gbps(value: float | None) -> str:
    return "-" if value is None else f"{value / 1e9:.2f}"


def _ms(value: float | None, unit: bool = True) -> str:
    if value is None:
        return "-"
    return f"{value:.1f} ms" if unit else f"{value:.1f}"
