"""Simulated Byzantine clients: who attacks in a round, and what an attacker sends instead of its update.

A share ``faults.attackers`` of the clients attack: ``round(share x clients)`` of them, the first
of a permutation keyed by the seed (a fixed set) or by (seed, round) when
``faults.attackers_per_round`` re-draws them. A ``labels`` attacker trains on its data with every
label y flipped to ``C - 1 - y`` (label flipping, a data-poisoning attack on supervised methods,
e.g. Tolpegin et al. 2020; methods that never read a label are unaffected) and sends what it
trained. Any other attacker trains as usual, then replaces its
update ``u = x_client - x_global`` (learnable floating-point tensors only: BatchNorm's running
statistics and integer buffers are sent as trained) by, with ``s = faults.attack_scale``:

* ``sign_flip``: ``-s u``, its update reversed and scaled (the scaled sign-flip of Blanchard et al.
  2017 and El Mhamdi et al. 2018's experiments);
* ``noise``: ``s z``, ``z ~ N(0, I)`` drawn per (seed, round, client): Gaussian noise in place of
  its update (the "Gaussian" Byzantine clients of Blanchard et al. 2017, sec. 5);
* ``collude``: ``s v``, one ``v ~ N(0, I)`` per (seed, round) shared by every attacker: the same
  crafted vector, which a rule that trusts agreement among clients (Krum) favours.

Nothing depends on the process or worker that trains the client, nor on resuming.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

from fedlight.seeding import numpy_rng, torch_generator

State = dict[str, torch.Tensor]
Kind = Literal["none", "sign_flip", "noise", "collude", "labels"]
RUNNING_STATISTICS = ("running_mean", "running_var")  # not learned: an attacker sends them as trained


@dataclass(frozen=True)
class Attack:
    """One attacker's round.

    Attributes:
        kind: what it sends (module docstring).
        scale: s, ``faults.attack_scale``.
        seed, round_, client: the keys of its random draws.
    """

    kind: Kind
    scale: float
    seed: int
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


def flip_labels(labels: torch.Tensor, parts: list[torch.Tensor], flipped: frozenset[int],
                num_classes: int) -> torch.Tensor:
    """A copy of the ``(N,)`` training ``labels`` with the samples of the ``flipped`` clients' ``parts``
    relabelled ``num_classes - 1 - y``."""
    out = labels.clone()
    if flipped:
        idx = torch.cat([parts[c] for c in sorted(flipped)])
        out[idx] = num_classes - 1 - out[idx]
    return out


def attacked(key: str, tensor: torch.Tensor) -> bool:
    """Whether an attacker replaces the state entry ``key`` (a learnable floating-point tensor)."""
    return tensor.is_floating_point() and key.rpartition(".")[2] not in RUNNING_STATISTICS


def apply(attack: Attack, payload: State, global_state: State) -> State:
    """What the attacker sends: ``x_global + `` its replaced update for every attacked entry of both
    ``payload`` and ``global_state`` (same names and shapes), the rest of ``payload`` as it is
    (all of it for ``labels``: that attacker poisoned its data, not its upload)."""
    if attack.kind == "labels":
        return payload
    keys = [k for k, v in payload.items() if k in global_state and attacked(k, v)]
    if attack.kind == "collude":  # one generator for every attacker of the round
        gen = torch_generator(attack.seed, "collusion", attack.round_)
    else:
        gen = torch_generator(attack.seed, "attack", attack.round_, attack.client)
    out = dict(payload)
    for k in keys:
        x, g = payload[k].detach(), global_state[k].to(payload[k].device)
        if attack.kind == "sign_flip":
            update = -attack.scale * (x - g)
        else:  # noise and collude draw on the CPU, the same numbers on any device
            update = attack.scale * torch.randn(x.shape, generator=gen, dtype=torch.float32).to(x.device, x.dtype)
        out[k] = g + update
    return out
