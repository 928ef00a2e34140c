"""The asynchronous server's event schedule: who trains from which model version, and which updates reach
the server at each of its steps, in virtual-time order (FedAsync, Xie et al. 2019; FedBuff, Nguyen et al.,
AISTATS 2022).

``concurrency`` clients are in flight at once. A client is dispatched with the model version the server
holds at that moment and lands when its trip (``fedlight.clock.devices``) ends. The server applies its
buffer every ``buffer`` landed updates (FedAsync: every one); a landed client's slot is filled at once by a
new client, drawn among those online, idle and not yet dispatched at this version. Events at the same
instant land first, then the server steps (if its buffer is full), then the freed slots are filled: so
clients whose trips all take the same time give synchronous rounds exactly (each version's first draw is
the synchronous sample of that round: ``numpy_rng(seed, "sample", version)``).

The schedule needs no training result: a trip's length depends on the client's device, its planned work
and the bytes it moves, and a dropped client (``faults.dropout``) is known before it trains. So one server
step is planned whole before any client trains (``plan``), the clients of that version train together, and
the step's state is committed after it (``commit``): a checkpoint holds the committed state, from which a
resumed run plans the same step again.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Callable

from fedlight.clock.devices import Availability
from fedlight.errors import UserError
from fedlight.seeding import numpy_rng

MODES = ("sync", "fedbuff", "fedasync")
STALENESS = ("constant", "polynomial", "hinge")


@dataclass(frozen=True)
class AsyncOptions:
    """The asynchronous server's settings (recipe section ``asynchrony``).

    Attributes:
        mode: ``sync`` (rounds in lockstep), ``fedbuff`` or ``fedasync``.
        concurrency: clients in flight at once.
        buffer: K, the landed updates a FedBuff step applies (FedAsync: 1). None: 10 for FedBuff.
        server_lr: FedBuff's server learning rate (eta_g).
        alpha: FedAsync's mixing weight.
        staleness: s(tau), the weight of an update ``tau`` versions old: ``constant`` (1), ``polynomial``
            ((1 + tau)^-a; FedBuff's 1/sqrt(1 + tau) at a = 0.5) or ``hinge`` (1 up to b, then
            1 / (a (tau - b) + 1)), Xie et al.'s three.
        staleness_a, staleness_b: a and b of s.
    """

    mode: str = "sync"
    concurrency: int = 10
    buffer: int | None = None
    server_lr: float = 1.0
    alpha: float = 0.6
    staleness: str = "polynomial"
    staleness_a: float = 0.5
    staleness_b: float = 4.0

    @property
    def on(self) -> bool:
        return self.mode != "sync"

    @property
    def step_size(self) -> int:
        """K: the landed updates one server step applies."""
        return 1 if self.mode == "fedasync" else self.buffer or 10

    def __post_init__(self) -> None:
        if self.mode == "fedasync" and self.buffer not in (None, 1):
            raise UserError(f"asynchrony.buffer={self.buffer}: asynchrony.mode=fedasync applies every update as it "
                            "lands (a buffer of 1); drop asynchrony.buffer, or use mode=fedbuff")


def staleness_weight(options: AsyncOptions, tau: int) -> float:
    """s(tau) for an update ``tau`` >= 0 versions old (Xie et al. 2019, sec. 5.2; Nguyen et al. 2022, eq. 3).

    Examples:
        >>> staleness_weight(AsyncOptions(mode="fedbuff"), 3)
        0.5
    """
    a, b = options.staleness_a, options.staleness_b
    if options.staleness == "constant":
        return 1.0
    if options.staleness == "polynomial":
        return float((1 + tau) ** -a)
    return 1.0 if tau <= b else 1.0 / (a * (tau - b) + 1)


@dataclass(frozen=True)
class Trip:
    """One client's trip: dispatched at ``start`` with model ``version``, lands at ``end``.

    Attributes:
        seq: the trip's number in dispatch order (ties at one instant land in this order).
        counts: False for a client that drops (``faults.dropout``): it frees its slot and brings nothing.
    """

    seq: int
    client: int
    version: int
    start: float
    end: float
    counts: bool = True


@dataclass
class Timeline:
    """The committed state of the schedule (what a checkpoint keeps).

    Attributes:
        now: the virtual seconds of the server's last event.
        version: the model version the server holds (its steps so far).
        flying: trips under way; landed: landed updates not yet applied (a step that filled mid-instant).
        seq: trips dispatched so far; draws: dispatch draws made at ``version``; dispatched: its clients.
        busy: client-seconds of finished trips; slot_seconds: concurrency x seconds elapsed.
    """

    now: float = 0.0
    version: int = 0
    flying: list[Trip] = field(default_factory=list)
    landed: list[Trip] = field(default_factory=list)
    seq: int = 0
    draws: int = 0
    dispatched: list[int] = field(default_factory=list)
    busy: float = 0.0
    slot_seconds: float = 0.0


@dataclass
class Step:
    """One server step as planned: the trips that train from this version, those it applies, and the time."""

    train: list[Trip]
    applied: list[Trip]
    now: float


class EventSchedule:
    """Plans server steps over a federation's trainable clients (pure: no training, no sleeping).

    Args:
        options: the asynchronous settings; clients: the trainable client ids; seed: the run seed.
        availability: who is online when; trip_seconds: ``(client, version) -> seconds`` of a trip.
        dropped: ``(version, client) -> bool``, whether a client dispatched at that version drops.
    """

    def __init__(self, options: AsyncOptions, clients: list[int], seed: int, availability: Availability,
                 trip_seconds: Callable[[int, int], float], dropped: Callable[[int, int], bool]) -> None:
        self.options, self.clients, self.seed, self.availability = options, clients, seed, availability
        self.trip_seconds, self.dropped = trip_seconds, dropped
        self.timeline = Timeline()
        self.pending: Timeline | None = None  # the state after the planned step, until ``commit``

    def plan(self) -> Step:
        """The next server step, from the committed state (planning twice gives the same step)."""
        t = self.timeline  # trips are frozen: copying its lists is enough for planning to change only the copy
        line = replace(t, flying=list(t.flying), landed=list(t.landed), dispatched=list(t.dispatched))
        v, k = line.version, self.options.step_size
        if line.seq == 0:
            self._dispatch(line, self.options.concurrency)
        train = [trip for trip in line.flying if trip.version == v]
        while sum(trip.counts for trip in line.landed) < k:
            if not line.flying:
                if not self._wait_for_someone(line):
                    break  # every client has trained from this version: the step applies what has landed
                train += self._dispatch(line, self.options.concurrency)
                continue
            end = min(trip.end for trip in line.flying)
            landing = [trip for trip in line.flying if trip.end == end]  # in dispatch order
            line.flying = [trip for trip in line.flying if trip.end != end]
            self._advance(line, end)
            line.busy += sum(trip.end - trip.start for trip in landing)
            line.landed += landing
            if sum(trip.counts for trip in line.landed) < k:
                train += self._dispatch(line, len(landing))
        counted = [trip for trip in line.landed if trip.counts]
        applied, line.landed = counted[:k], counted[k:]
        line.version, line.draws, line.dispatched = v + 1, 0, []
        self._dispatch(line, self.options.concurrency - len(line.flying))  # the freed slots, from version v + 1
        self.pending = line
        return Step(train, applied, line.now)

    def commit(self) -> None:
        """The planned step happened: its state becomes the committed one."""
        assert self.pending is not None, "plan() first"
        self.timeline, self.pending = self.pending, None

    def _advance(self, line: Timeline, t: float) -> None:
        line.slot_seconds += self.options.concurrency * (t - line.now)
        line.now = t

    def _dispatch(self, line: Timeline, n: int) -> list[Trip]:
        """Up to ``n`` new trips at ``line.now`` from ``line.version``: drawn uniformly among the clients online,
        not in flight and not dispatched at this version yet (the version's first draw as a synchronous round's)."""
        busy = {trip.client for trip in line.flying} | set(line.dispatched)
        idle = self.availability.online_among([c for c in self.clients if c not in busy], line.now)
        n = min(n, len(idle))
        if n <= 0:
            return []
        keys = (line.version,) if line.draws == 0 else (line.version, line.draws)
        drawn = sorted(idle[i] for i in numpy_rng(self.seed, "sample", *keys).choice(len(idle), n, replace=False))
        line.draws += 1
        trips = []
        for client in drawn:
            end = line.now + self.trip_seconds(client, line.version)
            trips.append(Trip(line.seq, client, line.version, line.now, end, not self.dropped(line.version, client)))
            line.seq += 1
        line.flying += trips
        line.dispatched += drawn
        return trips

    def _wait_for_someone(self, line: Timeline) -> bool:
        """Nobody is in flight and the buffer is not full: the clock moves on to the first idle client online;
        False when every client has been dispatched at this version already."""
        idle = [c for c in self.clients if c not in set(line.dispatched)]
        if not idle:
            return False
        t = min((self.availability.next_online(c, line.now) for c in idle), default=math.inf)
        if math.isinf(t):
            raise UserError(f"at virtual second {line.now:.0f} no client is in flight and none comes online again "
                            f"(version {line.version}): the availability trace ends; lengthen its windows or "
                            "lower rounds")
        self._advance(line, t)
        return True

    def state_dict(self) -> dict[str, Any]:
        return {"async_timeline": asdict(self.timeline)}

    def load_state_dict(self, checkpoint: dict[str, Any]) -> None:
        saved = dict(checkpoint["async_timeline"])
        saved["flying"] = [Trip(**t) for t in saved["flying"]]
        saved["landed"] = [Trip(**t) for t in saved["landed"]]
        self.timeline, self.pending = Timeline(**saved), None
