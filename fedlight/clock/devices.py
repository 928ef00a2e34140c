"""Each client's device and availability: what one trip costs on the virtual clock (docs/time.md).

A client's trip is its download, its local work and its upload, as FedScale models a device (Lai et al.,
"FedScale", ICML 2022) and as production cross-device systems time a round (Bonawitz et al., "Towards
Federated Learning at Scale", MLSys 2019):

    trip = 2 x latency + down_bytes / down_rate + samples x seconds_per_sample + up_bytes / up_rate

``samples`` is the local work in samples (its optimizer steps x the batch size); the bytes are what the
communication ledger counts for it. Devices come from a seeded distribution over the clients (``fixed``:
all alike; ``uniform``; ``lognormal``: median ``seconds_per_sample``, log-spread ``sigma``; ``tiers``:
classes of devices with shares, like phones of three generations) or from a trace file. A client can
start a trip only while it is online: always, by a seeded on/off process with exponential periods, or
in the trace's windows. Nothing here sleeps: a trip is a number.
"""

from __future__ import annotations

import bisect
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from fedlight.errors import UserError
from fedlight.seeding import numpy_rng

TIER_KEYS = ("share", "seconds_per_sample", "up_mbps", "down_mbps", "latency_s")
TRACE_KEYS = ("client", "seconds_per_sample", "up_mbps", "down_mbps", "latency_s", "online")
NEEDS_CLOCK = ("deadline_s", "over_selection", "trace")  # keys that mean nothing without clock.devices


@dataclass(frozen=True)
class ClockOptions:
    """The clock's settings (recipe section ``clock``), each checked in one line naming its key.

    Attributes:
        devices: ``none`` (no clock: rounds only, as before), ``fixed``, ``uniform``, ``lognormal``,
            ``tiers`` or ``trace``: how each client's device is drawn.
        seconds_per_sample: a device's compute time per sample (``fixed``; the low end of ``uniform``;
            the median of ``lognormal``).
        max_seconds_per_sample: the high end of ``uniform``.
        sigma: the log-spread of ``lognormal`` (seconds a sample = median x exp(sigma x N(0, 1))).
        tiers: ``tiers``' device classes, each ``{share, seconds_per_sample, up_mbps, down_mbps, latency_s}``
            (share required; the others default to this section's keys); shares sum to 1.
        up_mbps, down_mbps: bandwidth in megabits a second; latency_s: seconds each way.
        trace: a JSON trace file (docs/time.md): per client its device (``devices: trace``) and/or its
            online windows (``availability: trace``).
        availability: ``always``, ``markov`` (on/off periods, exponential with means ``online_s`` and
            ``offline_s``, seeded per client) or ``trace``.
        deadline_s: a synchronous round waits at most this long; a client whose trip would end later is
            dropped (None: it waits for the slowest).
        over_selection: a synchronous round samples this share more clients and keeps the first ones to
            finish, as many as it would sample without it (Bonawitz et al. 2019, sec. 2.2).
    """

    devices: str = "none"
    seconds_per_sample: float = 0.001
    max_seconds_per_sample: float | None = None
    sigma: float = 1.0
    tiers: tuple[dict[str, float], ...] = ()
    up_mbps: float = 10.0
    down_mbps: float = 50.0
    latency_s: float = 0.05
    trace: str | None = None
    availability: str = "always"
    online_s: float = 3600.0
    offline_s: float = 3600.0
    deadline_s: float | None = None
    over_selection: float = 0.0

    @property
    def on(self) -> bool:
        """Whether the run keeps virtual time at all."""
        return self.devices != "none"

    def __post_init__(self) -> None:
        if not self.on:
            set_ = [k for k in NEEDS_CLOCK if getattr(self, k)] + (["availability"] if self.availability != "always"
                                                                  else [])
            if set_:
                raise UserError(f"clock.{set_[0]} needs the virtual clock: set clock.devices (fixed, uniform, "
                                f"lognormal, tiers or trace), or drop clock.{set_[0]}")
            return
        uniform = self.devices == "uniform"
        if uniform != (self.max_seconds_per_sample is not None):
            raise UserError("clock.devices=uniform draws each device's seconds a sample in [clock.seconds_per_sample, "
                            "clock.max_seconds_per_sample]: set both with devices=uniform, and max_seconds_per_sample "
                            "with no other kind")
        if uniform and self.max_seconds_per_sample < self.seconds_per_sample:
            raise UserError(f"clock.max_seconds_per_sample={self.max_seconds_per_sample} is below "
                            f"clock.seconds_per_sample={self.seconds_per_sample}; raise it")
        if (self.devices == "tiers") != bool(self.tiers):
            raise UserError("clock.tiers are the device classes of clock.devices=tiers: set both (e.g. tiers: "
                            "[{share: 0.5, seconds_per_sample: 0.001}, {share: 0.5, seconds_per_sample: 0.01}]) "
                            "or neither")
        check_tiers(self.tiers)
        traced = self.devices == "trace" or self.availability == "trace"
        if traced != (self.trace is not None):
            raise UserError("clock.trace is the file clock.devices=trace or clock.availability=trace reads: set it "
                            "with either, and only then")


def check_tiers(tiers: tuple[dict[str, float], ...]) -> None:
    """Raise a UserError naming the entry of ``clock.tiers`` that is not a device class."""
    for i, tier in enumerate(tiers):
        if not isinstance(tier, dict) or "share" not in tier or set(tier) - set(TIER_KEYS):
            raise UserError(f"clock.tiers[{i}]={tier!r} is no device class: a mapping with share and any of "
                            f"{', '.join(TIER_KEYS[1:])}")
        problem = value_problem(tier)
        if problem:
            raise UserError(f"clock.tiers[{i}]: {problem}")
    if tiers and not math.isclose(sum(t["share"] for t in tiers), 1.0, abs_tol=1e-9):
        raise UserError(f"clock.tiers' shares sum to {sum(t['share'] for t in tiers):g}, not 1; make them add up")


def value_problem(entry: dict[str, Any]) -> str | None:
    """What is wrong with a tier's or trace entry's numbers (None: nothing)."""
    for key in TIER_KEYS:
        v = entry.get(key)
        if v is None:
            continue
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v):
            return f"{key}={v!r} must be a number"
        if v < 0 or (v == 0 and key in ("share", "up_mbps", "down_mbps")):
            return f"{key}={v} must be {'> 0' if key in ('share', 'up_mbps', 'down_mbps') else '>= 0'}"
    return None


class Availability:
    """When each client is online: ``online(c, t)`` and ``next_online(c, t)`` (base: always)."""

    def online(self, client: int, t: float) -> bool:
        return True

    def online_among(self, clients: list[int], t: float) -> list[int]:
        """Those of ``clients`` online at ``t``, in their order."""
        return clients

    def next_online(self, client: int, t: float) -> float:
        """The first time >= ``t`` at which ``client`` is online (inf: never again)."""
        return t


class Windows(Availability):
    """Online during given half-open windows ``[start, end)`` per client, offline outside them.

    Args:
        windows: per client, its sorted, non-overlapping ``(start, end)`` windows in seconds.
    """

    def __init__(self, windows: list[list[tuple[float, float]]]) -> None:
        self.windows = windows

    def _extend(self, client: int, t: float) -> None:
        """Make sure ``client``'s windows are known past ``t`` (a fixed trace knows them all)."""

    def _at(self, client: int, t: float) -> int:
        """The index of the first window of ``client`` that ends after ``t``."""
        self._extend(client, t)
        return bisect.bisect_right(self.windows[client], t, key=lambda window: window[1])

    def online(self, client: int, t: float) -> bool:
        i, spans = self._at(client, t), self.windows[client]
        return i < len(spans) and spans[i][0] <= t

    def online_among(self, clients: list[int], t: float) -> list[int]:
        return [c for c in clients if self.online(c, t)]

    def next_online(self, client: int, t: float) -> float:
        i, spans = self._at(client, t), self.windows[client]
        return math.inf if i == len(spans) else max(t, spans[i][0])


class OnOff(Windows):
    """A seeded on/off process per client: online and offline periods alternate, exponential with means
    ``online_s`` and ``offline_s``; a client starts online with the stationary probability
    ``online_s / (online_s + offline_s)``. Each client's periods come from its own generator (seed,
    client), drawn as far as asked, so the answer never depends on the order of the questions."""

    def __init__(self, clients: int, seed: int, online_s: float, offline_s: float) -> None:
        super().__init__([[] for _ in range(clients)])
        self.seed, self.means = seed, (online_s, offline_s)
        self.rngs: dict[int, np.random.Generator] = {}
        self.horizon = [0.0] * clients  # each client's periods are drawn up to here
        self.is_on = [False] * clients  # the state the client is in at its horizon

    def _extend(self, client: int, t: float) -> None:
        if client not in self.rngs:
            self.rngs[client] = rng = numpy_rng(self.seed, "availability", client)
            self.is_on[client] = bool(rng.random() < self.means[0] / sum(self.means))
        rng, spans = self.rngs[client], self.windows[client]
        while self.horizon[client] <= t or not spans or spans[-1][1] <= t:  # up to t, and one window past it
            start = self.horizon[client]
            self.horizon[client] = end = start + float(rng.exponential(self.means[not self.is_on[client]]))
            if self.is_on[client]:
                self.windows[client].append((start, end))
            self.is_on[client] = not self.is_on[client]


@dataclass
class DeviceTable:
    """Every client's device, as arrays of shape ``(N,)``, and its availability.

    Attributes:
        seconds_per_sample: compute time per sample; up_rate, down_rate: bytes a second; latency: seconds each way.
        availability: when each client is online.
    """

    seconds_per_sample: np.ndarray
    up_rate: np.ndarray
    down_rate: np.ndarray
    latency: np.ndarray
    availability: Availability

    def trip(self, client: int, samples: float, down_bytes: int, up_bytes: int) -> float:
        """The seconds of ``client``'s trip: download, ``samples`` samples of local work, upload."""
        return float(2 * self.latency[client] + down_bytes / self.down_rate[client]
                     + samples * self.seconds_per_sample[client] + up_bytes / self.up_rate[client])


def build_devices(options: ClockOptions, clients: int, seed: int) -> DeviceTable:
    """The devices and availability of ``clients`` clients as ``options`` say (None of them sleeps); raises
    a UserError for a trace file that is missing, malformed, lacks a client or has a negative speed."""
    trace = load_trace(Path(options.trace), clients, options) if options.trace else None
    base = {"seconds_per_sample": options.seconds_per_sample, "up_mbps": options.up_mbps,
            "down_mbps": options.down_mbps, "latency_s": options.latency_s}
    rng = numpy_rng(seed, "devices")
    if options.devices == "trace":
        rows = [{**base, **entry} for entry in trace]
    elif options.devices == "tiers":
        tiers = [{**base, **tier} for tier in options.tiers]
        which = rng.choice(len(tiers), size=clients, p=np.array([t["share"] for t in tiers]) / sum(
            t["share"] for t in tiers))
        rows = [tiers[i] for i in which]
    else:
        rows = [dict(base) for _ in range(clients)]
        speeds = {"fixed": lambda: np.full(clients, options.seconds_per_sample),
                  "uniform": lambda: rng.uniform(options.seconds_per_sample, options.max_seconds_per_sample, clients),
                  "lognormal": lambda: options.seconds_per_sample * np.exp(options.sigma * rng.standard_normal(clients))}
        for row, speed in zip(rows, speeds[options.devices]()):
            row["seconds_per_sample"] = float(speed)
    column = lambda key, scale=1.0: np.array([float(r[key]) * scale for r in rows])  # noqa: E731
    availability: Availability = Availability()
    if options.availability == "markov":
        availability = OnOff(clients, seed, options.online_s, options.offline_s)
    elif options.availability == "trace":
        availability = Windows([[tuple(w) for w in entry["online"]] for entry in trace])
    return DeviceTable(column("seconds_per_sample"), column("up_mbps", 1e6 / 8), column("down_mbps", 1e6 / 8),
                       column("latency_s"), availability)


def load_trace(path: Path, clients: int, options: ClockOptions) -> list[dict[str, Any]]:
    """The trace file's entries in client order, checked: a JSON object ``{"clients": [...]}`` with one entry
    per client 0..N-1 (``client`` its id; with ``devices: trace`` its ``seconds_per_sample``, and optionally
    ``up_mbps``, ``down_mbps``, ``latency_s``; with ``availability: trace`` its ``online`` windows, a list of
    ``[start, end]`` seconds, sorted and disjoint)."""
    where = f"clock.trace={path}"
    try:
        entries = json.loads(path.read_text(encoding="utf-8"))["clients"]
    except FileNotFoundError:
        raise UserError(f"{where}: no such file; give the path of a trace file (docs/time.md)") from None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise UserError(f"{where} is no trace file ({type(exc).__name__}: {exc}); it must be a JSON object "
                        '{"clients": [{"client": 0, ...}, ...]} (docs/time.md)') from None
    if not isinstance(entries, list) or not all(isinstance(e, dict) and isinstance(e.get("client"), int)
                                                for e in entries):
        raise UserError(f'{where}: "clients" must be a list of objects, each with an integer "client"')
    by_client = {e["client"]: e for e in entries}
    missing = [c for c in range(clients) if c not in by_client]
    if missing:
        raise UserError(f"{where} has no entry for client {missing[0]} ({len(missing)} of {clients} missing): "
                        f"give every client 0..{clients - 1} one")
    ordered = [by_client[c] for c in range(clients)]
    for entry in ordered:
        problem = trace_entry_problem(entry, options)
        if problem:
            raise UserError(f"{where}: client {entry['client']}'s {problem}")
    return ordered


def trace_entry_problem(entry: dict[str, Any], options: ClockOptions) -> str | None:
    """What is wrong with one client's trace entry for ``options`` (None: nothing)."""
    unknown = sorted(set(entry) - set(TRACE_KEYS))
    if unknown:
        return f"key {unknown[0]!r} is none of {', '.join(TRACE_KEYS)}"
    if options.devices == "trace" and "seconds_per_sample" not in entry:
        return "seconds_per_sample is missing (clock.devices=trace reads it)"
    problem = value_problem(entry)
    if problem:
        return problem
    if options.availability != "trace":
        return None
    windows = entry.get("online")
    if not isinstance(windows, list) or not all(isinstance(w, list) and len(w) == 2 and all(
            isinstance(x, (int, float)) and not isinstance(x, bool) for x in w) for w in windows):
        return "online must be a list of [start, end] windows in seconds (clock.availability=trace reads it)"
    flat = [x for w in windows for x in w]
    if any(x < 0 for x in flat) or any(s >= e for s, e in windows) or flat != sorted(flat):
        return f"online windows {windows} must be sorted, disjoint, non-negative, each start before its end"
    return None


@dataclass
class TripCost:
    """What one client's trip costs in a round, from its planned work and the bytes it moves.

    Attributes:
        devices: every client's device.
        steps: ``client -> optimizer steps`` of a full local round (the schedule's plan).
        batch_size: samples a step.
        work: ``(round, client) -> share`` of its steps the client does (a straggler's < 1).
        down_bytes: what a client downloads; up_bytes: what it uploads (the ledger's counts).
    """

    devices: DeviceTable
    steps: Callable[[int], int]
    batch_size: int
    work: Callable[[int, int], float]
    down_bytes: int
    up_bytes: int

    def __call__(self, client: int, round_: int) -> float:
        """The seconds of ``client``'s trip in (0-based) ``round_``."""
        samples = self.steps(client) * self.batch_size * self.work(round_, client)
        return self.devices.trip(client, samples, self.down_bytes, self.up_bytes)
