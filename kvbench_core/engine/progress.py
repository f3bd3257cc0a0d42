"""The live progress line: elapsed/total, users, requests, read/write GB/s, p95s.

On a terminal it rewrites one line on stderr; with ``progress: on`` and no
terminal it prints one line per interval (for logs); ``auto`` is quiet when
stderr is not a TTY, so CI logs and pipes stay clean.
"""

from __future__ import annotations

import sys
from typing import Any, TextIO


class ProgressPrinter:
    def __init__(self, mode: str | bool = "auto", stream: TextIO | None = None, prefix: str = "") -> None:
        mode = {True: "on", False: "off"}.get(mode, mode)  # YAML 1.1 reads on/off as booleans
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty()
        self.enabled = mode == "on" or (mode == "auto" and self.tty)
        self.prefix = prefix
        self._last_len = 0

    def __call__(self, point: dict[str, Any]) -> None:
        if not self.enabled:
            return
        line = self.prefix + format_progress(point)
        if self.tty:
            pad = max(0, self._last_len - len(line))
            self.stream.write("\r" + line + " " * pad)
            self._last_len = len(line)
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def finish(self) -> None:
        if self.enabled and self.tty and self._last_len:
            self.stream.write("\n")
            self.stream.flush()
            self._last_len = 0


def format_progress(point: dict[str, Any]) -> str:
    if point.get("phase") == "warmup":
        head = f"warm-up {point.get('t_s', 0):.0f}/{point.get('warmup_s', 0):.0f}s"
    else:
        total = point.get("duration_s")
        head = f"{point.get('elapsed_s', 0):.0f}/{total:.0f}s" if total else f"{point.get('elapsed_s', 0):.0f}s"
    p95 = point.get("e2e_p95_ms") or {}
    worst = max(p95.values()) if p95 else None
    storage = point.get("storage_p95_ms")
    return (f"[{head}] users {point.get('users', 0)}  req {point.get('requests', 0)}  "
            f"read {point.get('read_bytes_per_s', 0) / 1e9:.2f} GB/s  "
            f"write {point.get('write_bytes_per_s', 0) / 1e9:.2f} GB/s  "
            f"e2e p95 {_ms(worst)}  storage p95 {_ms(storage)}  queue {point.get('queue', 0)}")


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} ms"
