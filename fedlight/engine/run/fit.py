"""``fedlight fit``: from a resolved recipe to a finished run folder."""

from __future__ import annotations

import os
import sys
import warnings
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch
from lightning.fabric import Fabric

from fedlight import registry
from fedlight.catalog import NO_ATTACK
from fedlight.config.schema import Recipe
from fedlight.cpus import busy_machine, default_threads
from fedlight.data.image_data import ImageData
from fedlight.data.domains import check_domain_images, shift_features
from fedlight.data.locate import data_on_disk
from fedlight.data.partition import partition
from fedlight.data.public_set import balanced_outside_subset
from fedlight.data.sources import empty_of_shape, load_dataset, take_subset
from fedlight.engine.loop import preemption
from fedlight.engine.output.console import say
from fedlight.engine.run import launch, rendezvous
from fedlight.engine.run.assemble import build_federation
from fedlight.engine.run.folder_contents import finished_results
from fedlight.engine.run.recipe_checks import check_data, check_module, check_recipe, check_round_payloads
from fedlight.engine.run.run_folder import RunFolder, claim_run_dir
from fedlight.engine.run.same_experiment import RESOLVED
from fedlight.engine.state.checkpoint import verified
from fedlight.engine.state.run_files import CHECKPOINT, RECIPE, write_yaml
from fedlight.errors import UserError, warnings_if_it_works
from fedlight.methods.federated_module import FederatedModule, OptimizerSpec
from fedlight.seeding import derive_seed, numpy_rng
from fedlight.server.aggregator import Aggregator


def prepare_data(recipe: Recipe, load: Callable[..., ImageData] = load_dataset) -> tuple[ImageData, list]:
    """Load (with ``load``: ``load_dataset``, or a cache of it), subset and partition the data, and
    with ``partition.public_balanced`` draw the public set outside the subset (``data.public_x``)
    (raises UserError on missing data, bad partitions or too few images for the public set)."""
    d, p, s = recipe.data, recipe.partition, recipe.stream
    full = load(d.name, d.root, d.download, recipe.seed, (d.image_column, d.label_column, d.group_column))
    data = take_subset(full, d.subset, d.test_subset, recipe.seed)
    kind, per_client = p.kind, p.classes_per_client
    if s.classes_per_client is not None:  # a stream's classes are its device's partition's classes
        if s.velocity is None or p.kind not in ("iid", "classes"):
            raise UserError("stream.classes_per_client needs stream.velocity set and partition.kind iid or classes; "
                            "set stream.velocity or drop stream.classes_per_client")
        kind, per_client = "classes", s.classes_per_client
    rng, labels = numpy_rng(recipe.seed, "partition"), data.train_y.numpy()
    groups = None if data.train_group is None else data.train_group.numpy()

    def split(idx: np.ndarray, clients: int) -> list[np.ndarray]:  # partition.kind over the samples ``idx``
        return partition(kind, labels[idx], clients, rng, alpha=p.alpha, min_size=p.min_size,
                         shards_per_client=p.shards_per_client, classes_per_client=per_client, law=p.quantity_law,
                         sigma=p.quantity_sigma, exponent=p.quantity_exponent,
                         groups=None if groups is None else groups[idx], writers=p.writers)

    in_domain: Callable[[torch.Tensor], torch.Tensor] = lambda x: x  # the public client's look
    if p.domains:  # feature shift: the label partition within each domain (fedlight/data/domains.py)
        shifted = shift_features(data, p.domains, recipe.clients.num, numpy_rng(recipe.seed, "domains"), split)
        data, parts = shifted.data, shifted.parts
        if p.public_client is not None:
            in_domain = shifted.client_transform(p.public_client)
    else:
        parts = split(np.arange(len(labels)), recipe.clients.num)
    if p.public_balanced:  # as many images as the public client's share, which trains no client either way,
        # in that client's domain, so that only the classes' balance differs from the share it replaces
        picked = balanced_outside_subset(full.train_y, d.subset, len(parts[p.public_client]), full.num_classes,
                                         recipe.seed)
        data = replace(data, public_x=in_domain(full.train_x[picked]), public_y=full.train_y[picked])
    return data, parts


def build_module(recipe: Recipe, data: ImageData) -> FederatedModule:
    """The method's worker model, initialised from the run seed, in ``fabric.channels_last`` format."""
    torch.manual_seed(derive_seed(recipe.seed, "init"))
    l = recipe.local
    try:
        module = registry.build_method(recipe.method, recipe.model.backbone, data.channels, data.image_size,
                                       data.num_classes, OptimizerSpec(l.optimizer, l.lr, l.momentum, l.weight_decay))
    except MemoryError:  # torch raises it (a RuntimeError on some builds) when a size in method.* is absurd
        raise _too_large(recipe.method) from None
    except RuntimeError as exc:
        if "allocate" not in str(exc) and "memory" not in str(exc):
            raise
        raise _too_large(recipe.method) from None
    return module.to(memory_format=torch.channels_last) if recipe.fabric.channels_last else module


def _too_large(method: dict[str, Any]) -> UserError:
    """The refusal of a ``method`` section whose model does not fit in memory, naming its large sizes."""
    sizes = ", ".join(f"method.{k}={v}" for k, v in method.items() if isinstance(v, int) and v > 10_000)
    return UserError(f"the model of method.name={method['name']} does not fit in memory"
                     + (f" ({sizes})" if sizes else "") + "; make its sizes smaller")


def make_fabric(recipe: Recipe) -> Fabric:
    """Fabric for ``fabric.*``; an impossible device request is a user error."""
    f = recipe.fabric
    launch.require_launcher(f.devices, f.num_nodes)  # fit() called without the CLI
    processes = f.devices * f.num_nodes
    try:
        with warnings_if_it_works(), warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*`srun` command is available")  # noise in any case
            return Fabric(accelerator=f.accelerator, devices=f.devices, num_nodes=f.num_nodes,
                          precision=f.precision,
                          strategy=rendezvous.strategy(f.rendezvous_timeout_min) if processes > 1 else "auto")
    except (RuntimeError, ValueError) as exc:  # Lightning's MisconfigurationException is a ValueError
        raise UserError(f"fabric.accelerator={f.accelerator} fabric.devices={f.devices} "
                        f"fabric.precision={f.precision} cannot be set up here ({exc}); "
                        "use fabric.accelerator=auto or cpu") from None


def fit(recipe: Recipe, resume: bool = False, overwrite: bool = False) -> dict[str, Any]:
    """Run (or resume) the simulation described by ``recipe``; returns the results mapping.

    Every user error (recipe, data, partition, method options, run folder) is raised before
    the run folder is touched or any process is launched; those only a checkpoint can tell
    (damaged, ``rounds`` below its rounds) before anything is written. A run folder in use by
    another run is refused; a run it replaces is deleted only once this one has finished
    (``run_folder``). ``resume`` of a finished run (every round done, final metrics logged) changes
    nothing and returns its results. SIGUSR1 or SIGTERM stop the run after the current round's checkpoint and
    requeue its SLURM job: ``preemption.Preempted`` is raised.
    """
    with preemption.signals_handled():
        try:
            return _fit(recipe, resume, overwrite)
        except preemption.Preempted as stop:
            preemption.requeue_after(stop)
            raise


def prepare(recipe: Recipe, load: Callable[..., ImageData] = load_dataset
            ) -> tuple[Aggregator, ImageData, list, FederatedModule, list[str]]:
    """Everything ``fit`` refuses before it touches the run folder (``recipe_checks``, stage by stage),
    and what it builds on the way: the aggregator, the data and its partition, the method's model, and
    the warnings for sizes the engine clamps (``check_sizes``: said once the run goes ahead, never
    before a refusal).

    Raises:
        UserError: the recipe (``check_recipe``), the data or its partition, the data against the
            method, server or new device, or the method's constructor (LG's ``global_layers``,
            FedBN on a backbone without BatchNorm) refuses; or the method reads no label that
            ``faults.attack=labels`` would flip; or a round's payloads kept (a payloads-contract
            server, an attack that sees them) would not fit ``run.payload_budget_mb``; or ``local.compile``
            cannot compile its step here.
    """
    server = check_recipe(recipe)
    data, parts = prepare_data(recipe, load)
    clamped = check_data(recipe, server, data, parts)
    module = build_module(recipe, data)
    check_module(recipe, module)
    check_round_payloads(recipe, server, module)
    return server, data, parts, module, clamped


def check_elsewhere(recipe: Recipe, load: Callable[..., ImageData] = load_dataset) -> list[str]:
    """``fit``'s checks for a recipe that will run elsewhere or later (a sweep's task): all of
    ``prepare``'s where the data is on this machine; else those the data's shape decides (the
    recipe, and the method's constructor against the dataset's channels, size and classes).

    Returns:
        ``prepare``'s warnings for clamped sizes (none where the data is elsewhere).

    Raises:
        UserError: what ``fit`` would raise for ``recipe`` before its run folder.
    """
    d = recipe.data
    if data_on_disk(d.name, d.root, d.download):
        return prepare(recipe, load)[-1]
    check_recipe(recipe)
    shape = empty_of_shape(d.name)
    if recipe.partition.domains:
        check_domain_images(recipe.partition.domains, shape.channels, shape.image_size)
    check_module(recipe, build_module(recipe, shape))
    return []


def _fit(recipe: Recipe, resume: bool, overwrite: bool) -> dict[str, Any]:
    server, data, parts, module, clamped = prepare(recipe)  # the method's own checks (LG's global_layers) come before the run folder
    record = run_record(recipe, data)
    done = finished_results(Path(recipe.run_dir), record) if resume else None  # compared through the record
    if done is not None and not verified(Path(recipe.run_dir) / CHECKPOINT):
        done = None  # damaged since it finished: resumed from last.pt.prev (one warning line), or refused in one
    if done is not None:  # resuming would only evaluate, project and log its final metrics again
        say(f"run folder '{recipe.run_dir}' has finished all {recipe.rounds} rounds: nothing to resume, nothing "
            "changed (raise rounds to train more)", int(launch.is_child()))
        return done
    fabric = make_fabric(recipe)
    folder = None
    if fabric.global_rank == 0:  # rank 0 owns the run folder; the other ranks never lock it
        folder = claim_run_dir(Path(recipe.run_dir), record, resume, overwrite, recipe.run.min_free_mb)
    try:
        return _run(fabric, recipe, data, parts, module, server, folder, record, clamped)
    finally:
        if folder is not None:
            folder.release()


def run_record(recipe: Recipe, data: ImageData) -> dict[str, Any]:
    """What the run folder's ``recipe.yaml``, ``results.json`` and the hparams record of the run's
    settings: the resolved recipe, and under ``resolved`` what its method, aggregator, backbone, round
    plug-ins and attack are built with, the constructors' defaults included (``registry.resolved_settings``,
    ``registry.attack_settings``)."""
    resolved = registry.resolved_settings(recipe.method, recipe.server, recipe.model.backbone, recipe.plugins,
                                          data.channels, data.image_size)
    f = recipe.faults
    if f.attack != NO_ATTACK:  # its options' defaults too
        resolved["attack"] = registry.attack_settings(f.attack, f.attack_options, f.attack_scale)
    return {**asdict(recipe), RESOLVED: resolved}


def _run(fabric: Fabric, recipe: Recipe, data: ImageData, parts: list, module: FederatedModule, server: Aggregator,
         folder: RunFolder | None, record: dict[str, Any], clamped: list[str]) -> dict[str, Any]:
    """Launch (every rank joins within ``fabric.rendezvous_timeout_min``) and train; every rank
    leaves the process group before it returns. Rank 0 says the ``clamped`` sizes' warnings as the
    run goes ahead."""
    give_back = folder.release if folder is not None else lambda: None  # a signal during the wait ends the process
    with rendezvous.joined(fabric, recipe.fabric.rendezvous_timeout_min, on_stop=give_back):
        restore = bool(fabric.broadcast(folder is not None and folder.resume, src=0))  # rank 0 looked at the folder
        # Lightning sets PYTORCH_NVML_BASED_CUDA_CHECK=1 on import, so that asking whether CUDA exists
        # cannot poison a later fork. fedlight forks nothing (its ranks start before torch is
        # imported) and the device is chosen by now, while with the variable set each
        # torch.cuda.is_available() tries to load NVML (82 us against 1 us on the CPU machine,
        # benchmarks/micro.py), paid by torch.optim at every step (its graph-capture check) with
        # the GIL held.
        os.environ.pop("PYTORCH_NVML_BASED_CUDA_CHECK", None)
        threads = torch.get_num_threads()  # the caller's, given back: fit() leaves its process as it found it
        # the recipe's, else this process's CPUs (affinity, cgroup quota) over the ranks on this machine
        torch.set_num_threads(recipe.fabric.threads or default_threads(recipe.fabric.devices))
        try:
            run_dir = Path(recipe.run_dir)
            federation = build_federation(fabric, recipe, data, parts, module, server, run_dir, record=record)
            try:
                if restore:
                    federation.restore()  # a damaged checkpoint or too few rounds: refused before anything is written
                if folder is not None:
                    write_yaml(run_dir / RECIPE, record)
                    for text in [*clamped, busy_machine()]:
                        if text:
                            print(f"fedlight: warning: {text}", file=sys.stderr)
                return federation.run()
            finally:
                federation.workers.close()
        finally:
            torch.set_num_threads(threads)
