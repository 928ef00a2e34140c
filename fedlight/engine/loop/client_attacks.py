"""Simulated Byzantine clients: who attacks in a round, and the labels a data-poisoning attack trains on.

A share ``faults.attackers`` of the clients attack: ``round(share x clients)`` of them, the first
of a permutation keyed by the seed (a fixed set) or by (seed, round) when
``faults.attackers_per_round`` re-draws them. What an attacker sends is its attack's
(``faults.attack``, a ``fedlight.attacks.attack.Attack``): fedlight's ``sign_flip``, ``noise``,
``collude``, ``labels``, ``alie`` and ``ipm`` (``fedlight/attacks/``), or another package's.
Nothing depends on the process or worker that trains the client, nor on resuming.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from fedlight.attacks.attack import Attack
from fedlight.seeding import numpy_rng


@dataclass(frozen=True)
class Attacker:
    """One attacking client in one round: the keys of its draws (``AttackContext``).

    Attributes:
        round_: the (0-based) round.
        client: its client id.
    """

    round_: int
    client: int


def attacker_count(share: float, clients: int) -> int:
    """How many of ``clients`` attack: ``round(share x clients)``."""
    return int(round(share * clients))


def attackers(share: float, clients: list[int], seed: int, round_: int | None) -> frozenset[int]:
    """The ``round(share x len(clients))`` attacking ids of ``clients``: the first of a permutation
    keyed by ``seed`` (and ``round_``, when not None: re-drawn each round)."""
    count = attacker_count(share, len(clients))
    keys = () if round_ is None else (round_,)
    return frozenset(clients[i] for i in numpy_rng(seed, "attackers", *keys).permutation(len(clients))[:count])


def poisoned_labels(labels: torch.Tensor, parts: list[torch.Tensor], poisoned: frozenset[int], attack: Attack,
                    num_classes: int) -> torch.Tensor:
    """A copy of the ``(N,)`` training ``labels`` with the samples of the ``poisoned`` clients' ``parts``
    relabelled by ``attack.poison_labels`` (``C - 1 - y`` for ``labels``)."""
    out = labels.clone()
    if poisoned:
        idx = torch.cat([parts[c] for c in sorted(poisoned)])
        out[idx] = attack.poison_labels(out[idx], num_classes)
    return out
