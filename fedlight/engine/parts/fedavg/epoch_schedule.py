"""The default client schedule: ``local.epochs`` epochs over the client's own data (FedAvg)."""

from __future__ import annotations

from typing import Callable

import torch
from lightning.fabric import Fabric

from fedlight.data.views import ViewMaker
from fedlight.engine.loop.batched_clients import ClientPlan, train_clients
from fedlight.engine.loop.client_faults import steps_done
from fedlight.engine.loop.interfaces import ClientSchedule, ClientWork, ScheduleContext, State
from fedlight.engine.loop.local_loop import steps_per_epoch, train_client
from fedlight.methods.federated_module import FederatedModule


class EpochSchedule(ClientSchedule):
    """E epochs of minibatch SGD on the client's samples; its weight is its sample count.

    Args:
        fabric: devices and precision.
        images: (N, C, H, W) uint8 images of the federation on the device.
        labels: (N,) labels (or (N, 2) class and protected attribute) on the device.
        parts: every client's sample indices into ``images``.
        views: batched augmentation.
        epochs: ``local.epochs``.
        batch_size: ``local.batch_size``.
    """

    batch_refusal = None

    def __init__(self, fabric: Fabric, images: torch.Tensor, labels: torch.Tensor, parts: list[torch.Tensor],
                 views: ViewMaker, epochs: int = 1, batch_size: int = 128) -> None:
        self.fabric, self.images, self.labels, self.parts, self.views = fabric, images, labels, parts, views
        self.epochs, self.batch_size = epochs, batch_size

    @classmethod
    def from_context(cls, context: ScheduleContext) -> EpochSchedule:
        """``local.schedule=epochs``: ``local.epochs`` passes of ``local.batch_size``."""
        c = context
        return cls(c.fabric, c.images, c.labels, c.parts, c.views, c.epochs, c.batch_size)

    def planned_steps(self, client: int) -> int:
        return self.epochs * steps_per_epoch(len(self.parts[client]), self.batch_size)

    def train(self, module: FederatedModule, client: int, round_: int, generator: torch.Generator,
              private: State, work: float) -> ClientWork:
        n = len(self.parts[client])
        max_steps = steps_done(self.planned_steps(client), work)
        result = train_client(self.fabric, module, self.images, self.labels, self.parts[client].to(self.images.device),
                              self.views, self.epochs, self.batch_size, generator, max_steps=max_steps)
        return ClientWork(result, float(n))

    def train_together(self, module: FederatedModule, clients: list[int], round_: int,
                       generators: list[torch.Generator], works: list[float],
                       start: Callable[[int], None]) -> list[tuple[ClientWork, State]]:
        plans = [ClientPlan(self.parts[c].to(self.images.device), g, steps_done(self.planned_steps(c), w))
                 for c, g, w in zip(clients, generators, works)]
        trained = train_clients(self.fabric, module, lambda slot: start(clients[slot]), plans, self.images,
                                self.labels, self.views, self.epochs, self.batch_size)
        return [(ClientWork(t.result, float(len(self.parts[c]))), t.tensors) for c, t in zip(clients, trained)]

    def option_keys(self) -> tuple[str, ...]:
        return ("local.epochs",)
