"""The Fabric loop of a client on CF-CL's schedule: a fixed number of SGD iterations, not epochs.

Each iteration draws one mini-batch from the device's local set *at that iteration* (its own
data plus whatever it pulled last; the set may change between iterations), and the client's
aggregation weight is the mean size of that set over the period (CF-CL eq. 5).
"""

from __future__ import annotations

from typing import Callable

import torch
from lightning.fabric import Fabric

from fedlight.data.views import ViewMaker
from fedlight.engine.loop.local_loop import LocalResult, training_step
from fedlight.methods.federated_module import FederatedModule


def train_client_iterations(fabric: Fabric, module: FederatedModule, images: torch.Tensor, labels: torch.Tensor,
                            local_set: Callable[[int], torch.Tensor], steps: int, batch_size: int, views: ViewMaker,
                            generator: torch.Generator) -> tuple[LocalResult, float]:
    """``steps`` optimizer steps of one client.

    Args:
        images: (N, C, H, W) uint8 images of the federation on the device.
        labels: (N,) what training batches carry as labels (a label-free objective gets a
            placeholder).
        local_set: step s of the period -> (n_s,) int64 image indices (CPU) of the device's
            training set at that step; called once per step, before the step (it may pull).
        steps: Ta, iterations in the period.
        batch_size: mini-batch size (capped by the set size).
        generator: seeded by (seed, round, client): batches and augmentation.
    Returns:
        the local result and the mean local set size over the period.
    """
    optimizer = fabric.setup_optimizers(module.configure_optimizers())
    module.train()  # pulls only pick ids; the plans that embed with the model in eval mode come before
    module.on_train_start()
    loss_sum = torch.zeros((), device=fabric.device)
    size_sum = 0
    for step in range(steps):
        ids = local_set(step)
        size_sum += len(ids)
        pick = torch.randperm(len(ids), generator=generator)[:batch_size]
        loss_sum += training_step(fabric, module, optimizer, images, labels, ids[pick].to(images.device),
                                  views, generator, step)
    module.on_train_end()
    return LocalResult(float(loss_sum), steps), size_sum / max(steps, 1)
