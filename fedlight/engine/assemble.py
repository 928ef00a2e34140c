"""From a resolved recipe to a round loop and its parts: the edge where the Recipe stops.

Picks the client schedule (``local.schedule``, by default ``exchange`` when ``local.iterations``
is set, ``stream`` when ``stream.velocity`` is, else ``epochs``; other packages add schedules
through ``registry.SCHEDULES``) and the round plug-ins the recipe and aggregator ask for
(FLESD's public-set distillation, LG-FedAvg's local tests, faults), each built from its own
typed options.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Callable

import numpy as np
import torch
from lightning.fabric import Fabric

from fedlight import registry
from fedlight.config.schema import Recipe
from fedlight.data.rotated import add_rotated_device
from fedlight.data.sources import ImageData
from fedlight.data.views import ViewMaker, ViewParams
from fedlight.engine.client_state_files import state_bytes
from fedlight.engine.evaluator import Evaluator
from fedlight.engine.options import RoundOptions
from fedlight.engine.orchestrator import Federation
from fedlight.engine.plugin import ClientSchedule, RoundPlugin, ScheduleContext
from fedlight.engine.plugins.distillation import PublicSetDistillation
from fedlight.engine.plugins.epochs import EpochSchedule
from fedlight.engine.plugins.exchange import ExchangeSchedule
from fedlight.engine.plugins.faults import SimulatedFaults
from fedlight.engine.plugins.local_test import LocalTests
from fedlight.engine.plugins.new_device import NewDevice
from fedlight.engine.plugins.stream import StreamSchedule
from fedlight.engine.sampling import owner
from fedlight.engine.store import choose_store
from fedlight.errors import UserError
from fedlight.methods.base import FederatedModule
from fedlight.server.base import Aggregator


def build_views(recipe: Recipe, data: ImageData) -> ViewMaker:
    """The view maker for recipe section ``views``, normalised with the data's statistics,
    in the memory format ``fabric.channels_last`` gives the model."""
    cfg = recipe.views
    params = ViewParams(**{**asdict(cfg), "blur_p": tuple(cfg.blur_p), "solarize_p": tuple(cfg.solarize_p)})
    return ViewMaker(params, *data.mean_std(), channels_last=recipe.fabric.channels_last)


def build_federation(fabric: Fabric, recipe: Recipe, data: ImageData, parts: list[np.ndarray],
                     module: FederatedModule, aggregator: Aggregator, run_dir: Path,
                     on_checkpoint: Callable[[], None] | None = None) -> Federation:
    """The run's round loop with the parts ``recipe`` asks for (every rank builds its own)."""
    module = fabric.to_device(module)  # worker 0: evaluation, checkpoints and the server use it
    declared = {**module.shared_state(), **module.private_state(), **module.transient_state()}
    undeclared = sorted(set(module.state_dict()) - set(declared))
    assert not undeclared, f"{type(module).__name__} state not declared shared/private/transient: {undeclared[:3]}"
    original, views = data, build_views(recipe, data)  # normalised, probed and tested on the original data
    new_device, rotated = recipe.new_device, None
    if new_device.rotation is not None:  # LG-FedAvg sec. 3.2: a device of rotated images, online
        rotated = add_rotated_device(data, parts, new_device.rotation, new_device.train, new_device.test, recipe.seed)
        data, parts = rotated.data, rotated.parts
    if aggregator.pools_clients:
        parts = [np.sort(np.concatenate(parts))]
    tensors = [torch.as_tensor(p, dtype=torch.long) for p in parts]
    public = recipe.partition.public_client
    trainable = [c for c in range(len(parts)) if c != public]
    images = fabric.to_device(data.train_x)
    labels = data.train_y
    if getattr(module, "uses_protected", False):  # fair LG-FedAvg: batches carry (class, attribute)
        labels = torch.stack([data.train_y, data.train_a], dim=1)
    labels = fabric.to_device(labels)
    evaluator = Evaluator(fabric, module, original, views, recipe.eval, recipe.seed)
    plugins: list[RoundPlugin] = []
    if recipe.eval.local_test:
        plugins.append(LocalTests(fabric, evaluator, trainable, [parts[c] for c in trainable], data.train_y.numpy(),
                                  data.test_y.numpy(), recipe.seed))
    if aggregator.uses_public_set:  # FLESD: the public client's images, never trained on
        public_images = images[tensors[public].to(images.device)]
        plugins.append(PublicSetDistillation(fabric, module, public_images, views, aggregator, evaluator.apply,
                                             recipe.seed))
    if rotated is not None:
        device = len(parts) - 1
        originals = [c for c in trainable if c != device]
        plugins.append(NewDevice(fabric, evaluator, originals, device, [parts[c] for c in originals],
                                 original.train_y.numpy(), rotated.test_x, rotated.test_y, new_device,
                                 recipe.clients.fraction, recipe.seed))
    schedule = build_schedule(fabric, recipe, data, module, images, labels, tensors, views, trainable)
    faults = SimulatedFaults(recipe.faults, recipe.seed, run_dir, fabric.global_rank)
    l = recipe.local
    options = RoundOptions(rounds=recipe.rounds, seed=recipe.seed, fraction=recipe.clients.fraction,
                           eval_every=recipe.eval.every, lr=l.lr, lr_schedule=l.lr_schedule, lr_decay=l.lr_decay,
                           workers=recipe.fabric.workers, projector_samples=recipe.eval.projector_samples,
                           client_state=client_store_kind(recipe, module, aggregator, len(trainable)),
                           state_cache_mb=recipe.run.state_cache_mb, record=asdict(recipe))
    return Federation(fabric, module, aggregator, evaluator, data, tensors, trainable, schedule, faults, plugins,
                      options, run_dir, on_checkpoint)


def client_store_kind(recipe: Recipe, module: FederatedModule, aggregator: Aggregator, clients: int) -> str:
    """``run.client_state`` resolved: ``auto`` keeps the states in memory while every client's
    (its private tensors, its whole model for local-only) fits in ``run.state_cache_mb``."""
    per_client = module.private_state()
    if aggregator.keeps_models_local:
        per_client = {**module.shared_state(), **per_client}
    return choose_store(recipe.run.client_state, state_bytes(per_client), clients, recipe.run.state_cache_mb)


def build_schedule(fabric: Fabric, recipe: Recipe, data: ImageData, module: FederatedModule, images: torch.Tensor,
                   labels: torch.Tensor, parts: list[torch.Tensor], views: ViewMaker,
                   trainable: list[int]) -> ClientSchedule:
    """How the recipe's clients spend a round (``schedule_name``)."""
    l, s, name = recipe.local, recipe.stream, schedule_name(recipe)
    mine = [c for c in trainable if owner(c, fabric.world_size) == fabric.global_rank]  # as ClientRunner.owns
    if name == "exchange":  # CF-CL: rounds of Ta SGD iterations, D2D exchange
        return ExchangeSchedule(fabric, module, images, data.train_y.numpy(), parts, views, mine, recipe.exchange,
                                l.iterations, recipe.rounds, l.batch_size, data.num_classes, recipe.seed)
    if name == "stream":  # SOFed: a stream through a replay buffer
        return StreamSchedule(fabric, images, labels, data.train_y.numpy(), parts, views, recipe.buffer, s.velocity,
                              s.stc, data.num_classes, recipe.seed)
    if name == "epochs":
        return EpochSchedule(fabric, images, labels, parts, views, l.epochs, l.batch_size)
    return registry.SCHEDULES[name](ScheduleContext(
        fabric, module, images, labels, data.train_y.numpy(), parts, views, mine, recipe.rounds, l.epochs,
        l.iterations, l.batch_size, data.num_classes, recipe.seed))


BUILTIN_SCHEDULES = {"epochs": "", "stream": "stream.velocity", "exchange": "local.iterations"}  # name: what it needs


def schedule_name(recipe: Recipe) -> str:
    """``local.schedule``, or the one its settings imply; raises a UserError for an unknown name or
    a built-in one without its settings."""
    l, streaming = recipe.local, recipe.stream.velocity is not None
    implied = "exchange" if l.iterations is not None else "stream" if streaming else "epochs"
    name = l.schedule or implied
    if name not in registry.SCHEDULES:
        raise UserError(f"unknown local.schedule {name!r}; valid names: {', '.join(registry.SCHEDULES)}")
    if name in BUILTIN_SCHEDULES and name != implied:
        need = BUILTIN_SCHEDULES[name]
        raise UserError(f"local.schedule={name} " + (f"needs {need} set" if need else "trains epochs: drop "
                        "stream.velocity and local.iterations") + "; or drop local.schedule (it follows them)")
    return name
