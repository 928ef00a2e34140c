"""LG-FedAvg sec. 3.2 / Table 3 (Liang et al. 2020): a new device with rotated data, online.

The original devices train (FedAvg, ``clients.fraction`` of them a round) until their mean
accuracy on their own test splits (``normal_acc``) reaches ``new_device.goal_acc`` at an
evaluation; from the next round on, the new device (``fedlight.data.rotated``: its training and
test images rotated) trains every round beside a share p (``new_device.fraction``) of the
original devices, p = 0 meaning no fine-tuning on them. Under FedAvg the new device updates the
global model; under LG-FedAvg (``method.name=lg`` with ``warmup_goal_metric: normal_acc`` and the
same goal) the same evaluation ends the FedAvg phase, so the new device learns local layers
beside the global ones. Every evaluation reports Table 3's two columns:

* ``normal_acc``: the mean over the original devices of each one's model (the global model,
  with its own local layers under LG) on its local test split (``matching_test_split``);
* ``rotated_acc``: the new device's model on its rotated test images.

The arrival round is ``new_device_round`` in the history (1-based; None before it) and kept in
checkpoints.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from lightning.fabric import Fabric

from fedlight.data.partition import matching_test_split
from fedlight.engine.loop.interfaces import ACCURACY, PluginContext, Report, RoundPlugin, State
from fedlight.engine.loop.sampling import sample_clients
from fedlight.errors import UserError
from fedlight.seeding import numpy_rng

ARRIVAL = "new_device_round"  # history column and checkpoint key


@dataclass(frozen=True)
class NewDeviceOptions:
    """The new device (``new_device.*``), with the paper's sizes (sec. 7.2).

    Attributes:
        rotation: degrees its images are turned (the paper: 90).
        train, test: its training and test images, drawn from the training and test sets.
        goal_acc: it arrives after the original devices' mean accuracy reaches this.
        fraction: p, the share of the original devices that train beside it (0: none).
    """

    rotation: float = 90.0
    train: int = 3000
    test: int = 500
    goal_acc: float = 0.975
    fraction: float = 0.0

    def __post_init__(self) -> None:
        if self.train < 1 or self.test < 1 or not (0 <= self.goal_acc <= 1 and 0 <= self.fraction <= 1):
            raise UserError(f"new_device.train={self.train} and .test={self.test} must be >= 1, .goal_acc="
                            f"{self.goal_acc} and .fraction={self.fraction} in [0, 1]; e.g. 3000, 500, 0.975, 0.1")


class NewDevice(RoundPlugin):
    """Who trains before and after the new device arrives, and Table 3's accuracies.

    Args:
        fabric: devices.
        evaluator: the run's ``Evaluator`` (worker model, original test split, ``apply``).
        originals: the original devices' ids; device: the new device's id.
        train_parts: the original devices' sample indices (their local test splits' class mix).
        train_labels: (N,) original training labels; test_x / test_y: (T, C, H, W) uint8 / (T,) the new
            device's rotated test images and labels.
        cfg: ``new_device.*``; fraction: ``clients.fraction`` (the original devices' rounds).
        seed: run seed (sampling, local test splits).
    """

    needs_clients = True
    metric_prefixes = ("normal_acc", "rotated_acc")

    def __init__(self, fabric: Fabric, evaluator: Any, originals: list[int], device: int,
                 train_parts: list[np.ndarray], train_labels: np.ndarray, test_x: torch.Tensor,
                 test_y: torch.Tensor, cfg: NewDeviceOptions, fraction: float, seed: int = 0) -> None:
        self.fabric, self.evaluator, self.originals, self.device = fabric, evaluator, originals, device
        self.cfg, self.fraction, self.seed = cfg, fraction, seed
        test_labels = evaluator.data.test_y.numpy()
        self.test_parts = [torch.as_tensor(p) for p in matching_test_split(
            train_labels, train_parts, test_labels, numpy_rng(seed, "local-test"))]  # LocalTests' splits
        self.test_x, self.test_y = test_x, test_y
        self.arrival: int | None = None  # 0-based round the new device first trains
        self.round = 0

    @classmethod
    def from_context(cls, context: PluginContext) -> NewDevice | None:
        """The new device that ``new_device.rotation`` adds (the last client), else None."""
        c = context
        if c.new_device is None:
            return None
        device = len(c.parts) - 1
        originals = [i for i in c.trainable if i != device]
        return cls(c.fabric, c.evaluator, originals, device, [c.parts[i].numpy() for i in originals],
                   c.data.train_y.numpy(), c.new_device.test_x, c.new_device.test_y, c.options.new_device,
                   c.options.round.fraction, c.seed)

    def on_round_start(self, round_: int, global_state: State) -> None:
        self.round = round_

    def arrived(self, round_: int) -> bool:
        """Whether the new device trains in (0-based) ``round_``."""
        return self.arrival is not None and round_ >= self.arrival

    def participants(self, sampled: list[int]) -> list[int]:
        """Before arrival ``clients.fraction`` of the original devices (as a run without the new device
        samples them); after it the new device and ``new_device.fraction`` of the original ones."""
        n = len(self.originals)
        if not self.arrived(self.round):
            return [self.originals[i] for i in sample_clients(self.seed, self.round, n, self.fraction)]
        fine_tune = sample_clients(self.seed, self.round, n, self.cfg.fraction) if self.cfg.fraction > 0 else []
        return sorted([self.originals[i] for i in fine_tune] + [self.device])

    def option_keys(self) -> tuple[str, ...]:
        return ("new_device",)

    @torch.no_grad()
    def evaluate(self, round_: int, clients: dict[int, State], global_state: State,
                 ledger: list[list]) -> tuple[dict[str, float | None], list[list]]:
        """Table 3's accuracies (every rank computes them: the arrival must be known everywhere)."""
        accuracies = self.accuracies(clients, global_state)
        if self.arrival is None and accuracies["normal_acc"] >= self.cfg.goal_acc:
            self.arrival = round_ + 1
        return accuracies, []

    def random_init_metrics(self, global_state: State) -> dict[str, float | None]:
        return self.accuracies({}, global_state)

    @torch.no_grad()
    def accuracies(self, clients: dict[int, State], global_state: State) -> dict[str, float]:
        """``normal_acc`` and ``rotated_acc`` of the devices' models (each device's stored local layers
        over ``global_state``). The worker model is left holding the new device's model (the global
        one before it has its own)."""
        ev = self.evaluator
        module, to_device = ev.module, self.fabric.to_device
        module.load_partial(global_state)
        test_y = to_device(ev.data.test_y)
        shared = ev.apply(module.classify, ev.data.test_x).argmax(1) == test_y  # (M,) the global model's hits
        accuracies = []
        for client, part in zip(self.originals, self.test_parts):
            private = clients.get(client) or {}
            if private:  # its own local layers over the global ones
                module.load_partial({k: to_device(v) for k, v in private.items()})
                hits = ev.apply(module.classify, ev.data.test_x[part]).argmax(1) == test_y[part.to(test_y.device)]
            else:
                hits = shared[part.to(shared.device)]
            if len(part):
                accuracies.append(float(hits.float().mean()))
        module.load_partial({k: to_device(v) for k, v in (clients.get(self.device) or {}).items()})
        rotated = ev.apply(module.classify, self.test_x).argmax(1) == to_device(self.test_y)
        return {"normal_acc": float(np.mean(accuracies)), "rotated_acc": float(rotated.float().mean())}

    def columns(self, round_: int, reports: list[Report], ledger_rows: list[list],
                history: list[dict[str, Any]]) -> dict[str, Any]:
        return {ARRIVAL: None if self.arrival is None else self.arrival + 1}

    def log_round(self, logger: Any, row: dict[str, Any]) -> dict[str, float]:
        return {f"{ACCURACY}/{k}": row[k] for k in self.metric_prefixes if row.get(k) is not None}

    def state_dict(self) -> dict[str, Any]:
        return {ARRIVAL: self.arrival}

    def load_state_dict(self, checkpoint: dict[str, Any]) -> None:
        self.arrival = checkpoint.get(ARRIVAL)
