"""``fedlight.probe_encoder``: an exported encoder's kNN and linear probe, scored as its run scored them.

``fedlight export`` records the run's evaluation protocol in the file (``run.evaluation``: the data,
its subsets, the seed that draws the labelled share, k, the temperature, the probe's L-BFGS
iterations, and the feature shift's domains); this reads the same images with fedlight's own loader
(``data.root``, no download), shifts them as the run did, draws the same labelled share and scores the encoder's features with the run's own probes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from fedlight.data.domains import shift_like_run
from fedlight.data.sources import load_dataset, take_subset
from fedlight.errors import UserError
from fedlight.eval.probes import knn_accuracy, label_subset, linear_probe_accuracy
from fedlight.models.encoder_file import load_encoder, read_export
from fedlight.seeding import numpy_rng

CHUNK = 256  # images a forward pass takes, as the run's evaluator (engine/loop/evaluator.py's CHUNK)
PROTOCOL = ("data", "root", "subset", "test_subset", "seed", "label_fraction", "extra_label_fractions", "knn_k",
            "knn_temperature", "probe_epochs", "domains", "clients")
FIXED = ("data", "root", "domains", "clients")  # what the run's images are: no downstream probe changes them


def evaluation_record(recipe: dict[str, Any]) -> dict[str, Any]:
    """What ``probe_encoder`` needs of a run's resolved ``recipe`` to score as the run did (``PROTOCOL``)."""
    d, e = recipe["data"], recipe["eval"]
    return {"data": d["name"], "root": d["root"], "subset": d.get("subset"), "test_subset": d.get("test_subset"),
            "seed": recipe["seed"], "label_fraction": e["label_fraction"],
            "extra_label_fractions": list(e.get("extra_label_fractions") or ()), "knn_k": e["knn_k"],
            "knn_temperature": e["knn_temperature"], "probe_epochs": e["probe_epochs"],
            "domains": list(recipe["partition"].get("domains") or ()), "clients": recipe["clients"]["num"]}


def probe_encoder(path: str | Path, data_root: str | Path | None = None, device: str | torch.device = "cpu",
                  client: int | None = None, **changes: Any) -> dict[str, float]:
    """The kNN and linear-probe accuracies of the encoder ``fedlight export`` wrote to ``path``, computed as
    its run computed its final ones: the same images (fedlight's loader, the run's subsets), the same
    seeded labelled share, k, temperature and L-BFGS iterations. With the run's settings (no ``changes``)
    on the kind of device it evaluated on, they are ``results.json``'s ``final`` (a CPU run's to the digit).

    Args:
        path: a file ``fedlight export RUN_DIR`` wrote.
        data_root: where the data is (default: the run's ``data.root``).
        device: where the features are computed.
        client: score this client's encoder (``load_encoder``'s ``client``).
        **changes: another protocol for a downstream probe: ``label_fraction``, ``knn_k``,
            ``knn_temperature``, ``probe_epochs``, ``subset``, ``test_subset``, ``seed`` or
            ``extra_label_fractions``.

    Returns:
        ``{"linear_probe_acc": ..., "knn_acc": ...}`` as fractions in [0, 1], and
        ``linear_probe_acc@<fraction>`` for each of ``extra_label_fractions``.

    Raises:
        UserError: one line, for a file that is no export or records no protocol (an export older than it),
            an unknown key in ``changes``, or data not under ``data_root``.
    """
    protocol = (read_export(path).get("run") or {}).get("evaluation")
    if not isinstance(protocol, dict):
        raise UserError(f"encoder file '{path}' records no evaluation protocol (exported before fedlight recorded "
                        "it): export the run again with fedlight export RUN_DIR --overwrite")
    allowed = [k for k in PROTOCOL if k not in FIXED]
    unknown = sorted(set(changes) - set(allowed))
    if unknown:
        raise UserError(f"probe_encoder: unknown option '{unknown[0]}'; give one of {', '.join(allowed)} "
                        "(data_root for the data's folder)")
    p = {**protocol, **changes}
    root = str(data_root) if data_root is not None else p["root"]
    data = take_subset(load_dataset(p["data"], root, False, p["seed"]), p["subset"], p["test_subset"], p["seed"])
    # the run's domains, drawn from the run's seed: another ``seed`` redraws subsets and labels, not the shifts
    data = shift_like_run(data, p.get("domains") or [], p.get("clients", 0), protocol["seed"])  # older: no domains
    encoder = load_encoder(path, device, client)
    labels = data.train_y.numpy()

    @torch.no_grad()
    def features(images: torch.Tensor) -> torch.Tensor:
        return torch.cat([encoder(images[i:i + CHUNK].to(device)).float() for i in range(0, len(images), CHUNK)])

    def labelled(fraction: float) -> torch.Tensor:
        return torch.as_tensor(label_subset(labels, fraction, numpy_rng(p["seed"], "label-fraction")))

    test_f, test_y = features(data.test_x), data.test_y.to(device)
    idx = labelled(p["label_fraction"])
    train_f, train_y = features(data.train_x[idx]), data.train_y[idx].to(device)
    n = data.num_classes
    out = {"linear_probe_acc": linear_probe_accuracy(train_f, train_y, test_f, test_y, n, steps=p["probe_epochs"]),
           "knn_acc": knn_accuracy(train_f, train_y, test_f, test_y, n, p["knn_k"], p["knn_temperature"])}
    for fraction in p["extra_label_fractions"]:
        idx = labelled(fraction)
        out[f"linear_probe_acc@{fraction:g}"] = linear_probe_accuracy(
            features(data.train_x[idx]), data.train_y[idx].to(device), test_f, test_y, n, steps=p["probe_epochs"])
    return out
