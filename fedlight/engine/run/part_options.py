"""Each part's typed options from a resolved recipe, and whether the parts go together.

Picks the client schedule (``local.schedule``, by default ``exchange`` when ``local.iterations``
is set, ``stream`` when ``stream.velocity`` is, else ``epochs``; other packages add schedules
through ``registry.SCHEDULES``). Each part takes its own typed options, never a recipe section,
and checks them itself where they are built (``ExchangeOptions.check``, ``clock_parts.timing_options``);
what is checked here is only whether the parts go together, each in one line naming the recipe key.
``recipe_checks.check_recipe`` asks it before anything is read or written; ``assemble`` builds the
parts from it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from fedlight import registry
from fedlight.catalog import check_name
from fedlight.config.schema import Recipe
from fedlight.engine.loop.batched_clients import refused
from fedlight.engine.loop.client_faults import FaultOptions
from fedlight.engine.loop.evaluator import EvalOptions
from fedlight.engine.loop.interfaces import ClientSchedule
from fedlight.engine.loop.round_options import RoundOptions
from fedlight.engine.parts.cfcl.exchange_schedule import ExchangeOptions
from fedlight.engine.parts.lg_fedavg.new_device import NewDeviceOptions
from fedlight.engine.parts.sofed.stream_loop import BufferOptions
from fedlight.engine.parts.sofed.stream_schedule import StreamOptions
from fedlight.engine.run.clock_parts import TimingOptions, timing_options
from fedlight.errors import UserError
from fedlight.eval.collapse import CollapseAlarm
from fedlight.server.aggregator import Aggregator


@dataclass(frozen=True)
class PartOptions:
    """Every part's typed options for one recipe.

    Attributes:
        round: the round loop's own (rounds, sampling, learning rate, workers).
        eval: the evaluator's (probe and kNN).
        faults: the fault model's.
        schedule: the client schedule's name (``local.schedule`` or the one the recipe implies).
        exchange: CF-CL's exchange, when ``schedule`` is ``exchange``; stream: SOFed's stream
            and replay buffer, when it is ``stream``.
        new_device: LG-FedAvg's new device with rotated data (sec. 3.2), when ``new_device.rotation``
            is set.
        timing: the virtual clock's and the asynchronous server's (``clock_parts``).
    """

    round: RoundOptions
    eval: EvalOptions
    faults: FaultOptions
    schedule: str
    timing: TimingOptions
    exchange: ExchangeOptions | None = None
    stream: StreamOptions | None = None
    new_device: NewDeviceOptions | None = None


def eval_options(recipe: Recipe) -> EvalOptions:
    """The evaluator's options from recipe section ``eval``."""
    e = recipe.eval
    return EvalOptions(e.label_fraction, tuple(e.extra_label_fractions), e.knn_k, e.knn_temperature, e.probe_epochs,
                       tuple(e.readings), e.reading_samples, tuple(e.finetune), e.finetune_epochs, e.local_test)


def collapse_alarm(recipe: Recipe) -> CollapseAlarm:
    """The collapse alarm from recipe section ``eval`` (``collapse_*``)."""
    e = recipe.eval
    return CollapseAlarm(e.collapse_rankme, e.collapse_std, e.collapse_patience, e.collapse_stop)


def part_options(recipe: Recipe, aggregator: Aggregator) -> PartOptions:
    """Each part's options from ``recipe`` (each part checks its own), and whether the parts go
    together with ``aggregator``; raises a one-line UserError before anything is read or written."""
    l, name = recipe.local, schedule_name(recipe)
    round_ = RoundOptions(rounds=recipe.rounds, seed=recipe.seed, fraction=recipe.clients.fraction,
                          poisson=recipe.clients.sampling == "poisson", eval_every=recipe.eval.every, lr=l.lr,
                          lr_schedule=l.lr_schedule, lr_decay=l.lr_decay,
                          workers=recipe.fabric.workers, batched_clients=l.batched_clients,
                          projector_samples=recipe.eval.projector_samples,
                          loggers=tuple(recipe.loggers),
                          state_cache_mb=recipe.run.state_cache_mb, checkpoint_every=recipe.run.checkpoint_every,
                          record=asdict(recipe), collapse=collapse_alarm(recipe),
                          compression=registry.build_compression(recipe.server, aggregator, recipe.seed))
    policy, exchange, stream = recipe.exchange.policy, None, None
    if policy != "none" and name != "exchange":
        needs = ("needs local.iterations (CF-CL's Ta, e.g. 50); set it" if l.iterations is None
                 else f"runs in local.schedule=exchange only (got {name}); drop local.schedule")
        raise UserError(f"exchange.policy={policy} {needs}, or set exchange.policy=none")
    if name == "exchange":
        exchange = ExchangeOptions(**asdict(recipe.exchange))
        exchange.check(recipe.clients.num, recipe.method.get("name"))
    if name == "stream":
        stream = StreamOptions(recipe.stream.velocity, recipe.stream.stc, BufferOptions(**asdict(recipe.buffer)))
    side_by_side = getattr(registry.SCHEDULES[name], "side_by_side", True)
    if round_.workers > 1 and (aggregator.uses_public_set or not side_by_side):
        raise UserError(f"fabric.workers={round_.workers} trains clients side by side, which "
                        f"server.name={recipe.server['name']} with local.schedule={name} cannot (its clients "
                        "share one model's public-set embeddings or device-to-device exchange); set fabric.workers=1")
    if l.batched_clients is not None:
        check_batched_schedule(recipe, name)
    population = recipe.clients.num - (recipe.partition.public_client is not None)
    return PartOptions(round_, eval_options(recipe), FaultOptions(**asdict(recipe.faults)), name,
                       timing_options(recipe, aggregator, name, population), exchange, stream,
                       new_device_options(recipe, aggregator))


def check_batched_schedule(recipe: Recipe, name: str) -> None:
    """``local.batched_clients`` needs a schedule that trains clients together (``ClientSchedule.batch_refusal``)
    and full precision (under vmap, BatchNorm's float32 statistics meet autocast's bfloat16 activations, and
    16-mixed scales the loss per optimizer); raises a one-line UserError otherwise."""
    k = recipe.local.batched_clients
    refusal = getattr(registry.SCHEDULES[name], "batch_refusal", ClientSchedule.batch_refusal)
    if refusal:
        raise refused(k, f"local.schedule={name}", refusal)
    if recipe.fabric.precision.endswith("-mixed"):
        raise UserError(f"local.batched_clients={k} trains in full precision, not fabric.precision="
                        f"{recipe.fabric.precision}; use fabric.precision=32-true, or drop local.batched_clients")


def new_device_options(recipe: Recipe, aggregator: Aggregator) -> NewDeviceOptions | None:
    """LG-FedAvg's new device (``new_device.*``) when ``new_device.rotation`` asks for one; raises a
    UserError where it does not go with the sampling, the schedule, the server or the method."""
    cfg, method = recipe.new_device, recipe.method
    if cfg.rotation is None:
        if method.get("warmup_goal_metric") == "normal_acc":
            raise UserError("method.warmup_goal_metric=normal_acc is the new device's column, which only "
                            "new_device.rotation makes; set new_device.rotation or drop method.warmup_goal_metric")
        return None
    if aggregator.pools_clients:
        raise UserError(f"new_device.rotation joins a federation of devices; server.name={recipe.server['name']} "
                        "pools every client into one: choose a federated server or drop new_device.rotation")
    if recipe.clients.sampling == "poisson":  # NewDevice.participants draws a fixed-size set every round
        # and trains the new device in every round after it arrives (its q is 1), so Poisson sampling, and the
        # privacy accountant's q = m / K below clients.fraction=1, would not be what ran
        raise UserError("new_device.rotation draws each round's devices as a fixed-size set (the new device in "
                        "every round after it arrives), not clients.sampling=poisson: set clients.sampling=fixed "
                        "(with a DP server, also clients.fraction=1, where every device joins every round)")
    if recipe.local.iterations is not None or recipe.stream.velocity is not None:
        raise UserError("new_device.rotation trains the new device by epochs; drop local.iterations and "
                        "stream.velocity, or new_device.rotation")
    if recipe.eval.local_test:  # LocalTests would split the test set over every device, the rotated one too
        raise UserError("new_device.rotation reports each original device on its own test split (normal_acc); "
                        "eval.local_test would split the test set again, over the rotated device too: drop it")
    if method.get("name") == "lg":
        metric, goal, warmup = (method.get("warmup_goal_metric", "test_acc"), method.get("warmup_goal_acc"),
                                method.get("warmup_rounds", 0))
        if metric != "normal_acc" or goal != cfg.goal_acc or warmup < recipe.rounds:
            raise UserError(f"method.name=lg with new_device.rotation leaves FedAvg when the new device arrives: "
                            f"set method.warmup_goal_metric=normal_acc, method.warmup_goal_acc={cfg.goal_acc} "
                            f"(new_device.goal_acc) and method.warmup_rounds={recipe.rounds} (rounds)")
    return NewDeviceOptions(**asdict(cfg))


BUILTIN_SCHEDULES = {"epochs": "", "stream": "stream.velocity", "exchange": "local.iterations"}  # name: what it needs


def schedule_name(recipe: Recipe) -> str:
    """``local.schedule``, or the one its settings imply; raises a UserError for an unknown name or
    a built-in one without its settings."""
    l, streaming = recipe.local, recipe.stream.velocity is not None
    if l.iterations is not None and streaming:
        raise UserError("local.iterations and stream.velocity are two different schedules; drop one")
    implied = "exchange" if l.iterations is not None else "stream" if streaming else "epochs"
    name = l.schedule or implied
    check_name("local.schedule", name, registry.SCHEDULES)
    if name in BUILTIN_SCHEDULES and name != implied:
        need = BUILTIN_SCHEDULES[name]
        raise UserError(f"local.schedule={name} " + (f"needs {need} set" if need else "trains epochs: drop "
                        "stream.velocity and local.iterations") + "; or drop local.schedule (it follows them)")
    return name
