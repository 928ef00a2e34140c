"""Temporally correlated client streams for on-device learning (SOFed, sec. IV-A).

A stream orders a client's samples in runs of ``stc`` consecutive same-class samples (the
"sequential temporal correlation" of a camera that keeps seeing the same kind of scene).
In round r a client receives the next ``velocity`` samples of its stream, wrapping around
into a new pass (a fresh seeded order) when the stream is exhausted, so every sample is
delivered exactly once per pass.
"""

from __future__ import annotations

from typing import Callable

import numpy as np


def correlated_order(labels: np.ndarray, indices: np.ndarray, stc: int, rng: np.random.Generator) -> np.ndarray:
    """``indices`` reordered into runs of ``stc`` same-class samples, runs in random order.

    Args:
        labels: (N,) labels of the whole training set (used only to group samples).
        indices: (n,) the client's sample indices.
        stc: run length (SOFed: 500); a class's last run may be shorter.
        rng: seeded generator.
    """
    runs = []
    for c in np.unique(labels[indices]):
        members = rng.permutation(indices[labels[indices] == c])
        runs += [members[i:i + stc] for i in range(0, len(members), stc)]
    order = rng.permutation(len(runs))
    return np.concatenate([runs[i] for i in order]) if runs else indices[:0]


def segment(labels: np.ndarray, indices: np.ndarray, stc: int, seed_rng: Callable[[int], np.random.Generator],
            round_: int, velocity: int) -> np.ndarray:
    """The ``velocity`` samples a client receives in ``round_`` (0-based), in arrival order.

    Pass p of the stream is ``correlated_order`` under ``seed_rng(p)``; round r covers stream
    positions [r * velocity, (r + 1) * velocity), continuing into the next pass.
    """
    n = len(indices)
    start, stop = round_ * velocity, (round_ + 1) * velocity
    out, pos = [], start
    while pos < stop:
        p, offset = divmod(pos, n)
        take = min(stop - pos, n - offset)
        out.append(correlated_order(labels, indices, stc, seed_rng(p))[offset:offset + take])
        pos += take
    return np.concatenate(out)


def arrival_batches(samples: np.ndarray, batch: int) -> list[np.ndarray]:
    """Split a round's samples into the batches in which they arrive (the buffer size in SOFed)."""
    return [samples[i:i + batch] for i in range(0, len(samples), batch)]
