"""FLESD's server side (Shi et al., 2022): clients send public-set similarities; the server distils.

The aggregator (``fedlight.server.flesd.FLESD``, pure tensor math) ensembles the clients'
messages; this part gives it what needs Fabric: each client's message, made from the
embeddings of the public images (the public client's, never trained on) by the model the
client just trained, and the ensemble similarity distillation of the global model
(``fedlight.engine.parts.flesd.ensemble_distiller.EnsembleDistiller``) that the aggregator calls in ``finalize``.
Shows the optimizer steps of each round's distillation (``esd_steps``).
"""

from __future__ import annotations

from typing import Any, Callable

import torch
from lightning.fabric import Fabric

from fedlight.data.views import ViewMaker
from fedlight.engine.loop.interfaces import PluginContext, Report, RoundPlugin, State
from fedlight.engine.parts.flesd.ensemble_distiller import EnsembleDistiller
from fedlight.methods.federated_module import FederatedModule
from fedlight.server.aggregator import Aggregator

Apply = Callable[[Callable[[torch.Tensor], torch.Tensor], torch.Tensor], torch.Tensor]


class PublicSetDistillation(RoundPlugin):
    """Binds an ``EnsembleDistiller`` to a public-set aggregator and makes the clients' messages.

    Args:
        fabric: devices and collectives.
        module: the worker model (it holds the global model when the aggregator distils).
        public_images: (P, C, H, W) uint8 public images on the device.
        views: the local training's augmentation (FLESD reuses it for ESD).
        aggregator: the server (``uses_public_set``): ``client_message`` and ``bind_distiller``.
        apply: ``apply(fn, images)``: ``fn`` over uint8 images in eval mode, in chunks
            (``Evaluator.apply``).
        seed: run seed (ESD's order and views).
    """

    def __init__(self, fabric: Fabric, module: FederatedModule, public_images: torch.Tensor, views: ViewMaker,
                 aggregator: Aggregator, apply: Apply, seed: int = 0) -> None:
        self.public_images, self.aggregator, self.apply = public_images, aggregator, apply
        self.distiller = EnsembleDistiller(fabric, module, public_images, views, seed)
        aggregator.bind_distiller(self.distiller)

    @classmethod
    def from_context(cls, context: PluginContext) -> PublicSetDistillation | None:
        """FLESD's distillation where the server uses a public set, else None: on the public client's images,
        never trained on, or on those ``partition.public_balanced`` draws in their place."""
        c = context
        if not c.aggregator.uses_public_set:
            return None
        public = (c.images[c.parts[c.public_client].to(c.images.device)] if c.data.public_x is None
                  else c.fabric.to_device(c.data.public_x))
        return cls(c.fabric, c.module, public, c.views, c.aggregator, c.evaluator.apply, c.seed)

    def on_round_start(self, round_: int, global_state: State) -> None:
        self.distiller.round, self.distiller.steps = round_, 0  # the round's ESD (if any client answers)

    def client_payload(self, module: FederatedModule) -> State:
        """The message about the (P, d) public embeddings of the model the client trained."""
        return self.aggregator.client_message(self.apply(module.embed, self.public_images))

    def columns(self, round_: int, reports: list[Report], ledger_rows: list[list],
                history: list[dict[str, Any]]) -> dict[str, Any]:
        return {"esd_steps": self.distiller.steps}

    def log_round(self, logger: Any, row: dict[str, Any]) -> dict[str, float]:
        return {"server/esd_steps": row["esd_steps"]}

    def option_keys(self) -> tuple[str, ...]:
        return ("partition.public_client", "partition.public_balanced")
