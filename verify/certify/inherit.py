"""The intermediate bounds that open boxes keep for their children (bab.py, intermediate="inherit").

A box's intermediate (pre-activation) bounds hold at every point of the box, so at every point of
a child (a half of it, or a hull child after `tighten`: both sub-boxes). bab.py stores each open
box's bounds here and hands them to the box's children when it splits; bounds.py intersects them
with the children's own, layer by layer.

Storage and its cost. Per open box Σ_j 2·n_j values (the lower and the upper end of every unit of
every ReLU layer) in float32: 8·Σ_j n_j bytes, so 1 KiB a box on a 4×32 student (hull: 36 + 3·32
units), 8 KiB on a 4×256 one. Rounded outward (`to_float32_outward`: a lower end down, an upper end
up), the stored interval holds the float64 one, so what a child inherits is still sound. Beyond
`cap_bytes` the boxes with the smallest upper ends lose theirs (best-first splits them last; they
are bounded from scratch when split: still sound, only slower). A box without stored bounds
inherits ±inf: the intersection leaves its own bounds as they are. The cap is enforced once a
round, after the round's children are stored: the buffer holds at most the cap's rows and one
round's children (ROUND_ROWS rows of room at bab's default batch: 32 MiB on a 4×256 student).
Measured on the students of command.py's table, the store stayed far below the cap (nothing
dropped): about 55 MB of live rows at M 16, K 3 (4×32 hull, ~55,000 open boxes after 300 s), 37 MB
on the 4×256 one (4,464 open boxes), the buffer up to twice that between compactions.
"""

from __future__ import annotations

import torch

CAP_BYTES = 2 * 2**30  # 2 GiB of stored bounds at most, by default
ROUND_ROWS = 4096  # room beyond the cap for a round's children (2,048 at bab's default batch)


def to_float32_outward(lower: torch.Tensor, upper: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """float32 (l₃₂, u₃₂) with l₃₂ ≤ lower and u₃₂ ≥ upper elementwise: rounded to nearest, then one
    float32 step outward where that landed on the wrong side (values beyond float32's range go to
    ±max or ±inf on the sound side)."""
    l32, u32 = lower.to(torch.float32), upper.to(torch.float32)
    down = torch.full_like(l32, -torch.inf)
    up = torch.full_like(u32, torch.inf)
    l32 = torch.where(l32.to(lower.dtype) > lower, torch.nextafter(l32, down), l32)
    u32 = torch.where(u32.to(upper.dtype) < upper, torch.nextafter(u32, up), u32)
    return l32, u32


class BoundStore:
    """Float32 intermediate bounds of open boxes, addressed by slot (−1: none stored). Rows are
    appended as boxes are bounded; `compact` keeps the live ones and enforces the cap."""

    def __init__(self, widths: list[int], device, cap_bytes: float = CAP_BYTES):
        self.widths = list(widths)
        self.cut = torch.tensor([0, *widths]).cumsum(0).tolist()
        self.n = self.cut[-1]
        self.row_bytes = 2 * self.n * 4
        self.cap_rows = int(cap_bytes // self.row_bytes)
        # Rows 0..used−1 of the buffer are in use; it doubles when full (amortised appends: a round
        # appends 2,048 rows to a bank of up to 10⁵), but not past the cap and a round's rows.
        self.device = device
        self.buffer = self._empty(1024)
        self.used = 0
        self.dropped = 0  # boxes whose stored bounds the cap removed

    def _capacity(self, rows: int) -> int:
        return min(rows, self.cap_rows + ROUND_ROWS)

    def _empty(self, rows: int) -> torch.Tensor:
        return torch.empty(rows, 2, self.n, dtype=torch.float32, device=self.device)

    @property
    def bank(self) -> torch.Tensor:
        return self.buffer[: self.used]

    @property
    def nbytes(self) -> int:
        return self.buffer.numel() * 4

    def put(self, layers) -> torch.Tensor:
        """Store per-box bounds (per layer (l, u), float64 (B, n_j)); returns their slots (B,)."""
        lower = torch.cat([l for l, _ in layers], 1)
        upper = torch.cat([u for _, u in layers], 1)
        rows = torch.stack(to_float32_outward(lower, upper), 1)
        start, end = self.used, self.used + len(rows)
        if end > len(self.buffer):
            grown = self._empty(max(end, self._capacity(2 * len(self.buffer))))
            grown[:start] = self.bank
            self.buffer = grown
        self.buffer[start:end] = rows
        self.used = end
        return torch.arange(start, end, device=rows.device)

    def get(self, slots: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Per layer (l, u) in float64 (B, n_j) of the boxes at `slots`; ±inf where none is stored."""
        have = slots >= 0
        rows = self.bank[slots.clamp(min=0)].to(torch.float64)
        inf = torch.tensor(torch.inf, dtype=torch.float64, device=rows.device)
        lower = torch.where(have[:, None], rows[:, 0], -inf)
        upper = torch.where(have[:, None], rows[:, 1], inf)
        return [(lower[:, a:b], upper[:, a:b]) for a, b in zip(self.cut[:-1], self.cut[1:], strict=True)]

    def compact(self, slots: torch.Tensor, priority: torch.Tensor) -> torch.Tensor:
        """Keep only the rows at `slots` (the open boxes'), at most cap_rows of them: those of the
        boxes with the largest `priority` (their upper ends: split first). Returns the new slots.
        Rebuilds the bank only when it holds twice the live rows, or more rows than the cap allows
        (amortised), so it holds at most the cap's rows and one round's."""
        have = torch.nonzero(slots >= 0).flatten()
        over = len(have) > self.cap_rows
        if not over and self.used <= min(max(2 * len(have), 1024), self.cap_rows):
            return slots
        if over:
            keep = torch.topk(priority[have], self.cap_rows).indices
            self.dropped += len(have) - self.cap_rows
            have = have[keep]
        new = torch.full_like(slots, -1)
        new[have] = torch.arange(len(have), device=slots.device)
        live = self.bank[slots[have]]
        self.buffer = self._empty(max(len(have), self._capacity(max(1024, 2 * len(have)))))
        self.buffer[: len(have)] = live
        self.used = len(have)
        return new
