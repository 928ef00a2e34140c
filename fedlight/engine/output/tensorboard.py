"""What the run shows in TensorBoard besides scalars: the partition, and its hparams: the keys
``run.hparams`` lists (a sweep lists what varies across it, ``fedlight.sweep.tensorboard_view``),
else the keys the run uses."""

from __future__ import annotations

from typing import Any, Iterable

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402


def partition_figure(counts: np.ndarray, title: str = "partition") -> Any:
    """Heat map of a (K clients, C classes) count matrix."""
    k, c = counts.shape
    fig, ax = plt.subplots(figsize=(max(4, c * 0.5), max(3, min(k, 100) * 0.25)))
    image = ax.imshow(counts, aspect="auto", cmap="viridis", interpolation="nearest")
    ax.set_xlabel("class")
    ax.set_ylabel("client")
    ax.set_title(f"{title}: {k} clients x {c} classes")
    fig.colorbar(image, ax=ax, label="samples")
    fig.tight_layout()
    return fig


def flatten(obj: Any, prefix: str = "") -> dict[str, Any]:
    """Nested mapping -> ``{"a/b": value}`` with scalars kept and anything else as text."""
    out: dict[str, Any] = {}
    for key, value in obj.items():
        name = f"{prefix}/{key}" if prefix else str(key)
        if isinstance(value, dict):
            out.update(flatten(value, name))
        else:
            out[name] = value if isinstance(value, (int, float, str, bool)) else str(value)
    return out


# The keys every run reads whatever its parts: the loop, data, model, method, server, local
# optimizer, views, evaluation, the round plug-ins the recipe names, and what the method, server,
# backbone and plug-ins were built with (``resolved``, defaults included). Sections (``clients``)
# stand for all their keys.
CORE_KEYS = ("name", "seed", "rounds", "data.name", "data.subset", "data.test_subset", "partition.kind",
             "clients", "local.batch_size", "local.lr", "local.optimizer", "local.lr_schedule", "local.weight_decay",
             "model", "views", "method", "server", "plugins", "resolved", "eval.every", "eval.label_fraction", "eval.extra_label_fractions",
             "eval.knn_k", "eval.knn_temperature", "eval.probe_epochs", "eval.readings", "eval.reading_samples",
             "eval.finetune", "eval.finetune_epochs", "fabric.precision")
# partition.kind -> the keys its partition reads (fedlight.data.partition.partition's dispatch)
PARTITION_KEYS = {"iid": (), "dirichlet": ("partition.alpha", "partition.min_size"),
                  "shards": ("partition.shards_per_client",), "classes": ("partition.classes_per_client",),
                  "class_ring": ("partition.classes_per_client",),
                  "quantity": ("partition.quantity_law", "partition.min_size"),
                  "natural": ("partition.writers", "data.group_column")}
# partition.quantity_law -> the parameter its draw reads
QUANTITY_KEYS = {"lognormal": ("partition.quantity_sigma",), "power_law": ("partition.quantity_exponent",)}


def core_keys(record: dict[str, Any]) -> tuple[str, ...]:
    """``CORE_KEYS`` plus the core keys that the recipe's own values make read: the partition
    kind's keys (and quantity skew's law's parameter, feature shift's domains where set), ``local.momentum`` for SGD, ``local.lr_decay`` for the exponential schedule,
    ``local.schedule`` when it is set."""
    local, partition = record.get("local", {}), record.get("partition", {})
    kind = partition.get("kind")
    return (CORE_KEYS + PARTITION_KEYS.get(kind, ())
            + (QUANTITY_KEYS.get(partition.get("quantity_law"), ()) if kind == "quantity" else ())
            + (("partition.domains",) if partition.get("domains") else ())
            + (("local.momentum",) if local.get("optimizer") == "sgd" else ())
            + (("local.lr_decay",) if local.get("lr_schedule") == "exponential" else ())
            + (("local.schedule",) if local.get("schedule") is not None else ()))


def used_hparams(record: dict[str, Any], part_keys: Iterable[str]) -> dict[str, Any]:
    """The TensorBoard hparams of a run: the flattened resolved recipe ``record`` (``{"a/b": v}``),
    only the keys the run uses.

    The rule: a key is listed when a part of this run reads it and its value can change the
    run's numbers. The parts every run has declare theirs in :func:`core_keys`; every other
    part (its client schedule, its round plug-ins, its fault model) declares the sections or
    dotted keys it reads in ``RoundPlugin.option_keys`` (``part_keys``), so a key of a part the
    run does not build (SOFed's ``stream.*`` and ``buffer.*`` in a FedAvg run, CF-CL's
    ``exchange.*``, the other partition kinds' keys) is left out. Where and how fast the run
    goes is no hyper-parameter: ``run.*``, ``data.root``, ``data.download``, ``fabric.*`` but
    ``precision`` (devices, threads and workers give the same numbers up to float summation
    order), nor is ``eval.projector_samples``, which only shapes the final embedding picture.

    Args:
        record: the resolved recipe as a nested mapping (``dataclasses.asdict(recipe)``).
        part_keys: dotted keys or section names the run's parts declare.
    """
    return _named(record, (*core_keys(record), *part_keys))


def run_hparams(record: dict[str, Any], part_keys: Iterable[str]) -> dict[str, Any]:
    """The hparams a run logs: the keys its ``run.hparams`` lists (a sweep's: the keys it varies, with
    ``method.name`` and ``seed``; one a run lacks, e.g. ``method.mu`` in an arm without it, is left
    out), else :func:`used_hparams`. A sweep's runs so list only the columns that tell them apart.

    Args:
        record: the resolved recipe as a nested mapping; part_keys: as for :func:`used_hparams`.
    """
    listed = (record.get("run") or {}).get("hparams")
    return used_hparams(record, part_keys) if listed is None else _named(record, listed)


def _named(record: dict[str, Any], keys: Iterable[str]) -> dict[str, Any]:
    """The flattened ``record``'s values (``{"a/b": v}``) of the dotted ``keys`` (a section stands for its keys)."""
    wanted = [key.replace(".", "/") for key in keys]
    return {k: v for k, v in flatten(record).items() if any(k == w or k.startswith(w + "/") for w in wanted)}
