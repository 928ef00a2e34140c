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
from fedlight.eval import diagnostics
from fedlight.eval.metric_names import LABEL_FREE, READINGS
from fedlight.eval.client_spread import share_accuracies, spread_columns
from fedlight.eval.finetune import finetune_accuracy
from fedlight.eval.probes import (accuracy, knn_chunks, knn_predict, label_subset, linear_probe_accuracy,
                                  probe_evaluations)
from fedlight.methods.federated_module import FederatedModule
from fedlight.seeding import numpy_rng, torch_generator

State = dict[str, torch.Tensor]
METRICS = ("linear_probe_acc", "knn_acc", "test_acc")
# the label-free readings of every evaluation (fedlight.eval.diagnostics) and the kNN over clients' own test
# shares (fedlight.eval.client_spread), by the name ``eval.readings`` gives each; ``drift`` is the clients'
# linear CKA to the global encoder (fedlight.engine.loop.client_drift), measured as the round trains
DEFAULT_READINGS = tuple(r for r in READINGS if r != "drift")
# their history columns, which results.json's ``final`` keeps with the accuracies: the label-free ones (TensorBoard's
# ``representation/*``), then the accuracies over clients' shares and of the fine-tunes (``accuracy/*``)
READING_COLUMNS = LABEL_FREE + ("client_knn_acc", "finetune_acc")
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
        readings: the label-free readings and client views to add (``READINGS``).
        reading_samples: test images whose two augmented views give alignment and uniformity.
        finetune: label fractions at which a copy of the encoder is fine-tuned with a linear head.
        finetune_epochs: the fine-tune's passes over its labelled images (``fedlight.eval.finetune``).
        local_test: score each client on its own test split (``eval.local_test``, LG-FedAvg's local test:
            ``engine.parts.lg_fedavg.local_tests``).
    """

    label_fraction: float = 1.0
    extra_label_fractions: tuple[float, ...] = ()
    knn_k: int = 200
    knn_temperature: float = 0.1
    probe_epochs: int = 100
    readings: tuple[str, ...] = DEFAULT_READINGS
    reading_samples: int = 256
    finetune: tuple[float, ...] = ()
    finetune_epochs: int = 5
    local_test: bool = False

    def __post_init__(self) -> None:
        unknown = [r for r in self.readings if r not in READINGS]
        if unknown:
            raise UserError(f"eval.readings: unknown reading '{unknown[0]}'; give some of {', '.join(READINGS)}")
        for share in self.finetune:
            if not 0 < share <= 1:
                raise UserError(f"eval.finetune must list label fractions in (0, 1], got {share}; use e.g. [0.01, 0.1]")
        if self.finetune_epochs < 1 or self.reading_samples < 2:
            raise UserError(f"eval.finetune_epochs={self.finetune_epochs} must be > 0 and eval.reading_samples="
                            f"{self.reading_samples} must be > 1; use e.g. 5 and 256")
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
    prefixes = METRICS + READING_COLUMNS + prefixes
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
        options: label fractions, kNN k and temperature, probe steps, readings, fine-tunes.
        seed: run seed (the labelled subset, the readings' batch and views, the fine-tunes are drawn from it).
        client_shares: each client's held-out share of the test split (index arrays), for ``client_knn``.
    """

    def __init__(self, fabric: Fabric, module: FederatedModule, data: ImageData, views: ViewMaker,
                 options: EvalOptions = EvalOptions(), seed: int = 0,
                 client_shares: list[np.ndarray] | None = None) -> None:
        self.fabric, self.module, self.data, self.views, self.options = fabric, module, data, views, options
        self.seed = seed
        labels = data.train_y.numpy()
        self.probe_idx = torch.as_tensor(label_subset(labels, options.label_fraction,
                                                      numpy_rng(seed, "label-fraction")))
        self.extra_idx = {f: torch.as_tensor(label_subset(labels, f, numpy_rng(seed, "label-fraction")))
                          for f in options.extra_label_fractions}
        self.finetune_idx = {f: torch.as_tensor(label_subset(labels, f, numpy_rng(seed, "label-fraction")))
                             for f in options.finetune}
        batch = min(options.reading_samples, len(data.test_x))
        self.reading_idx = torch.as_tensor(np.sort(numpy_rng(seed, "reading-batch").choice(
            len(data.test_x), batch, replace=False)))
        self.client_shares = ([torch.as_tensor(s, dtype=torch.long) for s in client_shares]
                              if client_shares is not None and "client_knn" in options.readings else None)
        self.spectrum: torch.Tensor | None = None  # the last evaluation's normalised singular values (TensorBoard)
        self.client_accuracies: list[float] = []  # and its kNN accuracy on each client's share
        self.embedding_dim: int | None = None  # D of the features it read (the collapse alarm's std)

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

    def model_metrics(self, phases: EvalPhases | None = None, finetune: bool = False) -> dict[str, float | None]:
        """The three accuracies of the model as loaded (``test_acc`` is None without a classifier), its readings
        and, with ``finetune``, its fine-tunes; ``phases`` (the progress bars) is told each phase as it starts,
        with its work, and each unit done."""
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
        knn = knn_predict(train_f, train_y, test_f, data.num_classes, options.knn_k, options.knn_temperature,
                          on_chunk=phases.advance)
        out["knn_acc"] = accuracy(knn, test_y, data.num_classes)
        out["test_acc"] = test_acc
        if data.test_domain is not None:  # feature shift: each domain's share of the test split alone
            out.update(self._per_domain(knn, test_y, logits if module.has_classifier else None))
        for fraction, idx in self.extra_idx.items():  # e.g. SOFed's 1% / 10% / 100% label protocol
            phases(f"features, {fraction:.0%} labels", batches(len(idx)))
            feats = self.apply(module.features, data.train_x[idx], advance=phases.advance)
            out[f"linear_probe_acc@{fraction:g}"] = probe(f"linear probe, {fraction:.0%} labels", feats,
                                                          self.fabric.to_device(data.train_y[idx]))
        out.update(self.readings(test_f, knn == test_y, phases))
        out.update(self.finetunes(phases) if finetune else {})
        return out

    def readings(self, test_f: torch.Tensor, knn_correct: torch.Tensor, phases: EvalPhases) -> dict[str, float | None]:
        """The label-free readings of ``options.readings`` on the test features (M, D) the evaluation computed
        (alignment and uniformity on the fixed batch's two views: one more forward pass of ``reading_samples``
        images), and the kNN over the clients' test shares from its per-image hits ``knn_correct`` (M,)."""
        wanted, out = self.options.readings, {}
        phases("readings", 1)
        self.embedding_dim = test_f.shape[1]
        if {"rankme", "spectrum"} & set(wanted):
            self.spectrum = diagnostics.normalized_spectrum(test_f).float().cpu()
            out.update({"rankme": diagnostics.rankme(self.spectrum)} if "rankme" in wanted else {})
            out.update({"spectrum_top1": float(self.spectrum[0])} if "spectrum" in wanted else {})
        if "embedding_std" in wanted:
            out["embedding_std_mean"] = diagnostics.embedding_std(test_f)
        if {"alignment", "uniformity"} & set(wanted):
            z1, z2 = self.view_features()
            out.update({"alignment": diagnostics.alignment(z1, z2)} if "alignment" in wanted else {})
            if "uniformity" in wanted:
                out["uniformity"] = (diagnostics.uniformity(z1) + diagnostics.uniformity(z2)) / 2
        if self.client_shares is not None:
            self.client_accuracies = share_accuracies(knn_correct.cpu(), self.client_shares)
            out.update(spread_columns("client_knn_acc", self.client_accuracies))
        phases.advance()
        return out

    @torch.no_grad()
    def view_features(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The features (B, D) of two augmented views of the fixed reading batch: the same images and the same
        views at every evaluation (their own seeded generator; no draw from any other)."""
        images = self.fabric.to_device(self.data.test_x[self.reading_idx])
        views = self.views.views(images, 2, torch_generator(self.seed, "reading-views"))
        self.module.eval()
        with self.fabric.autocast():
            return self.module.features(views[0]).float(), self.module.features(views[1]).float()

    def finetunes(self, phases: EvalPhases) -> dict[str, float]:
        """``finetune_acc@<fraction>``: a copy of the encoder fine-tuned with a linear head on each fraction of
        ``options.finetune`` (``fedlight.eval.finetune``), scored on the test split."""
        out, data = {}, self.data
        if not self.finetune_idx:
            return out
        test_x, test_y = self.views.normalize(self.fabric.to_device(data.test_x)), self.fabric.to_device(data.test_y)
        for fraction, idx in self.finetune_idx.items():
            phases(f"fine-tune, {fraction:.0%} labels", 1)
            out[f"finetune_acc@{fraction:g}"] = finetune_accuracy(
                self.module, lambda m, x: m.features(x), self.views.normalize(self.fabric.to_device(data.train_x[idx])),
                self.fabric.to_device(data.train_y[idx]), test_x, test_y, data.num_classes,
                self.options.finetune_epochs, torch_generator(self.seed, "finetune"))
            phases.advance()
        return out

    def _per_domain(self, knn: torch.Tensor, test_y: torch.Tensor,
                    logits: torch.Tensor | None) -> dict[str, float | None]:
        """``knn_acc_domain<d>`` (and ``test_acc_domain<d>`` with a classifier) over the test images of each
        domain d (``data.test_domain``): the kNN predictions ``knn`` (M,), voted among every domain's labelled
        training features, scored on that domain's share."""
        domain, out = self.fabric.to_device(self.data.test_domain), {}
        for d in range(int(domain.max()) + 1):
            mine = domain == d
            out[f"knn_acc_domain{d}"] = accuracy(knn[mine], test_y[mine], self.data.num_classes)
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

    def scores(self, client_models: list[State] | None, restore: State, phases: EvalPhases | None = None,
               finetune: bool = False) -> dict[str, Any]:
        """``model_metrics``, or with ``client_models`` (local-only training) ``clients_metrics``; the fine-tunes
        with ``finetune`` (the run asks for them at its last round only: their budget is a probe's many times)."""
        if client_models is None:
            return self.model_metrics(phases, finetune)
        return self.clients_metrics(client_models, restore, phases, finetune)

    def clients_metrics(self, client_models: list[State], restore: State,
                        phases: EvalPhases | None = None, finetune: bool = False) -> dict[str, Any]:
        """Mean and spread (``<metric>_std``) over clients' own models (local-only training; their
        states on any device); the worker model gets ``restore`` back afterwards."""
        phases = phases or EvalPhases()
        per_client = []
        for i, state in enumerate(client_models):
            self.module.load_partial({k: self.fabric.to_device(v) for k, v in state.items()})
            per_client.append(self.model_metrics(phases.within(f"client {i + 1}/{len(client_models)}, "), finetune))
        self.module.load_partial(restore)
        out: dict[str, float | None] = {}
        for key in METRICS:
            out.update(mean_and_spread(key, [m[key] for m in per_client if m[key] is not None]))
        for key in (k for k in per_client[0] if k not in METRICS) if per_client else ():  # readings: their mean
            values = [m[key] for m in per_client if m.get(key) is not None]
            out[key] = float(np.mean(values)) if values else None
        return out
