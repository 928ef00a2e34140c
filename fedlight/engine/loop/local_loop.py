"""The Fabric loop that trains one client: the only place a LightningModule is stepped."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import torch
from lightning.fabric import Fabric

from fedlight.data.views import ViewMaker
from fedlight.engine.loop.compiled_step import step_function
from fedlight.engine.output.progress import step_done
from fedlight.methods.federated_module import FederatedModule


@dataclass
class LocalResult:
    """What a client's local training reports: summed loss over ``steps`` optimizer steps."""

    loss_sum: float
    steps: int

    @property
    def mean_loss(self) -> float:
        return self.loss_sum / max(self.steps, 1)


def train_client(fabric: Fabric, module: FederatedModule, images: torch.Tensor, labels: torch.Tensor,
                 indices: torch.Tensor, views: ViewMaker, epochs: int, batch_size: int,
                 generator: torch.Generator, max_steps: int | None = None) -> LocalResult:
    """Run ``epochs`` of local training on one client's data.

    Args:
        fabric: devices, precision and backward.
        module: the worker model, already holding this client's starting state.
        images: (N, C, H, W) uint8 training images of the whole federation on ``fabric.device``.
        labels: (N,) int64 labels on the device (only supervised objectives read them).
        indices: (n,) int64 indices (on the device) of this client's samples.
        views: makes the augmented views in batches.
        epochs: local epochs E.
        batch_size: local batch size B; a trailing batch of one sample is skipped
            (BatchNorm and contrastive losses need two).
        generator: seeded by (seed, round, client): shuffling and augmentation.
        max_steps: stop after this many optimizer steps (a straggler); None: all of them.
    """
    optimizer = fabric.setup_optimizers(module.configure_optimizers())
    module.train()
    module.on_train_start()
    loss_sum = torch.zeros((), device=fabric.device)
    steps = 0
    for idx in client_batches(indices, epochs, batch_size, generator, max_steps):
        loss_sum += training_step(fabric, module, optimizer, images, labels, idx, views, generator, steps)
        steps += 1
    module.on_train_end()
    return LocalResult(float(loss_sum), steps)


def client_batches(indices: torch.Tensor, epochs: int, batch_size: int, generator: torch.Generator,
                   max_steps: int | None = None) -> Iterator[torch.Tensor]:
    """The sample indices of a client's local steps, in order: each epoch shuffles ``indices`` with
    ``generator`` as it starts (so the views of the steps before it come first from the same generator),
    then cuts it into batches of ``batch_size``, skipping a trailing batch of one; at most ``max_steps``
    batches in all (None: every one).
    """
    n, steps = len(indices), 0
    for _ in range(epochs):
        if steps == max_steps:
            return
        order = indices[torch.randperm(n, generator=generator).to(indices.device)]
        for start in range(0, n, batch_size):
            idx = order[start:start + batch_size]
            if len(idx) < 2:
                continue
            if steps == max_steps:
                return
            yield idx
            steps += 1


def training_step(fabric: Fabric, module: FederatedModule, optimizer: torch.optim.Optimizer, images: torch.Tensor,
                  labels: torch.Tensor, idx: torch.Tensor, views: ViewMaker, generator: torch.Generator,
                  step: int) -> torch.Tensor:
    """One optimizer step on samples ``idx`` with Lightning's hook order; returns the detached loss."""
    batch = (views.views(images[idx], module.num_views, generator), labels[idx])
    with fabric.autocast():
        loss = step_function(module)(batch, step)
    optimizer.zero_grad(set_to_none=True)
    fabric.backward(loss)
    module.on_before_optimizer_step(optimizer)
    optimizer.step()
    module.on_train_batch_end(loss, batch, step)
    step_done()
    return loss.detach()


def steps_per_epoch(n: int, batch_size: int) -> int:
    """Optimizer steps of one epoch over ``n`` samples (a trailing batch of one is skipped)."""
    return n // batch_size + (1 if n % batch_size >= 2 else 0)
