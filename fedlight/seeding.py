"""Every random choice in fedlight comes from a generator derived from the run seed.

A generator is keyed by the seed and a purpose (plus round and client where they apply),
so a client's training depends only on (seed, round, client) and not on which process
trains it or in which order: this is what makes 1 vs 2 processes and kill + resume agree.
"""

from __future__ import annotations

import zlib

import numpy as np
import torch


def derive_seed(seed: int, purpose: str, *keys: int) -> int:
    """A 63-bit seed for ``purpose`` (a short name) and integer ``keys`` (round, client)."""
    entropy = [int(seed), zlib.crc32(purpose.encode()), *(int(k) for k in keys)]
    return int(np.random.SeedSequence(entropy).generate_state(2, np.uint64)[0] >> np.uint64(1))


def numpy_rng(seed: int, purpose: str, *keys: int) -> np.random.Generator:
    """A numpy generator for (seed, purpose, keys)."""
    return np.random.default_rng(derive_seed(seed, purpose, *keys))


def torch_generator(seed: int, purpose: str, *keys: int) -> torch.Generator:
    """A CPU torch generator for (seed, purpose, keys)."""
    return torch.Generator().manual_seed(derive_seed(seed, purpose, *keys))
