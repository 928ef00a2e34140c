"""The Fabric loop of a streaming client (SOFed, Algorithm 1): select into the buffer, train on it.

For every arriving batch the client updates its fixed-size replay buffer with the chosen
policy (scores and features come from the current model, in eval mode and without
gradients) and then takes one training step on the buffer. Only buffer ids are kept;
the stream itself is never stored.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Literal

import torch
from lightning.fabric import Fabric

from fedlight.engine.parts.sofed.buffer import (ReplayBuffer, UpdateStats, fifo, importance, kcenter,
                                               random_replacement, reservoir)
from fedlight.data.views import ViewMaker
from fedlight.engine.loop.local_loop import LocalResult, training_step
from fedlight.engine.parts.sofed.importance_score import ScoreHead, importance_scorer
from fedlight.errors import UserError
from fedlight.methods.federated_module import FederatedModule

POLICIES = ("fifo", "reservoir", "random", "kcenter", "importance")


@dataclass(frozen=True)
class BufferOptions:
    """A streaming client's replay buffer; the defaults are SOFed's (importance-based selection,
    eq. 3, scoring every arrival with the online prediction).

    Attributes:
        size: samples the buffer holds.
        policy: how an arriving batch enters it (``fedlight.engine.parts.sofed.buffer``): fifo, reservoir
            (a uniform sample of the stream so far), random (Random Replacement), kcenter, importance.
        lazy_interval: importance re-scores the buffered samples every this many arrivals.
        score: the importance policy's online output, ``prediction`` (SOFed eq. 3) or ``projection``
            (``fedlight.engine.parts.sofed.importance_score``).
    """

    size: int = 128
    policy: Literal["fifo", "reservoir", "random", "kcenter", "importance"] = "importance"
    lazy_interval: int = 1
    score: ScoreHead = "prediction"

    def __post_init__(self) -> None:
        if self.policy not in POLICIES:
            raise UserError(f"buffer.policy={self.policy!r} is none of {', '.join(POLICIES)}; pick one of them")
        if self.size < 1 or self.lazy_interval < 1:
            raise UserError(f"buffer.size={self.size} and buffer.lazy_interval={self.lazy_interval} must be >= 1; "
                            "e.g. 128 and 1")


def update_buffer(buffer: ReplayBuffer, new_ids: torch.Tensor, cfg: BufferOptions, module: FederatedModule,
                  images: torch.Tensor, views: ViewMaker, generator: torch.Generator) -> UpdateStats:
    """Apply ``cfg.policy`` (fifo | reservoir | random | kcenter | importance) to the buffer for one
    arrival; importance scores with ``cfg.score`` and ``cfg.lazy_interval``."""
    module.eval()

    @torch.no_grad()
    def run(fn, ids: torch.Tensor) -> torch.Tensor:
        return fn(views.normalize(images[ids.to(images.device)])).float().cpu()

    if cfg.policy == "fifo":
        return fifo(buffer, new_ids)
    if cfg.policy == "reservoir":
        return reservoir(buffer, new_ids, generator)
    if cfg.policy == "random":
        return random_replacement(buffer, new_ids, generator)
    if cfg.policy == "kcenter":
        return kcenter(buffer, new_ids, lambda ids: run(module.features, ids))
    return importance(buffer, new_ids, lambda ids: run(importance_scorer(module, cfg.score), ids),
                      cfg.lazy_interval)


def train_client_stream(fabric: Fabric, module: FederatedModule, images: torch.Tensor, labels: torch.Tensor,
                        arrivals: list[torch.Tensor], buffer: ReplayBuffer, cfg: BufferOptions,
                        views: ViewMaker, generator: torch.Generator) -> tuple[LocalResult, UpdateStats]:
    """One round of a streaming client.

    Args:
        images, labels: the federation's uint8 images (N, C, H, W) and labels on the device.
        arrivals: the round's batches of stream ids (CPU int64), in arrival order.
        buffer: the client's replay buffer (updated in place).
        cfg: the buffer's policy, lazy interval and score.
        generator: seeded by (seed, round, client).
    Returns:
        the local result and the summed buffer statistics of the round.
    """
    optimizer = fabric.setup_optimizers(module.configure_optimizers())
    module.on_train_start()
    totals = UpdateStats(0, 0, 0, 0)
    loss_sum = torch.zeros((), device=fabric.device)
    steps = 0
    for new_ids in arrivals:
        start = time.perf_counter()  # host time of selection (scores come back to the CPU, so it is synchronous)
        stats = update_buffer(buffer, new_ids, cfg, module, images, views, generator)
        stats.batches, stats.seconds = 1, time.perf_counter() - start
        totals = UpdateStats(*(a + b for a, b in zip(vars(totals).values(), vars(stats).values())))
        if len(buffer.ids) < 2:
            continue
        module.train()
        loss_sum += training_step(fabric, module, optimizer, images, labels, buffer.ids.to(images.device),
                                  views, generator, steps)
        steps += 1
    module.on_train_end()
    return LocalResult(float(loss_sum), steps), totals
