"""Which clients a round samples, and how a process deals them to its worker models."""

from __future__ import annotations

from fedlight.seeding import numpy_rng


def clients_per_round(num_clients: int, fraction: float) -> int:
    """``max(1, round(fraction * K))``."""
    return max(1, int(round(fraction * num_clients)))


def sample_clients(seed: int, round_: int, num_clients: int, fraction: float, poisson: bool = False) -> list[int]:
    """The sorted ids of the clients sampled in ``round_``.

    Fixed-size (default): ``m = clients_per_round`` of the K clients, without replacement.
    Poisson (``poisson``): each client independently with probability ``q = m / K``, so a round
    has m clients on average and may have none; the sampling that privacy accountants for the
    sampled Gaussian mechanism model (``server/dp_fedavg.py``).
    """
    m = clients_per_round(num_clients, fraction)
    if poisson:
        drawn = numpy_rng(seed, "sample_poisson", round_).random(num_clients) < m / num_clients
        return [int(c) for c in drawn.nonzero()[0]]
    return sorted(numpy_rng(seed, "sample", round_).choice(num_clients, m, replace=False).tolist())


def owner(client: int, world: int) -> int:
    """The rank that keeps ``client``'s state (a stateful client never moves between ranks)."""
    return client % world


def deal_clients(sampled: list[int], sizes: list[int], world: int) -> list[list[int]]:
    """Deal a round's sampled clients to ``world`` ranks so each trains about as many samples.

    Largest first, each to the rank with the fewest samples so far (LPT; ties to the lower
    rank and the lower id, so every rank computes the same deal); each rank's list sorted.
    """
    load, dealt = [0] * world, [[] for _ in range(world)]
    for size, client in sorted(zip(sizes, sampled), key=lambda x: (-x[0], x[1])):
        rank = min(range(world), key=lambda r: (load[r], r))
        load[rank] += size
        dealt[rank].append(client)
    return [sorted(clients) for clients in dealt]
