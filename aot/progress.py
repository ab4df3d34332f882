"""A dependency-free progress bar on stderr: redrawn in place on a terminal, a line every
10% in logs (CI), silent when turned off. It counts items (``advance``) or, with
``unit="B"``, bytes of a transfer (``update`` to the bytes done so far)."""

from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    def __init__(
        self,
        total: int,
        label: str,
        *,
        enabled: bool = True,
        stream: TextIO | None = None,
        unit: str = "",
    ):
        self.total = max(total, 0)
        self.label = label
        self.unit = unit
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

    def update(self, done: int, note: str = "") -> None:
        """Set the count done so far (a transfer that starts over goes back)."""
        done = min(max(done, 0), self.total)
        if done != self.done:
            self.done = done
            self._draw(note)

    def _count(self) -> str:
        if self.unit != "B":
            return f"{self.done}/{self.total}"
        return f"{_mib(self.done)}/{_mib(self.total)} MiB"

    def _draw(self, note: str) -> None:
        if not self.enabled:
            return
        elapsed = time.monotonic() - self.start
        frac = self.done / self.total
        if self.tty:
            width = 28
            bar = "#" * int(frac * width) + "." * (width - int(frac * width))
            text = f"\r{self.label} [{bar}] {self._count()} {elapsed:5.1f}s {note[:60]}"
            self.stream.write(text.ljust(120)[:120])
            if self.done >= self.total:
                self.stream.write("\n")
            self.stream.flush()
        else:
            decile = int(frac * 10)
            if decile != self._last_decile or self.done == self.total:
                self._last_decile = decile
                self.stream.write(f"{self.label}: {self._count()} ({elapsed:.1f}s)\n")
                self.stream.flush()

    def close(self) -> None:
        if self.tty and self.done < self.total:
            self.stream.write("\n")
            self.stream.flush()


def _mib(n: int) -> str:
    return f"{n / (1 << 20):.1f}"
