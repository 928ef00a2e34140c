"""Simulated client faults (dropout, stragglers, divergence) and the divergence check.

A sampled client may, as in real cross-device federations (Bonawitz et al. 2019; the
system heterogeneity of FedProx, Li et al. 2020):

* drop out: it fails before sending, so the server never hears from it and its private
  state stays as it was (``faults.dropout``, a probability);
* straggle: it sends after finishing only ``faults.straggler_work`` of its local optimizer
  steps (``faults.straggler``, a probability);
* diverge: its loss or update holds NaN/Inf, or its update's norm is more than
  ``faults.max_update_ratio`` times the global model's (finite, but exploded). Real
  divergence is caught by :func:`divergence`; ``faults.diverge`` injects it, to test the
  handling. A diverged client is excluded from aggregation and its private state is not saved;
* attack: a share of the clients send a crafted payload instead of theirs
  (``faults.attack``, ``faults.attackers``; who: ``fedlight.engine.loop.client_attacks``, what:
  ``fedlight.attacks``).

Each client's fault is drawn from a generator keyed by (seed, round, client), so faults
do not depend on the process that trains the client, on the other clients, or on resuming.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch

from fedlight.attacks.attack import Attack
from fedlight.engine.loop.client_attacks import Attacker, attacker_count
from fedlight.errors import UserError
from fedlight.seeding import numpy_rng

State = dict[str, torch.Tensor]
CSV_HEADER = "round,client,event,detail\n"


@dataclass(frozen=True)
class FaultOptions:
    """How often each fault strikes a sampled client, and what the run tolerates. The defaults
    simulate no fault and tolerate any number of diverged clients.

    Attributes:
        dropout: probability that a sampled client fails before sending its update.
        straggler: probability that it finishes only ``straggler_work`` of its local steps.
        straggler_work: the share, in (0, 1], of its local steps a straggler completes.
        diverge: probability that its update is replaced by NaN (injected divergence).
        max_bad_clients: diverged clients a round tolerates before the run stops (None: any).
        max_update_ratio: an update whose norm is over this many times the global model's has diverged.
        attack: what an attacker does: ``none``, or an attack's name (``fedlight.catalog.ATTACKS``).
        attackers: the share of the clients that attack, in [0, 1].
        attack_scale: s, the ``scale`` of an attack that takes one (``sign_flip``, ``noise``, ``collude``).
        attackers_per_round: re-draw the attackers each round (else one fixed set).
        attack_options: the attack's other constructor options (``fedlight.registry.build_attack``).
    """

    dropout: float = 0.0
    straggler: float = 0.0
    straggler_work: float = 0.5
    diverge: float = 0.0
    max_bad_clients: int | None = None
    max_update_ratio: float = 1000.0
    attack: str = "none"
    attackers: float = 0.0
    attack_scale: float = 10.0
    attackers_per_round: bool = False
    attack_options: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if (self.attack == "none") != (self.attackers == 0):
            raise UserError(f"faults.attack={self.attack} with faults.attackers={self.attackers}: set both (e.g. "
                            "faults.attack=sign_flip faults.attackers=0.2) or neither")
        if self.attack_options and self.attack == "none":
            raise UserError("faults.attack_options are the options of faults.attack, which is none; set "
                            "faults.attack (e.g. faults.attack=alie) or drop faults.attack_options")
        for key in ("dropout", "straggler", "diverge", "attackers"):
            if not 0 <= getattr(self, key) <= 1:
                raise UserError(f"faults.{key}={getattr(self, key)} must be a probability in [0, 1]; e.g. 0.1")
        if not 0 < self.straggler_work <= 1:
            raise UserError(f"faults.straggler_work={self.straggler_work} must be in (0, 1]; e.g. 0.5")
        if (self.max_bad_clients is not None and self.max_bad_clients < 0) or self.max_update_ratio <= 0:
            raise UserError(f"faults.max_bad_clients={self.max_bad_clients} must be >= 0 (or null) and "
                            f"faults.max_update_ratio={self.max_update_ratio} > 0; e.g. 0 and 1000")

    def check_attackers(self, clients: int, attack: Attack | None = None) -> None:
        """Refuse an attack that no client carries out: ``faults.attackers`` of the ``clients`` the
        attackers are drawn from rounding to none, a clean run recorded as an attacked one; and
        ``attack`` poisoning labels with attackers re-drawn each round (it poisons a fixed set's data)."""
        if attack is not None and attack.poisons_labels and self.attackers_per_round:
            raise UserError(f"faults.attack={self.attack} poisons a fixed set of clients' data; "
                            "drop faults.attackers_per_round")
        if self.attack != "none" and attacker_count(self.attackers, clients) == 0:
            raise UserError(f"faults.attackers={self.attackers:g} of {clients} clients rounds to 0 attackers, so "
                            f"faults.attack={self.attack} would attack nothing; set faults.attackers to at least "
                            f"{1 / clients:.3g} (1 attacker of {clients})")


@dataclass(frozen=True)
class ClientFault:
    """What happens to one sampled client in one round.

    Attributes:
        dropped: fails before sending (trains nothing, sends nothing).
        work: share of its local optimizer steps it completes (1.0: all of them).
        diverge: its update is replaced by NaN after training (injected divergence).
        attack: the keys of its draws, if it attacks this round (it sends its attack's payload).
        reason: why it dropped, where not a dropout (the virtual clock's deadline or over-selection).
    """

    dropped: bool = False
    work: float = 1.0
    diverge: bool = False
    attack: Attacker | None = None
    reason: str = ""

    @property
    def straggler(self) -> bool:
        return self.work < 1.0


def draw_fault(options: FaultOptions, seed: int, round_: int, client: int) -> ClientFault:
    """The fault of ``client`` in ``round_`` (0-based): three uniform draws, one per kind, so
    raising one probability never changes which clients get another kind of fault."""
    if not (options.dropout or options.straggler or options.diverge):
        return ClientFault()
    u = numpy_rng(seed, "faults", round_, client).random(3)
    return ClientFault(dropped=bool(u[0] < options.dropout),
                       work=options.straggler_work if u[1] < options.straggler else 1.0,
                       diverge=bool(u[2] < options.diverge))


def steps_done(total: int, work: float) -> int:
    """Optimizer steps a client completes out of ``total``: ``floor(work * total)``, at least one."""
    if work >= 1.0 or total == 0:
        return total
    return max(1, math.floor(work * total))


def poison(payload: State) -> State:
    """A copy of ``payload`` with every floating-point tensor set to NaN (injected divergence)."""
    return {k: torch.full_like(v, math.nan) if v.is_floating_point() else v for k, v in payload.items()}


@dataclass(frozen=True)
class NormBound:
    """The largest norm a client's update may have in a round: ``ratio`` times the global model's.

    Attributes:
        keys: the global model's floating-point tensors; only those of an update are measured
            (a FLESD similarity matrix or a SCAFFOLD control delta has no global counterpart).
        reference: the global model's norm over ``keys``.
        ratio: ``faults.max_update_ratio``.
    """

    keys: frozenset[str]
    reference: float
    ratio: float

    @classmethod
    def of(cls, global_state: State, ratio: float) -> NormBound:
        """The bound for a round that starts from ``global_state``."""
        floats = {k: v for k, v in global_state.items() if v.is_floating_point()}
        norms = torch._foreach_norm(list(floats.values())) if floats else []
        reference = float(torch.stack(norms).double().square().sum().sqrt()) if norms else 0.0
        return cls(frozenset(floats), reference, ratio)

    @property
    def limit(self) -> float:
        """``ratio`` x the reference norm (at least ``ratio``: a global model of zeros still bounds)."""
        return self.ratio * max(self.reference, 1.0)


def divergence(loss: float, payload: State, bound: NormBound | None = None) -> str | None:
    """Why a client's result is unusable (``'loss nan'``, ``'update inf in backbone.fc.weight'``,
    ``'update norm 2.3e+29, ...'``), or None."""
    if not math.isfinite(loss):
        return f"loss {loss}"
    names = [k for k, v in payload.items() if v.is_floating_point()]
    if not names:
        return None
    norms = torch.stack(torch._foreach_norm([payload[k] for k in names])).double()
    measured = torch.tensor([bound is not None and k in bound.keys for k in names], device=norms.device)
    finite, norm = torch.stack([norms.isfinite().all().double(), (norms.square() * measured).sum().sqrt()]).tolist()
    if not finite:  # one fused check per client; the slow scan below only names the culprit
        return _non_finite(payload) or "update norm inf (its values are finite, their squares overflow)"
    if bound is not None and norm > bound.limit:
        return (f"update norm {norm:.3g}, over faults.max_update_ratio={bound.ratio:g} times the global "
                f"model's {bound.reference:.3g}")
    return None


def _non_finite(payload: State) -> str | None:
    """``'update nan in <first tensor holding one>'`` (or inf); None if every value is finite."""
    for k, v in payload.items():
        if v.is_floating_point() and not bool(torch.isfinite(v).all()):
            bad = "nan" if bool(torch.isnan(v).any()) else "inf"
            return f"update {bad} in {k}"
    return None
