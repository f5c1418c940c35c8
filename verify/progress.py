"""A dependency-free progress bar on stderr, shown only when stderr is a terminal."""

from __future__ import annotations

import sys
import time


class Progress:
    def __init__(self, total: int, desc: str, enabled: bool | None = None):
        self.total, self.desc, self.done = max(int(total), 1), desc, 0
        self.enabled = sys.stderr.isatty() if enabled is None else enabled
        self.start = time.perf_counter()

    def update(self, n: int = 1, info: str = "") -> None:
        self.done = min(self.done + n, self.total)
        if not self.enabled:
            return
        width = 30
        filled = int(width * self.done / self.total)
        elapsed = time.perf_counter() - self.start
        bar = "█" * filled + "·" * (width - filled)
        sys.stderr.write(f"\r{self.desc:<10} {bar} {self.done}/{self.total} {elapsed:5.1f}s {info}")
        sys.stderr.flush()

    def close(self) -> None:
        if self.enabled:
            sys.stderr.write("\r\033[K")
            sys.stderr.flush()
