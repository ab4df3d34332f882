"""A dependency-free progress bar on stderr: redrawn in place on a terminal, a line every
10% in logs (CI), silent when turned off."""

from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    def __init__(
        self, total: int, label: str, *, enabled: bool = True, stream: TextIO | None = None
    ):
        self.total = max(total, 0)
        self.label = label
        self.done = 0
        self.stream = stream or sys.stderr
        self.enabled = enabled and self.total > 0
        self.tty = self.enabled and self.stream.isatty()
        self.start = time.monotonic()
        self._last_decile = -1
        self._draw("")

    def advance(self, note: str = "") -> None:
        self.done += 1
        self._draw(note)

    def _draw(self, note: str) -> None:
        if not self.enabled:
            return
        elapsed = time.monotonic() - self.start
        frac = self.done / self.total
        if self.tty:
            width = 28
            bar = "#" * int(frac * width) + "." * (width - int(frac * width))
            text = f"\r{self.label} [{bar}] {self.done}/{self.total} {elapsed:5.1f}s {note[:60]}"
            self.stream.write(text.ljust(120)[:120])
            if self.done >= self.total:
                self.stream.write("\n")
            self.stream.flush()
        else:
            decile = int(frac * 10)
            if decile != self._last_decile or self.done == self.total:
                self._last_decile = decile
                self.stream.write(f"{self.label}: {self.done}/{self.total} ({elapsed:.1f}s)\n")
                self.stream.flush()

    def close(self) -> None:
        if self.tty and self.done < self.total:
            self.stream.write("\n")
            self.stream.flush()
