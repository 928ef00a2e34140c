"""The round loop of an asynchronous server (``asynchrony.mode``: FedBuff or FedAsync; docs/time.md).

Every round is one server step and reads as ``Federation.run_round`` does; two of its steps differ. Step 2
plans the step on the virtual clock (``InFlight.plan``): the clients dispatched at the current model version
are the round's, dealt to the worker models and ranks as any round's are, and train from that version with
their private state (a BYOL target, a MoCo queue, SOFed's buffer) as in a synchronous round. Their payloads
are kept whole (never folded into a sum: each waits for its own trip to land). Step 6 gathers them from
every rank and lets ``InFlight.land`` apply the updates that land in this step. The plan needs no training
result, so the order of events is the same for any ``fabric.workers`` and ``fabric.devices``.
"""

from __future__ import annotations

from typing import Any

from fedlight.engine.loop.async_rounds import InFlight
from fedlight.engine.loop.federation import Federation
from fedlight.engine.loop.interfaces import Report
from fedlight.engine.state.collectives import gather


class AsyncFederation(Federation):
    """A ``Federation`` whose rounds are an asynchronous server's steps.

    Args:
        *args: ``Federation``'s, with ``in_flight`` among its plug-ins (its checkpoint entries and columns).
        in_flight: the held updates and the event schedule.
    """

    def __init__(self, *args: Any, in_flight: InFlight) -> None:
        super().__init__(*args)
        assert in_flight in self.hooks, "in_flight must be one of the plug-ins"
        self.in_flight = in_flight
        self.clients.keeps_payloads = True  # each payload waits for its own trip to land

    def _deal_clients(self, round_: int) -> list[list[int]]:
        """Step 2: plan the server step; its clients that train from the current version, dealt to this
        rank's worker models."""
        return self.clients.deal_to_workers(self.in_flight.plan(), self.module)

    def _aggregate(self, round_: int, acc: Any, reports: list[Report]) -> None:
        """Step 6: every rank's kept payloads (a collective), then the updates that land in this step applied
        (``InFlight.land``) into the worker model."""
        kept = {c: entry for part in gather(self.fabric, acc or {}) for c, entry in part.items()}
        self._set_global(self.in_flight.land(kept, self.run_state.global_state))
        self.module.load_partial(self.run_state.global_state)
