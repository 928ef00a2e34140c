"""From a resolved recipe to a round loop and its parts: the edge where the Recipe stops.

Picks the client schedule (``local.schedule``, by default ``exchange`` when ``local.iterations``
is set, ``stream`` when ``stream.velocity`` is, else ``epochs``; other packages add schedules
through ``registry.SCHEDULES``) and the round plug-ins the recipe and aggregator ask for
(FLESD's public-set distillation, LG-FedAvg's local tests and new device, faults, then those of
other packages that the recipe's ``plugins`` section names, through ``registry.PLUGINS``). Each part takes its own
typed options (``part_options``), never a recipe section, and checks them itself; what is
checked here is only whether the parts go together.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from lightning.fabric import Fabric

from fedlight import registry
from fedlight.catalog import check_name
from fedlight.config.schema import Recipe
from fedlight.data.image_data import ImageData
from fedlight.data.rotated import add_rotated_device
from fedlight.data.views import ViewMaker, ViewParams, views_on_device
from fedlight.engine.loop.async_federation import AsyncFederation
from fedlight.engine.loop.async_rounds import InFlight
from fedlight.engine.loop.batched_clients import refused
from fedlight.engine.loop.client_attacks import attackers, poisoned_labels
from fedlight.engine.loop.client_faults import FaultOptions
from fedlight.engine.loop.client_store import choose_store
from fedlight.engine.loop.compiled_step import compile_refusal, compile_step
from fedlight.engine.loop.evaluator import EvalOptions, Evaluator
from fedlight.engine.loop.federation import Federation
from fedlight.engine.loop.interfaces import ClientSchedule, PluginContext, RoundPlugin, ScheduleContext
from fedlight.engine.loop.round_options import RoundOptions
from fedlight.engine.loop.sampling import owner
from fedlight.engine.parts.cfcl.exchange_schedule import ExchangeOptions, ExchangeSchedule, check_label_free
from fedlight.engine.parts.clock.round_clock import RoundClock
from fedlight.engine.parts.faults.simulated_faults import SimulatedFaults
from fedlight.engine.parts.fedavg.epoch_schedule import EpochSchedule
from fedlight.engine.parts.flesd.public_set_distillation import PublicSetDistillation
from fedlight.engine.parts.lg_fedavg.local_tests import LocalTests
from fedlight.engine.parts.lg_fedavg.new_device import NewDevice, NewDeviceOptions
from fedlight.engine.parts.sofed.importance_score import check_score_head
from fedlight.engine.parts.sofed.stream_loop import BufferOptions
from fedlight.engine.parts.sofed.stream_schedule import StreamOptions, StreamSchedule
from fedlight.engine.run.clock_parts import TimingOptions, build_timing, check_timed_method, timing_options
from fedlight.engine.state.client_state_files import state_bytes
from fedlight.errors import UserError
from fedlight.methods.federated_module import FederatedModule
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
    return EvalOptions(e.label_fraction, tuple(e.extra_label_fractions), e.knn_k, e.knn_temperature, e.probe_epochs)


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
                          state_cache_mb=recipe.run.state_cache_mb, record=asdict(recipe),
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


def client_store_kind(recipe: Recipe, module: FederatedModule, aggregator: Aggregator, clients: int,
                      options: RoundOptions) -> str:
    """``run.client_state`` resolved: ``auto`` keeps the states in memory while every client's
    model state (its private tensors, its whole model for local-only, error feedback's residual) fits in
    ``run.state_cache_mb``. What a schedule keeps per client (SOFed's buffer ids, CF-CL's pulled set) is
    not counted: it is small beside a model and only known once the client has trained."""
    per_client = module.private_state()
    if aggregator.keeps_models_local:
        per_client = {**module.shared_state(), **per_client}
    parameters = {name for name, _ in module.named_parameters()}
    residual = options.compression.residual_bytes(module.shared_state(), parameters) if options.compression else 0
    return choose_store(recipe.run.client_state, state_bytes(per_client) + residual, clients,
                        recipe.run.state_cache_mb)


def build_views(recipe: Recipe, data: ImageData, device: torch.device = torch.device("cpu")) -> ViewMaker:
    """The view maker for recipe section ``views``, normalised with the data's statistics,
    in the memory format ``fabric.channels_last`` gives the model, drawing its parameters on
    ``device`` (the images') where ``views.on_device`` says so."""
    cfg = asdict(recipe.views)
    on_device = views_on_device(cfg.pop("on_device"), device)
    params = ViewParams(**{**cfg, "blur_p": tuple(cfg["blur_p"]), "solarize_p": tuple(cfg["solarize_p"])})
    return ViewMaker(params, *data.mean_std(), channels_last=recipe.fabric.channels_last, on_device=on_device)


def run_device_type(accelerator: str) -> str:
    """The device type ``fabric.accelerator`` gives a run on this machine, before Fabric is built."""
    if accelerator in ("gpu", "cuda") or (accelerator == "auto" and torch.cuda.is_available()):
        return "cuda"
    return "mps" if accelerator == "mps" or (accelerator == "auto" and torch.backends.mps.is_available()) else "cpu"


def check_compile(recipe: Recipe, module: FederatedModule, device_type: str | None = None) -> None:
    """Refuse ``local.compile`` in one line where it cannot compile the method's step on the run's
    device (``device_type``; None: the one ``fabric.accelerator`` gives here)."""
    device_type = device_type or run_device_type(recipe.fabric.accelerator)
    refusal = compile_refusal(recipe.local.compile, module, device_type, recipe.fabric.workers,
                              recipe.local.batched_clients)
    if refusal:
        raise UserError(refusal)


def build_federation(fabric: Fabric, recipe: Recipe, data: ImageData, parts: list[np.ndarray],
                     module: FederatedModule, aggregator: Aggregator, run_dir: Path,
                     record: dict[str, Any] | None = None) -> Federation:
    """The run's round loop with the parts ``recipe`` asks for (every rank builds its own); ``record``
    is what results.json and the hparams show of the run's settings (default: the recipe)."""
    module = fabric.to_device(module)  # worker 0: evaluation, checkpoints and the server use it
    registry.check_declared(module)  # check_recipe asked already, unless a library caller skipped it
    check_compile(recipe, module, fabric.device.type)  # prepare asked already, before the device was known
    compile_step(module, recipe.local.compile)
    o = part_options(recipe, aggregator)
    # normalised, probed and tested on the original data
    original, views = data, build_views(recipe, data, fabric.device)
    rotated = None
    if o.new_device is not None:  # LG-FedAvg sec. 3.2: a device of rotated images, online
        nd = o.new_device
        rotated = add_rotated_device(data, parts, nd.rotation, nd.train, nd.test, recipe.seed)
        data, parts = rotated.data, rotated.parts
    if aggregator.pools_clients:
        parts = [np.sort(np.concatenate(parts))]
    tensors = [torch.as_tensor(p, dtype=torch.long) for p in parts]
    public = recipe.partition.public_client
    trainable = [c for c in range(len(parts)) if c != public]
    images = fabric.to_device(data.train_x)
    labels = data.train_y
    f = recipe.faults
    attack = registry.build_attack(f.attack, f.attack_options, f.attack_scale)
    if attack is not None and attack.poisons_labels:  # the attackers' own data, poisoned for the whole run
        labels = poisoned_labels(labels, tensors, attackers(f.attackers, trainable, recipe.seed, None), attack,
                                 data.num_classes)
    if getattr(module, "uses_protected", False):  # fair LG-FedAvg: batches carry (class, attribute)
        labels = torch.stack([data.train_y, data.train_a], dim=1)
    labels = fabric.to_device(labels)
    evaluator = Evaluator(fabric, module, original, views, o.eval, recipe.seed)
    plugins: list[RoundPlugin] = []
    if recipe.eval.local_test:
        plugins.append(LocalTests(fabric, evaluator, trainable, [parts[c] for c in trainable], data.train_y.numpy(),
                                  data.test_y.numpy(), recipe.seed))
    if aggregator.uses_public_set:  # FLESD: the public client's images, never trained on, or those replacing them
        public_images = (images[tensors[public].to(images.device)] if original.public_x is None
                         else fabric.to_device(original.public_x))
        plugins.append(PublicSetDistillation(fabric, module, public_images, views, aggregator, evaluator.apply,
                                             recipe.seed))
    if rotated is not None:
        device = len(parts) - 1
        originals = [c for c in trainable if c != device]
        plugins.append(NewDevice(fabric, evaluator, originals, device, [parts[c] for c in originals],
                                 original.train_y.numpy(), rotated.test_x, rotated.test_y, o.new_device,
                                 recipe.clients.fraction, recipe.seed))
    plugins += registry.build_plugins(recipe.plugins, PluginContext(
        fabric, module, evaluator, images, data.train_y, tensors, trainable, recipe.rounds, data.num_classes,
        recipe.seed, run_dir))
    schedule = build_schedule(fabric, recipe, o, data, module, images, labels, tensors, views, trainable)
    timing = build_timing(o.timing, module, aggregator, schedule, o.faults, recipe.local.batch_size, len(parts),
                          trainable, recipe.seed, o.round.compression)
    faults = SimulatedFaults(o.faults, recipe.seed, run_dir, fabric.global_rank, trainable, attack,
                             None if attack is None else registry.attack_settings(f.attack, f.attack_options,
                                                                                  f.attack_scale),
                             timing.lateness if isinstance(timing, RoundClock) else None)
    round_ = replace(o.round, client_state=client_store_kind(recipe, module, aggregator, len(trainable), o.round),
                     record=o.round.record if record is None else record)
    loop = (fabric, module, aggregator, evaluator, data, tensors, trainable, schedule, faults,
            plugins if timing is None else [timing, *plugins], round_, run_dir)  # the clock first: who takes part
    return AsyncFederation(*loop, in_flight=timing) if isinstance(timing, InFlight) else Federation(*loop)


def check_method_for_parts(module: FederatedModule, o: PartOptions) -> None:
    """Raise the UserError for a method that lacks what a part asks of it (``fit.check_recipe`` asks
    this of a model built on the meta device, before any data, so a sweep refuses before it submits)."""
    if o.stream is not None and o.stream.buffer.policy == "importance":
        check_score_head(module, o.stream.buffer.score)
    if o.exchange is not None:
        check_label_free(module)
    check_timed_method(module, o.timing)


def build_schedule(fabric: Fabric, recipe: Recipe, o: PartOptions, data: ImageData, module: FederatedModule,
                   images: torch.Tensor, labels: torch.Tensor, parts: list[torch.Tensor], views: ViewMaker,
                   trainable: list[int]) -> ClientSchedule:
    """How the recipe's clients spend a round (``o.schedule``)."""
    l, name = recipe.local, o.schedule
    mine = [c for c in trainable if owner(c, fabric.world_size) == fabric.global_rank]  # as ClientRunner.owns
    if o.exchange is not None:  # CF-CL: rounds of Ta SGD iterations, D2D exchange
        return ExchangeSchedule(fabric, module, images, data.train_y.numpy(), parts, views, mine, o.exchange,
                                l.iterations, recipe.rounds, l.batch_size, data.num_classes, recipe.seed)
    check_method_for_parts(module, o)
    if o.stream is not None:  # SOFed: a stream through a replay buffer
        return StreamSchedule(fabric, images, labels, data.train_y.numpy(), parts, views, o.stream, data.num_classes,
                              recipe.seed)
    if name == "epochs":
        return EpochSchedule(fabric, images, labels, parts, views, l.epochs, l.batch_size)
    with registry.SCHEDULES.building(name, f"local.schedule={name}"):
        schedule = registry.SCHEDULES[name](ScheduleContext(
            fabric, module, images, labels, data.train_y.numpy(), parts, views, mine, recipe.rounds, l.epochs,
            l.iterations, l.batch_size, data.num_classes, recipe.seed))
    if not isinstance(schedule, ClientSchedule):
        raise UserError(f"local.schedule={name}: its factory ({registry.SCHEDULES.origin(name)}) returned a "
                        f"{type(schedule).__name__}, not a ClientSchedule; fix or uninstall the package that "
                        "declares it")
    return schedule


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
