"""Plain-text tables for the listing commands (columns padded, header first)."""

from __future__ import annotations

from typing import Sequence

from metashift_hf.core.names import terminal_safe


def print_table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
    """Names from the data may hold control characters: every cell is printed terminal-safe (escaped)."""
    cells = [
        [terminal_safe(c) for c in header],
        *[[f"{c:,}" if isinstance(c, int) else terminal_safe(c) for c in r] for r in rows],
    ]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    for r in cells:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
