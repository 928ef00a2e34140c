"""A round's way from the clients' payloads to ``finalize``, for both aggregator contracts.

Sum contract: each worker model folds its clients into an accumulator (``aggregator.accumulate``),
the workers' accumulators are summed in worker order and the ranks' with one ``all_reduce``.

Payloads contract (``aggregator.needs_payloads``): each worker keeps its clients' payloads on
the CPU, keyed by client (``{client: (weight, payload)}``, what a checkpoint can hold); the
workers' mappings are merged and every rank's gathered (``all_gather_object``), and
``finalize`` receives them as ``list[ClientPayload]`` sorted by client. Every rank then holds
every payload of the round, so ``check_payload_budget`` refuses, before any training, a
round whose payloads would not fit ``run.payload_budget_mb``.
"""

from __future__ import annotations

from typing import Any, Callable

from lightning.fabric import Fabric
from torch import Tensor

from fedlight.engine.loop.workers import sum_states
from fedlight.engine.state.client_state_files import state_bytes
from fedlight.engine.state.collectives import gather, sum_across_ranks
from fedlight.errors import UserError
from fedlight.server.aggregator import Aggregator, ClientPayload, State

Kept = dict[int, tuple[float, State]]  # the payloads contract's accumulator: client -> (weight, CPU payload)


def fold(aggregator: Aggregator, acc: Any, client: int, weight: float, payload: State) -> Any:
    """``acc`` with ``client``'s ``payload`` folded in (sum contract) or kept on the CPU (payloads)."""
    if not aggregator.needs_payloads:
        return aggregator.accumulate(acc, payload, weight)
    kept = {k: v.detach().to("cpu", copy=True) for k, v in payload.items()}  # training goes on in the module
    return {**(acc or {}), client: (float(weight), kept)}


def merge_workers(aggregator: Aggregator, accs: list[Any]) -> Any:
    """The worker models' accumulators, in worker order, as one (None: nobody trained)."""
    if not aggregator.needs_payloads:
        return sum_states(accs)
    merged: Kept = {c: entry for acc in accs if acc for c, entry in acc.items()}
    return merged or None


def on_cpu(acc: Any) -> Any:
    """A copy of ``acc`` for a checkpoint (a kept payload is on the CPU already)."""
    if acc is None or not isinstance(next(iter(acc.values()), None), Tensor):
        return acc
    return {k: v.cpu() for k, v in acc.items()}


def finish(fabric: Fabric, aggregator: Aggregator, global_state: State, acc: Any,
           neutral: Callable[[], State]) -> State:
    """The new global state from this rank's ``acc`` (a collective: every rank calls it).

    Args:
        neutral: the payload whose ``aggregator.zeros`` a rank that trained nobody sums (sum contract).
    """
    if aggregator.needs_payloads:
        kept = {c: entry for part in gather(fabric, acc or {}) for c, entry in part.items()}
        return aggregator.finalize(global_state, [ClientPayload(c, *kept[c]) for c in sorted(kept)])
    if acc is None:  # this rank trained nobody: a neutral element keeps the collective aligned
        acc = aggregator.zeros(neutral())
    return aggregator.finalize(global_state, sum_across_ranks(fabric, acc))


def payload_bytes(payload: State, per_round: int) -> int:
    """What a round's payloads take on every rank: ``per_round`` x the payload's bytes."""
    return per_round * state_bytes(payload)


def check_payload_budget(aggregator: Aggregator, payload: State, per_round: int, budget_mb: int,
                         server: str) -> None:
    """Raise a UserError if a payloads-contract round of ``per_round`` clients (every trainable
    client under Poisson sampling, the most a round can draw) would not fit ``budget_mb`` MiB
    (nothing to check for the sum contract)."""
    if not aggregator.needs_payloads:
        return
    need = payload_bytes(payload, per_round)
    if need > budget_mb * 2 ** 20:
        raise UserError(f"server.name={server} keeps every client's payload of a round: {per_round} clients x "
                        f"{state_bytes(payload) / 2 ** 20:.1f} MiB = {need / 2 ** 20:.1f} MiB, over "
                        f"run.payload_budget_mb={budget_mb}; raise run.payload_budget_mb or lower clients.fraction")
