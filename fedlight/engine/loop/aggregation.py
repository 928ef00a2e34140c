"""A round's way from the clients' payloads to ``finalize``, for both aggregator contracts.

Sum contract: each worker model folds its clients into an accumulator (``aggregator.accumulate``),
the workers' accumulators are summed in worker order and the ranks' with one ``all_reduce``.

Payloads contract (``aggregator.needs_payloads``): each worker keeps its clients' payloads on
the CPU, keyed by client (``{client: (weight, payload)}``, what a checkpoint can hold); the
workers' mappings are merged and every rank's gathered (``all_gather_object``), and
``finalize`` receives them as ``list[ClientPayload]`` sorted by client. Every rank then holds
every payload of the round, so ``check_payload_budget`` refuses, before any training, a
round whose payloads would not fit ``run.payload_budget_mb``.

A fault model that ``needs_payloads`` (attackers that see the benign clients' payloads, e.g.
ALIE) makes either contract's round keep them so (``keep``); once every client has trained,
``revised`` gathers them, lets the fault model revise them and folds this rank's again for the
aggregator's contract.
"""

from __future__ import annotations

from typing import Any, Callable

from lightning.fabric import Fabric
from torch import Tensor

from fedlight.engine.loop.interfaces import FaultModel, Report
from fedlight.engine.loop.workers import sum_states
from fedlight.engine.state.client_state_files import state_bytes
from fedlight.engine.state.collectives import gather, sum_across_ranks
from fedlight.errors import UserError
from fedlight.server.aggregator import Aggregator, ClientPayload, State
from fedlight.server.ops import update_norm

Kept = dict[int, tuple[float, State]]  # the payloads contract's accumulator: client -> (weight, CPU payload)


def fold(aggregator: Aggregator, acc: Any, client: int, weight: float, payload: State, keep: bool = False) -> Any:
    """``acc`` with ``client``'s ``payload`` folded in (sum contract) or kept on the CPU (payloads
    contract, or ``keep``: the fault model revises the round's payloads)."""
    if not (aggregator.needs_payloads or keep):
        return aggregator.accumulate(acc, payload, weight)
    kept = {k: v.detach().to("cpu", copy=True) for k, v in payload.items()}  # training goes on in the module
    return {**(acc or {}), client: (float(weight), kept)}


def merge_workers(aggregator: Aggregator, accs: list[Any], keep: bool = False) -> Any:
    """The worker models' accumulators, in worker order, as one (None: nobody trained)."""
    if not (aggregator.needs_payloads or keep):
        return sum_states(accs)
    merged: Kept = {c: entry for acc in accs if acc for c, entry in acc.items()}
    return merged or None


def on_cpu(acc: Any) -> Any:
    """A copy of ``acc`` for a checkpoint (a kept payload is on the CPU already)."""
    if acc is None or not isinstance(next(iter(acc.values()), None), Tensor):
        return acc
    return {k: v.cpu() for k, v in acc.items()}


def revised(fabric: Fabric, aggregator: Aggregator, faults: FaultModel, round_: int, global_state: State,
            acc: Kept | None, reports: list[Report], wire: Callable[[int, State], State] | None = None) -> Any:
    """With ``faults.needs_payloads``: this rank's kept payloads as ``faults.revise`` leaves them,
    seen among every rank's, then folded for the aggregator's contract (a sum, on the global
    model's device, in client order); a replaced payload goes through ``wire(client, payload)`` (what
    the server receives of it: ``server.compress``) and one that ``faults.problem`` then refuses is
    excluded and its client's report (every rank's copy) says it diverged. Else ``acc`` as it is.
    A collective: every rank calls it."""
    if not faults.needs_payloads:
        return acc
    kept = {c: entry for part in gather(fabric, acc or {}) for c, entry in part.items()}
    device = next(iter(global_state.values())).device if global_state else "cpu"
    by_client, out = {rep["client"]: rep for rep in reports}, None
    for client, weight, payload in faults.revise(round_, [ClientPayload(c, *kept[c]) for c in sorted(kept)]):
        if payload is not kept[client][1]:  # replaced: sent and checked like any upload
            payload = wire(client, payload) if wire is not None else payload
            report = by_client[client]
            problem = faults.problem(report["loss"], payload)
            if problem:
                report.update(status="diverged", detail=problem)
                continue
            if "update_norm" in report:
                report["update_norm"] = update_norm(payload, {k: v.cpu() for k, v in global_state.items()})
        if client in (acc or {}):  # this rank's client
            out = ({**(out or {}), client: (weight, payload)} if aggregator.needs_payloads
                   else aggregator.accumulate(out, {k: v.to(device) for k, v in payload.items()}, weight))
    return out


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
                         server: str, attack: str | None = None) -> None:
    """Raise a UserError if a round that keeps its payloads (payloads contract, or ``attack``: the
    name of an attack that sees them) of ``per_round`` clients (every trainable client under
    Poisson sampling, the most a round can draw) would not fit ``budget_mb`` MiB (nothing to check
    for a sum-contract round)."""
    if not aggregator.needs_payloads and attack is None:
        return
    keeper = f"server.name={server}" if aggregator.needs_payloads else f"faults.attack={attack}"
    refuse_over_budget(payload, per_round, budget_mb, f"{keeper} keeps every client's payload of a round: "
                       f"{per_round} clients", "clients.fraction")


def refuse_over_budget(payload: State, count: int, budget_mb: int, held: str, lower: str) -> None:
    """Raise a one-line UserError if ``count`` copies of ``payload`` would not fit ``budget_mb`` MiB;
    ``held`` says who keeps them and how many (the sentence up to "x <size>"), ``lower`` the key to lower."""
    need = payload_bytes(payload, count)
    if need > budget_mb * 2 ** 20:
        raise UserError(f"{held} x {state_bytes(payload) / 2 ** 20:.1f} MiB = {need / 2 ** 20:.1f} MiB, over "
                        f"run.payload_budget_mb={budget_mb}; raise run.payload_budget_mb or lower {lower}")
