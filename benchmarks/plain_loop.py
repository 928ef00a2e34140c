"""The shortest hand-written PyTorch loop that does fedlight's local arithmetic.

Shared by the benchmarks that compare fedlight with something else (``engine_overhead.py``:
the floor; ``flower_app.py``: Flower's simulation): the same model built from the same seed,
the same views drawn from the same seeded generators, the same batches and optimizer steps,
so any difference in time is the engine's, not the work's.
"""

from __future__ import annotations

import torch

from fedlight.config.schema import Recipe
from fedlight.data.views import ViewMaker
from fedlight.methods.federated_module import FederatedModule
from fedlight.seeding import torch_generator

State = dict[str, torch.Tensor]


def shared_state(model: FederatedModule) -> State:
    """The tensors a client sends (what FedAvg averages): the method's declared shared state."""
    keys = set(model.shared_state())
    return {k: t.detach().clone() for k, t in model.state_dict().items() if k in keys}


def local_train(model: FederatedModule, views: ViewMaker, images: torch.Tensor, labels: torch.Tensor,
                idx: torch.Tensor, recipe: Recipe, round_: int, client: int) -> int:
    """``recipe.local.epochs`` epochs on the client's samples ``idx`` (N,); returns N (the FedAvg weight).

    ``images`` (n, C, H, W) uint8 and ``labels`` (n,) are the whole training split; the batch order
    and the views come from the generator seeded by (seed, "local", round, client), as in fedlight.
    """
    opt = model.configure_optimizers()
    model.train()
    g = torch_generator(recipe.seed, "local", round_, client)
    bs = recipe.local.batch_size
    for _ in range(recipe.local.epochs):
        order = idx[torch.randperm(len(idx), generator=g)]
        for s in range(0, len(order), bs):
            b = order[s:s + bs]
            if len(b) < 2:  # one sample gives no contrastive pair (fedlight skips it too)
                continue
            loss = model.training_step((views.views(images[b], model.num_views, g), labels[b]), 0)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
    return len(idx)
