"""Evaluating the worker model: linear probe, kNN and (if it has one) its classifier, on the test split."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import torch
from lightning.fabric import Fabric

from fedlight.data.image_data import ImageData
from fedlight.data.views import ViewMaker
from fedlight.engine.output.progress import EvalPhases
from fedlight.errors import UserError
from fedlight.eval.probes import knn_accuracy, knn_chunks, label_subset, linear_probe_accuracy, probe_evaluations
from fedlight.methods.federated_module import FederatedModule
from fedlight.seeding import numpy_rng

State = dict[str, torch.Tensor]
METRICS = ("linear_probe_acc", "knn_acc", "test_acc")
CHUNK = 256  # images a forward pass of ``Evaluator.apply`` takes


def batches(images: int) -> int:
    """The forward passes ``Evaluator.apply`` makes over ``images`` images (a phase's progress total)."""
    return -(-images // CHUNK)


@dataclass(frozen=True)
class EvalOptions:
    """How the worker model is scored on frozen features: a linear probe (L-BFGS logistic
    regression) and a weighted kNN vote. The defaults learn from every label, with k=200
    neighbours as in Wu et al. 2018's kNN evaluation and a temperature of 0.1.

    Attributes:
        label_fraction: share of the training set, stratified by class, the probe and kNN learn from.
        extra_label_fractions: further probes on these shares (e.g. SOFed's 1% / 10% protocol).
        knn_k: neighbours of the weighted kNN vote; knn_temperature: its similarity temperature.
        probe_epochs: L-BFGS iterations of the linear probe.
    """

    label_fraction: float = 1.0
    extra_label_fractions: tuple[float, ...] = ()
    knn_k: int = 200
    knn_temperature: float = 0.1
    probe_epochs: int = 100

    def __post_init__(self) -> None:
        for share in (self.label_fraction, *self.extra_label_fractions):
            if not 0 < share <= 1:
                raise UserError(f"eval.label_fraction and eval.extra_label_fractions must be in (0, 1], got {share}; "
                                "use a share such as 0.1")
        if self.knn_k < 1 or self.knn_temperature <= 0 or self.probe_epochs < 1:
            raise UserError(f"eval.knn_k={self.knn_k}, eval.knn_temperature={self.knn_temperature} and "
                            f"eval.probe_epochs={self.probe_epochs} must all be > 0; use e.g. 200, 0.1 and 100")


def final_metrics(last: dict[str, Any] | None, prefixes: tuple[str, ...]) -> dict[str, Any] | None:
    """results.json's ``final``: the last evaluation's columns that are final metrics (``METRICS``
    and the parts' ``prefixes``), or None if the run never evaluated."""
    prefixes = METRICS + prefixes
    return {k: v for k, v in last.items() if k.startswith(prefixes)} if last else None


def mean_and_spread(key: str, values: list[float]) -> dict[str, float | None]:
    """``{key: mean, key + "_std": std}`` of a metric over clients; None where no client has it."""
    if not values:
        return {key: None, f"{key}_std": None}
    return {key: float(np.mean(values)), f"{key}_std": float(np.std(values))}


class Evaluator:
    """Scores whatever the worker model holds when called.

    Args:
        fabric: device and precision.
        module: the worker model.
        data: training images (the probe's labelled pool) and the test split.
        views: normalisation (no augmentation at evaluation).
        options: label fractions, kNN k and temperature, probe steps.
        seed: run seed (the labelled subset is drawn from it).
    """

    def __init__(self, fabric: Fabric, module: FederatedModule, data: ImageData, views: ViewMaker,
                 options: EvalOptions = EvalOptions(), seed: int = 0) -> None:
        self.fabric, self.module, self.data, self.views, self.options = fabric, module, data, views, options
        labels = data.train_y.numpy()
        self.probe_idx = torch.as_tensor(label_subset(labels, options.label_fraction,
                                                      numpy_rng(seed, "label-fraction")))
        self.extra_idx = {f: torch.as_tensor(label_subset(labels, f, numpy_rng(seed, "label-fraction")))
                          for f in options.extra_label_fractions}

    def inputs(self) -> dict[str, Any]:
        """What the model is fed, as results.json's ``inputs`` records it for ``fedlight export``: the images'
        ``channels`` and ``image_size``, and the per-channel ``mean`` and ``std`` (in [0, 1]) that every
        evaluation and view normalised them with."""
        return {"channels": self.data.channels, "image_size": self.data.image_size,
                "normalize": {"mean": self.views.mean.flatten().tolist(), "std": self.views.std.flatten().tolist()}}

    @torch.no_grad()
    def apply(self, fn: Callable[[torch.Tensor], torch.Tensor], images: torch.Tensor, chunk: int = CHUNK,
              advance: Callable[[], None] = lambda: None) -> torch.Tensor:
        """``fn`` (e.g. ``module.features``) over uint8 ``images`` in eval mode, in chunks (``advance``
        is called after each: ``batches(len(images))`` of them by default); float output.

        256 images a chunk keep a small CNN's activations in cache: on the 2-core CPU the
        features of 5,000 28x28 images take 0.31 s, against 0.78 s in chunks of 1,024
        (``benchmarks/micro.py``).
        """
        self.module.eval()
        out = []
        for start in range(0, len(images), chunk):
            x = self.views.normalize(self.fabric.to_device(images[start:start + chunk]))
            with self.fabric.autocast():
                out.append(fn(x).float())
            advance()
        return torch.cat(out)

    def model_metrics(self, phases: EvalPhases | None = None) -> dict[str, float | None]:
        """The three accuracies of the model as loaded (``test_acc`` is None without a classifier);
        ``phases`` (the progress bars) is told each phase as it starts, with its work, and each unit done."""
        options, data, module = self.options, self.data, self.module
        phases = phases or EvalPhases()
        phases("features", batches(len(self.probe_idx)) + batches(len(data.test_x)))
        train_f = self.apply(module.features, data.train_x[self.probe_idx], advance=phases.advance)
        train_y = self.fabric.to_device(data.train_y[self.probe_idx])
        test_f = self.apply(module.features, data.test_x, advance=phases.advance)
        test_y = self.fabric.to_device(data.test_y)
        test_acc = None
        if module.has_classifier:
            phases("classifier", batches(len(data.test_x)))
            logits = self.apply(module.classify, data.test_x, advance=phases.advance)
            test_acc = float((logits.argmax(1) == test_y).float().mean())
        probe = lambda name, feats, labels: self._probe(phases, name, feats, labels, test_f, test_y)  # noqa: E731
        out: dict[str, float | None] = {"linear_probe_acc": probe("linear probe", train_f, train_y)}
        phases("kNN", knn_chunks(len(test_f)), "chunks")
        out["knn_acc"] = knn_accuracy(train_f, train_y, test_f, test_y, data.num_classes, options.knn_k,
                                      options.knn_temperature, on_chunk=phases.advance)
        out["test_acc"] = test_acc
        if data.test_domain is not None:  # feature shift: each domain's share of the test split alone
            out.update(self._per_domain(train_f, train_y, test_f, test_y, logits if module.has_classifier else None))
        for fraction, idx in self.extra_idx.items():  # e.g. SOFed's 1% / 10% / 100% label protocol
            phases(f"features, {fraction:.0%} labels", batches(len(idx)))
            feats = self.apply(module.features, data.train_x[idx], advance=phases.advance)
            out[f"linear_probe_acc@{fraction:g}"] = probe(f"linear probe, {fraction:.0%} labels", feats,
                                                          self.fabric.to_device(data.train_y[idx]))
        return out

    def _per_domain(self, train_f: torch.Tensor, train_y: torch.Tensor, test_f: torch.Tensor, test_y: torch.Tensor,
                    logits: torch.Tensor | None) -> dict[str, float | None]:
        """``knn_acc_domain<d>`` (and ``test_acc_domain<d>`` with a classifier) over the test images of each
        domain d (``data.test_domain``), the kNN voting among every domain's labelled training features."""
        domain, out = self.fabric.to_device(self.data.test_domain), {}
        for d in range(int(domain.max()) + 1):
            mine = domain == d
            out[f"knn_acc_domain{d}"] = knn_accuracy(train_f, train_y, test_f[mine], test_y[mine], self.data.num_classes,
                                                     self.options.knn_k, self.options.knn_temperature)
            if logits is not None:
                out[f"test_acc_domain{d}"] = float((logits[mine].argmax(1) == test_y[mine]).float().mean())
        return out

    def _probe(self, phases: EvalPhases, name: str, train_f: torch.Tensor, train_y: torch.Tensor,
               test_f: torch.Tensor, test_y: torch.Tensor) -> float:
        """The linear probe's accuracy, as the phase ``name`` whose units are L-BFGS's loss evaluations."""
        steps = self.options.probe_epochs
        phases(name, probe_evaluations(steps), "evaluations")
        return linear_probe_accuracy(train_f, train_y, test_f, test_y, self.data.num_classes, steps=steps,
                                     on_evaluation=phases.advance)

    def scores(self, client_models: list[State] | None, restore: State,
               phases: EvalPhases | None = None) -> dict[str, Any]:
        """``model_metrics``, or with ``client_models`` (local-only training) ``clients_metrics``."""
        if client_models is None:
            return self.model_metrics(phases)
        return self.clients_metrics(client_models, restore, phases)

    def clients_metrics(self, client_models: list[State], restore: State,
                        phases: EvalPhases | None = None) -> dict[str, Any]:
        """Mean and spread (``<metric>_std``) over clients' own models (local-only training; their
        states on any device); the worker model gets ``restore`` back afterwards."""
        phases = phases or EvalPhases()
        per_client = []
        for i, state in enumerate(client_models):
            self.module.load_partial({k: self.fabric.to_device(v) for k, v in state.items()})
            per_client.append(self.model_metrics(phases.within(f"client {i + 1}/{len(client_models)}, ")))
        self.module.load_partial(restore)
        out: dict[str, float | None] = {}
        for key in METRICS:
            out.update(mean_and_spread(key, [m[key] for m in per_client if m[key] is not None]))
        return out
