"""Server-side training for FLESD: ensemble similarity distillation on the public set, via Fabric.

The student is the global model (its ``embed``: unit-length projections); the key encoder
is its momentum copy, updated before the keys of each batch are computed; keys and their
public indices go through a FIFO queue, re-started every epoch, whose first
``queue_size // batch_size`` iterations only fill it (``esd_steps_per_epoch`` counts the steps
an epoch takes; ``FLESD.check_public_set`` refuses a setting that takes none before the run
starts). A batch too small for BatchNorm (a trailing batch of one image, or with several ranks
fewer than two rows a rank) is skipped, as local training skips it. With several ranks the
work is data-parallel: every rank computes the (cheap, gradient-free) keys of the whole batch,
so the queues agree without communication, the student's rows are split over ranks, and
gradients are summed with one all-reduce per step.
"""

from __future__ import annotations

import copy

import torch
from lightly.models.utils import deactivate_requires_grad, update_momentum
from lightning.fabric import Fabric

from fedlight.data.views import ViewMaker
from fedlight.engine.parts.flesd.esd import KeyQueue, distillation_loss, target_distribution
from fedlight.methods.federated_module import FederatedModule
from fedlight.seeding import torch_generator
from fedlight.server.flesd import usable_batch

State = dict[str, torch.Tensor]


class EnsembleDistiller:
    """Callable bound to a FLESD aggregator: ``distiller(ensemble, **hyper) -> new global state``.

    Args:
        fabric: devices and collectives.
        module: the worker model; it holds the global model when called.
        public_images: (N, C, H, W) uint8 public images on the device.
        views: the augmentation used in local training (FLESD reuses it for ESD).
        seed: run seed; ``round`` must be set before each call.

    Attributes:
        steps: optimizer steps the last call took (the round's ``esd_steps``).
    """

    def __init__(self, fabric: Fabric, module: FederatedModule, public_images: torch.Tensor,
                 views: ViewMaker, seed: int) -> None:
        self.fabric, self.module, self.public, self.views, self.seed = fabric, module, public_images, views, seed
        self.round = 0
        self.steps = 0

    def _sum_gradients(self, params: list[torch.nn.Parameter]) -> None:
        if self.fabric.world_size == 1:
            return
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
        flat = self.fabric.all_reduce(torch.cat([g.reshape(-1) for g in grads]), reduce_op="sum")
        offset = 0
        for p, g in zip(params, grads):
            p.grad = flat[offset:offset + g.numel()].view_as(g)
            offset += g.numel()

    def __call__(self, ensemble: torch.Tensor, *, tau_s: float, momentum: float, queue_size: int, epochs: int,
                 batch_size: int, lr: float, weight_decay: float) -> State:
        module, fabric = self.module, self.fabric
        rank, world = fabric.global_rank, fabric.world_size
        g = torch_generator(self.seed, "esd", self.round)
        keys_encoder = copy.deepcopy(module)
        deactivate_requires_grad(keys_encoder)
        shared = set(module.shared_state())
        params = [p for n, p in module.named_parameters() if p.requires_grad and n in shared]
        optimizer = fabric.setup_optimizers(torch.optim.Adam(params, lr=lr, weight_decay=weight_decay))
        module.train()
        keys_encoder.train()
        n = len(self.public)
        queue_len = min(queue_size, n)  # an epoch pushes each public image once: a longer queue never fills
        skip = queue_size // batch_size  # FLESD: the first Q / B iterations of an epoch only fill the queue
        self.steps = 0
        for _ in range(epochs):
            order = torch.randperm(n, generator=g).to(self.public.device)
            queue = None
            for it, start in enumerate(range(0, n, batch_size)):
                idx = order[start:start + batch_size]
                if not usable_batch(len(idx), world):  # only the trailing batch can be this small
                    continue
                x_query, x_key = self.views.views(self.public[idx], 2, g)
                update_momentum(module, keys_encoder, momentum)
                with torch.no_grad(), fabric.autocast():
                    keys = keys_encoder.embed(x_key).float()
                if queue is None:
                    queue = KeyQueue(queue_len, keys.shape[1], keys.device)
                queue.push(keys, idx)
                if it < skip:
                    continue
                anchors, anchor_idx = queue.contents()
                mine = torch.arange(rank, len(idx), world, device=idx.device)
                with fabric.autocast():
                    queries = module.embed(x_query[mine]).float()
                target = target_distribution(ensemble, idx[mine], anchor_idx)
                loss = distillation_loss(queries, anchors, target, tau_s) * len(mine) / len(idx)
                optimizer.zero_grad(set_to_none=True)
                fabric.backward(loss)
                self._sum_gradients(params)
                optimizer.step()
                self.steps += 1
        state = {k: v.detach().clone() for k, v in module.shared_state().items()}
        if world > 1:  # parameters agree already; BatchNorm statistics saw different rows
            for k, v in state.items():
                if v.is_floating_point():
                    state[k] = fabric.all_reduce(v, reduce_op="mean")
        return state
