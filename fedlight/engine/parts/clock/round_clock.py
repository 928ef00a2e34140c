"""Synchronous rounds on the virtual clock (Bonawitz et al., "Towards Federated Learning at Scale", MLSys
2019, sec. 2: selection among online devices, over-selection, a reporting deadline).

A round starts at the virtual second the last one ended. Its clients are drawn among those online then
(with ``clock.availability``; if nobody is, the round waits for the first to come online), as many as the
round samples, or ``clock.over_selection`` more. Each trip's length is known before anyone trains
(``fedlight.clock.devices.TripCost``): with over-selection the round keeps the first ones to finish, as many
as it would sample without it; with ``clock.deadline_s`` a client whose trip ends later is dropped. A kept
client's work is the same as without the clock; a dropped one downloads the model, trains nothing and
counts as ``dropped`` in ``faults.csv`` (its detail says why). The round lasts until its slowest kept client
lands, or until the deadline when someone missed it. With no availability, over-selection or deadline set,
the clock only adds its columns: the run's numbers are those of the same recipe without it, bit for bit.
"""

from __future__ import annotations

import math
from typing import Any, Callable

from fedlight.clock.devices import ClockOptions, TripCost
from fedlight.engine.loop.interfaces import Report, RoundPlugin, State
from fedlight.engine.output.virtual_time import log_time, updates_total
from fedlight.engine.state.client_state_files import state_bytes
from fedlight.errors import UserError
from fedlight.seeding import numpy_rng


class RoundClock(RoundPlugin):
    """Virtual time of synchronous rounds.

    Args:
        options: the clock's settings; cost: each client's trip in a round.
        clients: the trainable client ids; seed: the run seed.
        dropped: ``(round, client) -> bool``, whether a client's fault drops it (it never lands).
        track_bytes: a client moves the global state each way, whose size may change between rounds
            (LG-FedAvg keeping its local layers): the trip's bytes follow the round's global state.
        up_size: with ``track_bytes``, the bytes a client uploads for a model shaped as the global state
            (the state's own, or its compressed update's: ``server.compress``).
    """

    def __init__(self, options: ClockOptions, cost: TripCost, clients: list[int], seed: int,
                 dropped: Callable[[int, int], bool], track_bytes: bool = False,
                 up_size: Callable[[State], int] = state_bytes) -> None:
        self.options, self.cost, self.clients, self.seed, self.dropped = options, cost, clients, seed, dropped
        self.track_bytes, self.up_size = track_bytes, up_size
        self.now, self.busy, self.waited = 0.0, 0.0, 0.0  # virtual seconds; client-seconds working and idle
        self.round_, self.start = -1, 0.0
        self.trips: dict[int, float] = {}  # this round's clients -> their trip's seconds
        self.late: dict[int, str] = {}  # this round's clients that are dropped by the clock -> why

    def on_round_start(self, round_: int, global_state: State) -> None:
        self.round_ = round_
        if self.track_bytes:
            self.cost.down_bytes, self.cost.up_bytes = state_bytes(global_state), self.up_size(global_state)

    def participants(self, sampled: list[int]) -> list[int]:
        """The round's clients: the loop's sample where every client is online and none is over-selected,
        else a draw of as many (or ``over_selection`` more) among those online at the round's start."""
        o, self.start = self.options, self.now
        chosen = sampled
        if o.availability != "always" or o.over_selection:
            online = self._online()
            n = min(len(online), math.ceil(len(sampled) * (1 + o.over_selection)))
            picks = numpy_rng(self.seed, "sample", self.round_).choice(len(online), n, replace=False)
            chosen = sorted(online[i] for i in picks)
        self.trips = {c: self.cost(c, self.round_) for c in chosen}
        self.late = self._late(len(sampled))
        return chosen

    def _online(self) -> list[int]:
        """The clients online at the round's start, which waits (``self.start``) until there is one."""
        availability = self.cost.devices.availability
        online = availability.online_among(self.clients, self.start)
        if not online:
            self.start = min(availability.next_online(c, self.start) for c in self.clients)
            if math.isinf(self.start):
                raise UserError(f"round {self.round_ + 1}: no client is online at virtual second {self.now:.0f} "
                                "and none comes online again: the availability trace ends; lengthen its windows "
                                "or lower rounds")
            online = availability.online_among(self.clients, self.start)
        return online

    def _late(self, keep: int) -> dict[int, str]:
        """The round's clients the clock drops: with over-selection, those past the first ``keep`` to land
        (among those that land at all); with a deadline, those whose trip ends after it."""
        landing = sorted((seconds, c) for c, seconds in self.trips.items() if not self.dropped(self.round_, c))
        late = {c: f"over-selected: not among the first {keep} to land" for _, c in landing[keep:]}
        deadline = self.options.deadline_s
        if deadline is not None:
            late.update({c: f"late: trip {s:.3g} s > clock.deadline_s={deadline:g}"
                         for s, c in landing[:keep] if s > deadline})
        return late

    def lateness(self, round_: int, client: int) -> str | None:
        """Why the clock drops ``client`` in ``round_`` (None: it does not)."""
        return self.late.get(client) if round_ == self.round_ else None

    def columns(self, round_: int, reports: list[Report], ledger_rows: list[list],
                history: list[dict[str, Any]]) -> dict[str, Any]:
        """The round's virtual seconds, the run's so far, the idle share of the answering clients' time, and the
        client updates the round applied (its answering clients) and the run so far."""
        landed = [self.trips.get(rep["client"]) or self.cost(rep["client"], round_) for rep in reports
                  if rep["status"] != "dropped"]  # (a later part may have added a client)
        missed = any(reason.startswith("late") for reason in self.late.values())
        length = self.options.deadline_s if missed else max(landed, default=self.options.deadline_s or 0.0)
        if not landed and not missed:  # nobody answered: the server waited for the trips it had sent
            length = max(self.trips.values(), default=0.0)
        self.busy += sum(landed)
        self.waited += sum(length - s for s in landed)
        self.now = self.start + length
        spent = self.busy + self.waited
        applied = sum(rep["status"] == "ok" for rep in reports)
        return {"virtual_seconds": self.now, "round_virtual_seconds": length,
                "idle_share": self.waited / spent if spent else 0.0, "updates_applied": applied,
                "updates_total": updates_total(history, applied)}

    def log_round(self, logger: Any, row: dict[str, Any]) -> dict[str, float]:
        return log_time(logger, row)

    def option_keys(self) -> tuple[str, ...]:
        return ("clock",)

    def state_dict(self) -> dict[str, Any]:
        return {"clock": {"now": self.now, "busy": self.busy, "waited": self.waited}}

    def load_state_dict(self, checkpoint: dict[str, Any]) -> None:
        saved = checkpoint["clock"]
        self.now, self.busy, self.waited = float(saved["now"]), float(saved["busy"]), float(saved["waited"])
