"""One line for the user on stderr, clear of the progress bars."""

from __future__ import annotations

import sys

from tqdm.auto import tqdm


def say(message: str, rank: int = 0) -> None:
    """``fedlight: message`` on stderr, from rank 0 only."""
    if rank == 0:
        tqdm.write(f"fedlight: {message}", file=sys.stderr)
