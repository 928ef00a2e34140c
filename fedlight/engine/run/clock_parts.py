"""From a recipe's ``clock`` and ``asynchrony`` sections to the parts that keep virtual time (docs/time.md).

``timing_options`` checks, before anything is read or written, that the clock's settings hold and go with
the rest of the recipe (a trace file is read and checked here too); ``build_timing`` makes the synchronous
rounds' clock (``engine/parts/clock``) or the asynchronous server's schedule and held updates
(``engine/loop/async_rounds.py``).

Which servers can run asynchronously is declared by what they are: a server whose clients upload their
model (``payload_is_state``) and that keeps one global model can be FedBuff's buffer rule; SCAFFOLD's
control variates, FLESD's distillation, local-only, centralized and DP-FedAvg (whose accountant models a
round's Poisson sampling) are refused in one line, as are methods whose split changes (LG-FedAvg) and
attacks that see a round's benign payloads.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

from fedlight.attacks.attack import Attack
from fedlight.clock.devices import ClockOptions, TripCost, build_devices, load_trace
from fedlight.clock.events import AsyncOptions, EventSchedule
from fedlight.compression.update_compression import UpdateCompression
from fedlight.engine.loop.async_rounds import InFlight
from fedlight.engine.loop.client_faults import FaultOptions, draw_fault
from fedlight.engine.loop.interfaces import ClientSchedule
from fedlight.engine.parts.clock.round_clock import RoundClock
from fedlight.engine.state.client_state_files import state_bytes
from fedlight.config.schema import Recipe
from fedlight.errors import UserError
from fedlight.methods.federated_module import FederatedModule
from fedlight.server.aggregator import Aggregator

UNTIMED_SCHEDULES = ("stream", "exchange")  # built-in schedules that cannot tell a client's steps beforehand


@dataclass(frozen=True)
class TimingOptions:
    """The clock's and the asynchronous server's options."""

    clock: ClockOptions
    asynchrony: AsyncOptions


def async_options(recipe: Recipe) -> AsyncOptions:
    """The recipe's ``asynchrony`` section as options (checked alone)."""
    return AsyncOptions(**asdict(recipe.asynchrony))


def timing_options(recipe: Recipe, aggregator: Aggregator, schedule: str, population: int) -> TimingOptions:
    """The recipe's ``clock`` and ``asynchrony`` options, checked alone and with the rest of the recipe
    (``population``: the clients that train); raises a one-line UserError."""
    c = recipe.clock
    clock = ClockOptions(**{**asdict(c), "tiers": tuple(c.tiers)})
    asynchrony = async_options(recipe)
    server = recipe.server["name"]
    if clock.on:
        if schedule in UNTIMED_SCHEDULES:
            raise UserError(f"clock.devices={clock.devices} times a client's planned steps, which local.schedule="
                            f"{schedule} cannot tell beforehand; drop clock.devices")
        if aggregator.uses_public_set:
            raise UserError(f"clock.devices times weight uploads; server.name={server} uploads similarities on a "
                            "public set, which the clock does not time yet: drop clock.devices")
        reshapes_rounds = clock.availability != "always" or clock.over_selection or clock.deadline_s
        if aggregator.accounts_privacy and reshapes_rounds:
            raise UserError(f"server.name={server}'s accountant models Poisson sampling of every client; "
                            "clock.availability, clock.over_selection and clock.deadline_s change who takes part: "
                            "drop them")
        if recipe.new_device.rotation is not None and reshapes_rounds:
            raise UserError("new_device.rotation chooses each round's clients itself, not among those "
                            "clock.availability, clock.over_selection and clock.deadline_s leave: drop them, or "
                            "new_device.rotation")
        if clock.trace:  # read and checked now; the devices are drawn when the run builds its clock
            load_trace(Path(clock.trace), recipe.clients.num, clock)
    if asynchrony.on:
        check_asynchrony(asynchrony, clock, aggregator, server, population, recipe.new_device.rotation is not None)
    return TimingOptions(clock, asynchrony)


def check_asynchrony(a: AsyncOptions, clock: ClockOptions, aggregator: Aggregator, server: str, population: int,
                     new_device: bool) -> None:
    """Raise the UserError for an asynchronous server that cannot run with the rest of the recipe
    (``new_device``: ``new_device.rotation`` joins a device); the attack is ``check_timed_attack``'s."""
    mode = f"asynchrony.mode={a.mode}"
    if not clock.on:
        raise UserError(f"{mode} orders updates by when they land: set clock.devices (e.g. fixed or lognormal)")
    if clock.deadline_s is not None or clock.over_selection:
        raise UserError(f"clock.deadline_s and clock.over_selection shape synchronous rounds; {mode} has none: "
                        "drop them")
    if a.concurrency > population:
        raise UserError(f"asynchrony.concurrency={a.concurrency} is above the {population} clients that train; "
                        f"lower it to at most {population}")
    if a.buffer is not None and a.buffer > population:  # a step stops once every client trained from its model
        raise UserError(f"asynchrony.buffer={a.buffer} is above the {population} clients that train, and no client "
                        f"trains twice from one model: lower it to at most {population}")
    reasons = [(not aggregator.communicates, "its clients send nothing"),
               (aggregator.keeps_models_local, "every client keeps its own model"),
               (aggregator.pools_clients, "it pools every client into one"),
               (aggregator.uses_public_set, "it distils similarities on a public set in synchronous rounds"),
               (not aggregator.payload_is_state, "its clients upload more than their model (control variates)"),
               (aggregator.accounts_privacy, "its accountant models a synchronous round's Poisson sampling")]
    why = next((reason for refused, reason in reasons if refused), None)
    if why:
        raise UserError(f"{mode} cannot run server.name={server}: {why}; use a weight-averaging server "
                        "(e.g. fedavg, fedadam, median) or asynchrony.mode=sync")
    if a.mode == "fedasync" and server != "fedavg":
        raise UserError(f"asynchrony.mode=fedasync mixes each update into the model itself (Xie et al. 2019), with "
                        f"no room for server.name={server}: use server.name=fedavg, or asynchrony.mode=fedbuff")
    if new_device:
        raise UserError(f"new_device.rotation joins a device in a synchronous round; {mode} has none: drop one")


def check_timed_attack(options: TimingOptions, attack: Attack | None, name: str) -> None:
    """Refuse an asynchronous server beside an attack (``faults.attack=name``, built) that crafts its payload
    from a synchronous round's benign ones."""
    a = options.asynchrony
    if a.on and attack is not None and attack.needs_benign:
        raise UserError(f"faults.attack={name} crafts its payload from a synchronous round's benign ones; "
                        f"asynchrony.mode={a.mode} applies updates as they land: choose an attack that needs none "
                        "(e.g. sign_flip)")


def check_timed_method(module: FederatedModule, options: TimingOptions) -> None:
    """Refuse an asynchronous server for a method whose shared / private split changes between rounds."""
    if options.asynchrony.on and hasattr(module, "update_split"):
        raise UserError(f"asynchrony.mode={options.asynchrony.mode} cannot run method.name="
                        f"{type(module).__name__}, whose shared layers change between rounds (LG-FedAvg); use "
                        "asynchrony.mode=sync")


def build_timing(options: TimingOptions, module: FederatedModule, aggregator: Aggregator, schedule: ClientSchedule,
                 faults: FaultOptions, batch_size: int, clients: int, trainable: list[int],
                 seed: int, compression: UpdateCompression | None = None) -> RoundClock | InFlight | None:
    """The part that keeps the run's virtual time: the synchronous rounds' clock, the asynchronous server's
    held updates and schedule, or None without ``clock.devices``. A client's upload takes the time of
    ``compression``'s bytes where the uploads are compressed."""
    clock, asynchrony = options.clock, options.asynchrony
    if not clock.on:
        return None
    if schedule.planned_steps(trainable[0]) is None:
        raise UserError("clock.devices times a client's planned steps, which this run's local.schedule cannot "
                        "tell beforehand (ClientSchedule.planned_steps is None); drop clock.devices")
    moved = state_bytes(module.shared_state()) if aggregator.communicates else 0
    up = (moved if aggregator.payload_is_state else state_bytes(module.payload())) if aggregator.communicates else 0
    up_size = state_bytes
    if compression is not None:  # its trainable parameters compressed, its buffers as they are
        parameters = frozenset(name for name, _ in module.named_parameters())
        up_size = lambda state: compression.upload_bytes(state, parameters)  # noqa: E731
        up = up_size(module.shared_state()) if aggregator.communicates else 0
    cost = TripCost(build_devices(clock, clients, seed), schedule.planned_steps, batch_size,
                    lambda r, c: draw_fault(faults, seed, r, c).work, moved, up)
    dropped = lambda r, c: draw_fault(faults, seed, r, c).dropped  # noqa: E731
    if not asynchrony.on:
        return RoundClock(clock, cost, trainable, seed, dropped,
                          track_bytes=aggregator.payload_is_state and aggregator.communicates, up_size=up_size)
    events = EventSchedule(asynchrony, trainable, seed, cost.devices.availability, cost, dropped)
    return InFlight(events, asynchrony, aggregator, {name for name, _ in module.named_parameters()})
