"""The attack contract: what a Byzantine client sends in place of its honest payload.

An attack is a class named by ``faults.attack`` (fedlight's own, or another package's through the
entry point ``fedlight.attacks``), built once per run with the recipe's ``faults.attack_options``
as its keyword arguments (and ``faults.attack_scale`` as ``scale``, where its constructor takes
one). A share ``faults.attackers`` of the clients attack; each trains as usual (on
``poison_labels``'s labels, for a data-poisoning attack), then sends ``craft(own, context)``
instead of ``own``, the payload it trained. docs/attacks.md teaches the contract with an example.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

State = dict[str, torch.Tensor]
RUNNING_STATISTICS = ("running_mean", "running_var")  # not learned: an update attack sends them as trained


@dataclass(frozen=True)
class AttackContext:
    """What an attacker knows of its round when it crafts its payload.

    Attributes:
        global_state: the round's global model, ``name -> tensor`` (the model every client started
            from; a payload's entries of the same name have its shape and dtype).
        generator: a CPU generator keyed by (seed, round, client), or by (seed, round) alone for a
            ``colludes`` attack: the same on any device or rank, straight or resumed.
        benign: with ``Attack.needs_benign``, the payloads of the round's benign clients that
            answered (every rank's, sorted by client id, on the CPU), as they trained them; empty
            otherwise, or where every answering client attacks.
        attackers: with ``Attack.needs_benign``, f: the round's attackers that answered, this one
            included; None otherwise (they craft one by one, before the others have trained).
        round_: the (0-based) round.
        client: the attacker's client id.
    """

    global_state: State
    generator: torch.Generator
    benign: list[State]
    attackers: int | None
    round_: int
    client: int


def attacked(key: str, tensor: torch.Tensor) -> bool:
    """Whether an update attack replaces the state entry ``key``: a learnable floating-point tensor
    (BatchNorm's running statistics and integer buffers are not learned)."""
    return tensor.is_floating_point() and key.rpartition(".")[2] not in RUNNING_STATISTICS


class Attack:
    """What a Byzantine client sends (entry point ``fedlight.attacks``): subclass it and implement
    ``craft``, or subclass :class:`UpdateAttack` and implement ``update``.

    The constructor's keyword arguments are the recipe's ``faults.attack_options``, typed and
    range-checked from its annotations (``Annotated[float, positive]``) like a method's options;
    a parameter named ``scale`` is given ``faults.attack_scale`` instead.

    Attributes:
        needs_benign: ``craft`` sees the round's benign payloads (an omniscient attacker, e.g.
            ALIE or IPM). The round then keeps every answering client's payload on the CPU (as a
            payloads-contract server does, within ``run.payload_budget_mb``) and the attackers craft
            theirs once every client of every rank has trained.
        colludes: every attacker of a round draws from the same generator (keyed by seed and
            round), so random draws agree among them.
        poisons_labels: the attackers train on ``poison_labels`` of their samples' labels (a data
            poisoning attack: one fixed set of attackers, methods that read labels).

    Examples:
        >>> import torch
        >>> from fedlight import Attack, AttackContext
        >>> class Zeros(Attack):
        ...     def craft(self, own, context):
        ...         return {k: torch.zeros_like(v) for k, v in own.items()}
        >>> ctx = AttackContext({"w": torch.ones(2)}, torch.Generator(), [], None, 0, 3)
        >>> Zeros().craft({"w": torch.ones(2)}, ctx)["w"].tolist()
        [0.0, 0.0]
    """

    needs_benign = False
    colludes = False
    poisons_labels = False

    def craft(self, own: State, context: AttackContext) -> State:
        """The payload the attacker sends.

        Args:
            own: the payload it trained honestly (``module.payload()``, or a plug-in's message):
                name -> tensor; not to be changed in place.
            context: its round (the global model, a seeded generator, the benign payloads).

        Returns:
            a payload with ``own``'s names, shapes and dtypes.
        """
        raise NotImplementedError

    def poison_labels(self, labels: torch.Tensor, num_classes: int) -> torch.Tensor:
        """With ``poisons_labels``: the ``(N,)`` labels the attackers train on, given their samples'
        ``(N,)`` true labels in ``[0, num_classes)``."""
        return labels


class UpdateAttack(Attack):
    """An attack on updates: it sends ``x_global + update(u, benign updates, context)``, where
    ``u = x - x_global`` over the payload's learnable floating-point entries that the global model
    holds too; the other entries (BatchNorm's running statistics, integer buffers, a message
    without a global counterpart, e.g. FLESD's similarity matrix) are sent as trained.
    """

    def update(self, own: State, benign: list[State], context: AttackContext) -> State:
        """The update the attacker sends.

        Args:
            own: its own update ``u``, name -> tensor (the attacked entries' shapes).
            benign: the benign clients' updates of the round, the same names and shapes (with
                ``needs_benign``; else empty).
            context: its round.
        """
        raise NotImplementedError

    def craft(self, own: State, context: AttackContext) -> State:
        g = context.global_state
        keys = [k for k, v in own.items() if k in g and attacked(k, v)]
        base = {k: g[k].to(own[k].device) for k in keys}

        def delta(payload: State) -> State:
            return {k: payload[k].detach() - base[k] for k in keys}

        sent = self.update(delta(own), [delta(p) for p in context.benign], context)
        return {**own, **{k: base[k] + sent[k] for k in keys}}


class OmniscientAttack(UpdateAttack):
    """An update attack computed from the round's benign updates (``needs_benign``), as by
    colluding attackers who see every client's upload; with none to see (every answering client
    attacks) an attacker sends its own payload."""

    needs_benign = True

    def craft(self, own: State, context: AttackContext) -> State:
        return super().craft(own, context) if context.benign else own
