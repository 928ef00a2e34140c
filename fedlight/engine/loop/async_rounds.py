"""The updates in flight between an asynchronous server's steps, and how each step applies those that land.

A round of an asynchronous run is one server step (``fedlight.clock.events``): the clients dispatched at
this model version train together from it (``AsyncFederation``), their results are held until their
trips land, and the step applies the updates that land in it: FedBuff's buffer through the run's
aggregator, or FedAsync's mixing (``fedlight.server.asynchronous``). A held update that lands in the same
step it trained in is the client's model itself; one that lands later is kept as its change from the
version it started from (``y - x_v``), to be rebased on the server's model when it lands (FedAsync keeps the
model: it mixes models, not changes). Only the model's parameters are changes; its statistics (BatchNorm's
running mean and variance, its batch count) are the client's own, as a synchronous round averages them:
a variance rebased on a model whose variance is lower can fall below zero. What is held, the event schedule's state and the clock are in every
checkpoint, so a resumed run lands the same updates at the same virtual seconds.
"""

from __future__ import annotations

from typing import Any

from fedlight.clock.events import AsyncOptions, EventSchedule, Step, staleness_weight
from fedlight.engine.loop.interfaces import Report, RoundPlugin, State
from fedlight.engine.output.virtual_time import log_staleness, log_time, updates_total
from fedlight.server.aggregator import Aggregator
from fedlight.server.asynchronous import Landed, apply_buffer, mix

Held = tuple[float, State, bool]  # a trip's held update: (weight, state, whether it is a change from its version)


class InFlight(RoundPlugin):
    """Holds the trained updates whose trips have not landed and applies those that land.

    Args:
        schedule: the event schedule (who trains from which version, what lands when).
        options: the asynchronous settings (mode, server learning rate, staleness function).
        aggregator: FedBuff's buffer rule.
        parameters: the names of the model's parameters in its state (what a held change is taken of).
    """

    def __init__(self, schedule: EventSchedule, options: AsyncOptions, aggregator: Aggregator,
                 parameters: set[str]) -> None:
        self.schedule, self.options, self.aggregator, self.parameters = schedule, options, aggregator, parameters
        self.held: dict[int, Held] = {}  # trip seq -> its update
        self.step: Step | None = None
        self.staleness: list[int] = []  # the versions behind of each update the last step applied

    def plan(self) -> list[int]:
        """Plan the next server step; the clients that train from the current version, in dispatch order."""
        self.step = self.schedule.plan()
        return [trip.client for trip in self.step.train]

    def land(self, kept: dict[int, tuple[float, State]], global_state: State) -> State:
        """Hold the updates trained this step (``kept``: client -> (weight, its model on the CPU); a dropped
        or diverged client has none), apply those that land in it and commit the step; the new global state.

        ``kept``'s models are this step's own copies (``aggregation.fold``): a change is taken, and rebased,
        in place, so that holding 100 updates allocates no model beyond the copy each client made."""
        step, version = self.step, self.schedule.timeline.version
        lands_now = {trip.seq for trip in step.applied}
        on_cpu = {k: v.detach().cpu() for k, v in global_state.items()}
        for trip in step.train:
            if trip.client in kept:
                weight, model = kept[trip.client]
                as_change = trip.seq not in lands_now and self.options.mode == "fedbuff"
                self.held[trip.seq] = (weight, {k: v.sub_(on_cpu[k]) if k in self.parameters else v
                                                for k, v in model.items()} if as_change else model, as_change)
        landed = [(trip, self.held.pop(trip.seq)) for trip in step.applied if trip.seq in self.held]
        self.staleness = [version - trip.version for trip, _ in landed]
        self.schedule.commit()
        if self.options.mode == "fedasync":
            for (trip, (_, model, _)), tau in zip(landed, self.staleness):
                global_state = mix(global_state, model, self.options.alpha * staleness_weight(self.options, tau))
            return global_state
        updates = [Landed(trip.client, weight, staleness_weight(self.options, tau),
                          {k: v.add_(on_cpu[k]) if k in self.parameters else v for k, v in model.items()}
                          if as_change else model)
                   for (trip, (weight, model, as_change)), tau in zip(landed, self.staleness)]
        return apply_buffer(self.aggregator, global_state, updates, self.options.server_lr)

    def columns(self, round_: int, reports: list[Report], ledger_rows: list[list],
                history: list[dict[str, Any]]) -> dict[str, Any]:
        """The step's virtual seconds (since the run began), the idle share of the slots' time so far, the
        updates it applied and their staleness."""
        line, taus = self.schedule.timeline, self.staleness
        busy = line.busy + sum(max(0.0, line.now - trip.start) for trip in line.flying)
        idle = max(0.0, 1 - busy / line.slot_seconds) if line.slot_seconds else 0.0  # no -4e-16 of rounding
        return {"virtual_seconds": line.now, "idle_share": idle,
                "updates_applied": len(taus), "updates_total": updates_total(history, len(taus)),
                "staleness": list(taus),
                "staleness_mean": sum(taus) / len(taus) if taus else None, "staleness_max": max(taus, default=None)}

    def log_round(self, logger: Any, row: dict[str, Any]) -> dict[str, float]:
        scalars = log_time(logger, row)
        return {**scalars, **({"async/staleness_mean": row["staleness_mean"]} if row["staleness_mean"] is not None
                              else {})}

    def log_clients(self, logger: Any, round_: int, reports: list[Report]) -> None:
        log_staleness(logger, round_, self.staleness)

    def option_keys(self) -> tuple[str, ...]:
        return ("clock", "asynchrony")

    def state_dict(self) -> dict[str, Any]:
        return {**self.schedule.state_dict(), "async_held": dict(self.held)}

    def load_state_dict(self, checkpoint: dict[str, Any]) -> None:
        self.schedule.load_state_dict(checkpoint)
        self.held = {int(seq): (float(w), dict(state), bool(change))
                     for seq, (w, state, change) in checkpoint["async_held"].items()}
