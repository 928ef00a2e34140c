"""``fedlight fit``: from a resolved recipe to a finished run folder."""

from __future__ import annotations

import os
import warnings
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch
from lightning.fabric import Fabric

from fedlight import registry
from fedlight.config.files import read_yaml_mapping
from fedlight.config.schema import Recipe
from fedlight.data.partition import partition
from fedlight.data.sources import ImageData, load_dataset, take_subset
from fedlight.engine import launch, preemption
from fedlight.engine.exchange_rounds import validate_exchange
from fedlight.engine.orchestrator import Federation
from fedlight.engine.rundir import prepare_run_dir, write_yaml
from fedlight.errors import UserError
from fedlight.methods.base import FederatedModule, OptimizerSpec
from fedlight.seeding import derive_seed, numpy_rng
from fedlight.server.base import Aggregator


def prepare_data(recipe: Recipe) -> tuple[ImageData, list]:
    """Load, subset and partition the data (raises UserError on missing data or bad partitions)."""
    d, p, s = recipe.data, recipe.partition, recipe.stream
    data = take_subset(load_dataset(d.name, d.root, d.download, recipe.seed), d.subset, d.test_subset, recipe.seed)
    kind, per_client = p.kind, p.classes_per_client
    if s.classes_per_client is not None:  # a stream's classes are its device's partition's classes
        if s.velocity is None or p.kind not in ("iid", "classes"):
            raise UserError("stream.classes_per_client needs stream.velocity set and partition.kind iid or classes; "
                            "set stream.velocity or drop stream.classes_per_client")
        kind, per_client = "classes", s.classes_per_client
    parts = partition(kind, data.train_y.numpy(), recipe.clients.num, numpy_rng(recipe.seed, "partition"),
                      alpha=p.alpha, min_size=p.min_size, shards_per_client=p.shards_per_client,
                      classes_per_client=per_client)
    return data, parts


def build_module(recipe: Recipe, data: ImageData) -> FederatedModule:
    """The method's worker model, initialised from the run seed, in ``fabric.channels_last`` format."""
    torch.manual_seed(derive_seed(recipe.seed, "init"))
    l = recipe.local
    module = registry.build_method(recipe.method, recipe.model.backbone, data.channels, data.image_size,
                                   data.num_classes, OptimizerSpec(l.optimizer, l.lr, l.momentum, l.weight_decay))
    return module.to(memory_format=torch.channels_last) if recipe.fabric.channels_last else module


# a run's recipe.yaml is a copy of its resolved recipe, written again when the run resumes
RECIPE_COPY_FIX = "it only records the run's recipe: delete it and rerun with --resume, which writes it again"


def _check_resumable(run_dir: Path, recipe: Recipe) -> None:
    saved_path = run_dir / "recipe.yaml"
    if not saved_path.is_file():
        return
    saved = read_yaml_mapping(saved_path, "the run's recipe", RECIPE_COPY_FIX)
    # rounds may grow; faults model the cluster, not the experiment
    changed = sorted(k for k in saved if saved[k] != asdict(recipe).get(k) and k not in ("rounds", "faults"))
    if changed:
        raise UserError(f"--resume with a recipe that differs from '{saved_path}' in {', '.join(changed)}; "
                        "resume with the same recipe and overrides (rounds may grow), or use --overwrite")


def make_fabric(recipe: Recipe) -> Fabric:
    """Fabric for ``fabric.*``; an impossible device request is a user error."""
    f = recipe.fabric
    launch.require_launcher(f.devices, f.num_nodes)  # fit() called without the CLI
    processes = f.devices * f.num_nodes
    try:
        with warnings.catch_warnings():  # Lightning's hint to launch through srun is noise before a one-line error
            warnings.filterwarnings("ignore", message=".*`srun` command is available")
            return Fabric(accelerator=f.accelerator, devices=f.devices, num_nodes=f.num_nodes,
                          precision=f.precision, strategy="ddp" if processes > 1 else "auto")
    except (RuntimeError, ValueError) as exc:  # Lightning's MisconfigurationException is a ValueError
        raise UserError(f"fabric.accelerator={f.accelerator} fabric.devices={f.devices} "
                        f"fabric.precision={f.precision} cannot be set up here ({exc}); "
                        "use fabric.accelerator=auto or cpu") from None


def fit(recipe: Recipe, resume: bool = False, overwrite: bool = False) -> dict[str, Any]:
    """Run (or resume) the simulation described by ``recipe``; returns the results mapping.

    Every user error (recipe, data, partition, run folder) is raised before anything is
    written or any process is launched. SIGUSR1 or SIGTERM stop the run after the current
    round's checkpoint and requeue its SLURM job: ``preemption.Preempted`` is raised.
    """
    with preemption.signals_handled():
        try:
            return _fit(recipe, resume, overwrite)
        except preemption.Preempted as stop:
            preemption.requeue_after(stop)
            raise


def check_recipe(recipe: Recipe) -> Aggregator:
    """What a recipe can get wrong before any data is read (``fit`` and ``fedlight sweep`` both ask);
    returns the run's aggregator."""
    server = registry.validate(recipe.method, recipe.server, recipe.clients.num, recipe.partition.public_client)
    validate_exchange(recipe, server.aggregate_every)
    if recipe.fabric.workers > 1 and (server.uses_public_set or server.aggregate_every is not None):
        raise UserError(f"fabric.workers={recipe.fabric.workers} trains clients side by side, which "
                        f"server.name={recipe.server['name']} cannot (its clients share one model's "
                        "public-set embeddings or device-to-device exchange); set fabric.workers=1")
    return server


def _fit(recipe: Recipe, resume: bool, overwrite: bool) -> dict[str, Any]:
    server = check_recipe(recipe)
    data, parts = prepare_data(recipe)
    if getattr(registry.METHODS[recipe.method["name"]], "uses_protected", False) and data.train_a is None:
        raise UserError(f"method.name={recipe.method['name']} needs a dataset with a protected attribute; "
                        f"data.name={recipe.data.name} has none (use data.name=diabetes)")
    module = build_module(recipe, data)  # the method's own checks (LG's global_layers) come before the run folder
    run_dir = Path(recipe.run_dir)
    fabric = make_fabric(recipe)
    if fabric.global_rank == 0:
        if resume:
            _check_resumable(run_dir, recipe)
        prepare_run_dir(run_dir, resume, overwrite, recipe.run.min_free_mb)
        write_yaml(run_dir / "recipe.yaml", asdict(recipe))
    fabric.launch()
    # Lightning sets PYTORCH_NVML_BASED_CUDA_CHECK=1 on import, so that asking whether CUDA exists
    # cannot poison a later fork. fedlight forks nothing (its ranks start before torch is
    # imported) and the device is chosen by now, while with the variable set each
    # torch.cuda.is_available() tries to load NVML (82 us against 1 us on the CPU machine,
    # benchmarks/micro.py), paid by torch.optim at every step (its graph-capture check) with
    # the GIL held.
    os.environ.pop("PYTORCH_NVML_BASED_CUDA_CHECK", None)
    if recipe.fabric.threads:
        torch.set_num_threads(recipe.fabric.threads)
    federation = Federation(fabric, recipe, data, parts, module, server, run_dir)
    try:
        return federation.run(resume)
    finally:
        federation.workers.close()
