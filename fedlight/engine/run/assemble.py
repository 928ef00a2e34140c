"""From a resolved recipe to a round loop and its parts: the edge where the Recipe stops.

Builds the client schedule that ``part_options`` picked (``local.schedule``, from ``registry.SCHEDULES``),
the round plug-ins the recipe asks for (``registry.build_plugins``: fedlight's own, each paper's in its room,
then those of other packages that the recipe's ``plugins`` section names), the clock and the faults. Built-in
and outside parts come through the same tables and the same contexts (``ScheduleContext``, ``PluginContext``),
so this module names no paper's part. Each part takes its own typed options (``part_options``), never a recipe
section; the recipe's checks are ``recipe_checks``', asked before anything is built.
"""

from __future__ import annotations

from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from lightning.fabric import Fabric

from fedlight import registry
from fedlight.config.schema import Recipe
from fedlight.data.image_data import ImageData
from fedlight.data.partition import local_test_split
from fedlight.data.rotated import add_rotated_device
from fedlight.data.views import ViewMaker, ViewParams, views_on_device
from fedlight.engine.loop.async_federation import AsyncFederation
from fedlight.engine.loop.async_rounds import InFlight
from fedlight.engine.loop.client_attacks import attackers, poisoned_labels
from fedlight.engine.loop.client_store import choose_store
from fedlight.engine.loop.compiled_step import compile_step
from fedlight.engine.loop.evaluator import Evaluator
from fedlight.engine.loop.federation import Federation
from fedlight.engine.loop.interfaces import ClientSchedule, PluginContext, RoundPlugin, ScheduleContext
from fedlight.engine.loop.round_options import RoundOptions
from fedlight.engine.loop.sampling import owner
from fedlight.engine.parts.clock.round_clock import RoundClock
from fedlight.engine.parts.faults.simulated_faults import SimulatedFaults
from fedlight.engine.run.clock_parts import build_timing
from fedlight.engine.run.part_options import PartOptions, part_options
from fedlight.engine.run.recipe_checks import check_compile, check_method_for_parts
from fedlight.engine.state.client_state_files import state_bytes
from fedlight.errors import UserError
from fedlight.methods.federated_module import FederatedModule
from fedlight.seeding import numpy_rng
from fedlight.server.aggregator import Aggregator


def client_store_kind(requested: str, module: FederatedModule, aggregator: Aggregator, clients: int,
                      options: RoundOptions) -> str:
    """``run.client_state`` (``requested``) resolved: ``auto`` keeps the states in memory while every client's
    model state (its private tensors, its whole model for local-only, error feedback's residual) fits in
    ``run.state_cache_mb``. What a schedule keeps per client (SOFed's buffer ids, CF-CL's pulled set) is
    not counted: it is small beside a model and only known once the client has trained."""
    per_client = module.private_state()
    if aggregator.keeps_models_local:
        per_client = {**module.shared_state(), **per_client}
    parameters = {name for name, _ in module.named_parameters()}
    residual = options.compression.residual_bytes(module.shared_state(), parameters) if options.compression else 0
    return choose_store(requested, state_bytes(per_client) + residual, clients, options.state_cache_mb)


def build_views(recipe: Recipe, data: ImageData, device: torch.device = torch.device("cpu")) -> ViewMaker:
    """The view maker for recipe section ``views``, normalised with the data's statistics,
    in the memory format ``fabric.channels_last`` gives the model, drawing its parameters on
    ``device`` (the images') where ``views.on_device`` says so."""
    cfg = asdict(recipe.views)
    on_device = views_on_device(cfg.pop("on_device"), device)
    params = ViewParams(**{**cfg, "blur_p": tuple(cfg["blur_p"]), "solarize_p": tuple(cfg["solarize_p"])})
    return ViewMaker(params, *data.mean_std(), channels_last=recipe.fabric.channels_last, on_device=on_device)


def client_test_shares(recipe: Recipe, data: ImageData, parts: list[np.ndarray]) -> list[np.ndarray] | None:
    """Each client's held-out share of the test split, in its training class mix and, under feature shift,
    from its own domain (``local_test_split``, seeded by the run's seed), for the ``client_knn`` reading;
    None where the recipe does not ask for it."""
    if "client_knn" not in recipe.eval.readings:
        return None
    clients = [p for c, p in enumerate(parts) if c != recipe.partition.public_client]
    rng = numpy_rng(recipe.seed, "client-test")
    return local_test_split(data.train_y.numpy(), clients, data.test_y.numpy(), rng, data.domain_ids())


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
    client_shares = client_test_shares(recipe, data, parts)
    rotated = None
    if o.new_device is not None:  # LG-FedAvg sec. 3.2: a device of rotated images, online
        nd = o.new_device
        rotated = add_rotated_device(data, parts, nd.rotation, nd.train, nd.test, recipe.seed)
        data, parts = rotated.data, rotated.parts
    public = recipe.partition.public_client
    if aggregator.pools_clients:  # one client of every share but the public one, which never trains
        parts, public = [np.sort(np.concatenate([p for c, p in enumerate(parts) if c != public]))], None
    tensors = [torch.as_tensor(p, dtype=torch.long) for p in parts]
    trainable = [c for c in range(len(parts)) if c != public]
    images = fabric.to_device(data.train_x)
    labels = data.train_y
    f = recipe.faults
    attack = registry.build_attack(f.attack, f.attack_options, f.attack_scale)
    attack_settings = None if attack is None else registry.attack_settings(f.attack, f.attack_options, f.attack_scale)
    if attack is not None and attack.poisons_labels:  # the attackers' own data, poisoned for the whole run
        labels = poisoned_labels(labels, tensors, attackers(f.attackers, trainable, recipe.seed, None), attack,
                                 data.num_classes)
    if getattr(module, "uses_protected", False):  # fair LG-FedAvg: batches carry (class, attribute)
        labels = torch.stack([data.train_y, data.train_a], dim=1)
    labels = fabric.to_device(labels)
    evaluator = Evaluator(fabric, module, original, views, o.eval, recipe.seed, client_shares)
    plugins: list[RoundPlugin] = registry.build_plugins(recipe.plugins, PluginContext(
        fabric, module, evaluator, images, data.train_y, tensors, trainable, recipe.rounds, data.num_classes,
        recipe.seed, run_dir, views, aggregator, o, original, rotated, public))
    schedule = build_schedule(fabric, recipe, o, data, module, images, labels, tensors, views, trainable)
    timing = build_timing(o.timing, module, aggregator, schedule, o.faults, recipe.local.batch_size, len(parts),
                          trainable, recipe.seed, o.round.compression)
    faults = SimulatedFaults(o.faults, recipe.seed, run_dir, fabric.global_rank, trainable, attack, attack_settings,
                             timing.lateness if isinstance(timing, RoundClock) else None)
    store = client_store_kind(recipe.run.client_state, module, aggregator, len(trainable), o.round)
    round_ = replace(o.round, client_state=store, record=o.round.record if record is None else record)
    loop = (fabric, module, aggregator, evaluator, data, tensors, trainable, schedule, faults,
            plugins if timing is None else [timing, *plugins], round_, run_dir)  # the clock first: who takes part
    return AsyncFederation(*loop, in_flight=timing) if isinstance(timing, InFlight) else Federation(*loop)


def build_schedule(fabric: Fabric, recipe: Recipe, o: PartOptions, data: ImageData, module: FederatedModule,
                   images: torch.Tensor, labels: torch.Tensor, parts: list[torch.Tensor], views: ViewMaker,
                   trainable: list[int]) -> ClientSchedule:
    """How the recipe's clients spend a round (``o.schedule``)."""
    l, name = recipe.local, o.schedule
    mine = [c for c in trainable if owner(c, fabric.world_size) == fabric.global_rank]  # as ClientRunner.owns
    check_method_for_parts(module, o)  # check_recipe asked already, unless a library caller skipped it
    with registry.SCHEDULES.building(name, f"local.schedule={name}"):
        factory = registry.SCHEDULES[name]  # fedlight's own are classes built from the context by from_context
        schedule = getattr(factory, "from_context", factory)(ScheduleContext(
            fabric, module, images, labels, data.train_y.numpy(), parts, views, mine, recipe.rounds, l.epochs,
            l.iterations, l.batch_size, data.num_classes, recipe.seed, o))
    if not isinstance(schedule, ClientSchedule):
        raise UserError(f"local.schedule={name}: its factory ({registry.SCHEDULES.origin(name)}) returned a "
                        f"{type(schedule).__name__}, not a ClientSchedule; fix or uninstall the package that "
                        "declares it")
    return schedule
