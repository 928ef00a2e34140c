"""CF-CL inside the engine: device graph, push before training, pulls within each client's period.

A round is one aggregation period of ``server.aggregate_every`` (Ta) SGD iterations; global
iteration t = round * Ta + step. Before a step with t % Tp == 0 (``exchange.pull_every``) the
device pulls from its neighbours, so with Tp dividing Ta every period opens with a pull.
Pull plans (eq. 7-10) use the global model of the period, computed before any client trains.
The device's pulled set is kept in the client store (``exchange.pulled``) so a resumed run
continues exactly. Nothing here reads a label: the objective must be label-free (asserted)
and training batches carry a placeholder.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import torch
from lightning.fabric import Fabric

from fedlight.config.schema import Recipe
from fedlight.data.views import ViewMaker
from fedlight.engine.iteration_loop import train_client_iterations
from fedlight.engine.local_loop import LocalResult
from fedlight.errors import UserError
from fedlight.exchange.exchange import Exchange
from fedlight.exchange.graph import build_graph
from fedlight.methods.base import FederatedModule
from fedlight.seeding import numpy_rng

State = dict[str, torch.Tensor]
EXCHANGE = "exchange."  # store keys of a device's exchange state


def validate_exchange(recipe: Recipe, aggregate_every: int | None) -> None:
    """Raise a UserError if ``exchange.*`` does not fit the rest of the recipe."""
    policy = recipe.exchange.policy
    if policy != "none" and aggregate_every is None:
        raise UserError(f"exchange.policy={policy} needs server.aggregate_every (CF-CL's Ta, e.g. 50); "
                        "set it, or set exchange.policy=none")
    if policy == "smart" and recipe.method.get("name") != "triplet":
        raise UserError("exchange.policy=smart scores points with the triplet loss; set method.name=triplet")
    if aggregate_every is not None and recipe.stream.velocity is not None:
        raise UserError("server.aggregate_every and stream.velocity are two different schedules; drop one")
    n, degree = recipe.clients.num, recipe.exchange.avg_degree
    if policy != "none" and n < 2:
        raise UserError(f"exchange.policy={policy} needs at least 2 devices; raise clients.num")
    graph_built = aggregate_every is not None and n >= 2 and recipe.exchange.graph == "rgg"
    if graph_built and not n - 1 <= round(n * degree / 2) <= n * (n - 1) // 2:
        raise UserError(f"exchange.avg_degree={degree} cannot make a connected graph on {n} devices; "
                        f"use a value in [{2 * (n - 1) / n:g}, {n - 1}]")


class ExchangeRounds:
    """The CF-CL devices of one process.

    Args:
        fabric: devices.
        recipe: the resolved recipe (``exchange.*``, ``rounds``, ``local.batch_size``, seed).
        module: the worker model (label-free, with a ``margin`` when the policy is smart).
        images: (N, C, H, W) uint8 images of the federation on the device.
        parts: every device's own image indices.
        views: augmentation (the pull embeds augmented views of the reserve, eq. 10).
        aggregate_every: Ta.
        devices: the devices this process trains.
    """

    def __init__(self, fabric: Fabric, recipe: Recipe, module: FederatedModule, images: torch.Tensor,
                 parts: list[torch.Tensor], views: ViewMaker, aggregate_every: int, devices: list[int]) -> None:
        assert not module.uses_labels, "CF-CL's devices train and exchange without labels"
        cfg = recipe.exchange
        self.fabric, self.module, self.images, self.views = fabric, module, images, views
        self.cfg, self.seed, self.batch_size = cfg, recipe.seed, recipe.local.batch_size
        self.aggregate_every, self.total = aggregate_every, recipe.rounds * aggregate_every
        kind = cfg.graph if len(parts) > 1 else "complete"  # pooled data (centralized): one device, no links
        self.adjacency, self.positions = build_graph(kind, len(parts), cfg.avg_degree, numpy_rng(recipe.seed, "graph"))
        self.exchange = Exchange([p.numpy() for p in parts], self.adjacency, cfg.policy, cfg.reserve, cfg.approx,
                                 cfg.clusters, cfg.pull_size, recipe.seed, cfg.kmeans_iters)
        start = time.perf_counter()
        self.exchange.push(images.cpu(), devices)
        self.push_seconds = (time.perf_counter() - start) / max(len(devices), 1)
        self.plan_seconds: dict[int, float] = {}
        self.placeholder = torch.full((len(images),), -1, dtype=torch.long, device=images.device)
        self.pixels = int(np.prod(images.shape[1:]))  # bytes of one uint8 image: 8 bits per pixel

    @torch.no_grad()
    def _embed(self, ids: np.ndarray, generator: torch.Generator | None = None) -> torch.Tensor:
        """Global-model embeddings (n, d) of images ``ids``, of augmented views if a generator is given."""
        x = self.images[torch.as_tensor(ids).to(self.images.device)]
        x = self.views.normalize(x) if generator is None else self.views.view(x, 0, generator)
        with self.fabric.autocast():
            return self.module.embed(x).float()

    def begin_round(self, round_: int, global_state: State, receivers: list[int]) -> None:
        """Plan every pull of the period for ``receivers`` with the global model (Algorithm 2, lines 2-7)."""
        self.plan_seconds = {}
        if self.cfg.policy != "smart":
            return
        self.module.load_partial(global_state)
        self.module.eval()
        for i in receivers:
            start = time.perf_counter()
            self.exchange.plan([i], round_, self._embed,
                               lambda ids, seed: self._embed(ids, torch.Generator().manual_seed(seed)),
                               float(self.module.margin))
            self.plan_seconds[i] = time.perf_counter() - start

    def train(self, client: int, round_: int, generator: torch.Generator,
              private: State) -> tuple[LocalResult, float, dict[str, Any]]:
        """One period of ``client``: pull when due, one SGD step per iteration.

        Returns the local result, the weight of eq. 5 (mean local set size) and extras: the
        pulled sets at each pull (for measurement), D2D bytes received, exchange compute
        seconds and the state to store.
        """
        ex, tp = self.exchange, self.cfg.pull_every
        if EXCHANGE + "pulled" in private:
            ex.pulled[client] = private[EXCHANGE + "pulled"].numpy()
        sets: list[np.ndarray] = []
        received = self.pixels * ex.pushed_to(client) if round_ == 0 else 0
        seconds = self.plan_seconds.get(client, 0.0) + (self.push_seconds if round_ == 0 else 0.0)
        current = torch.as_tensor(ex.local_set(client))

        def local_set(step: int) -> torch.Tensor:
            nonlocal received, seconds, current
            t = round_ * self.aggregate_every + step
            if t % tp == 0 and self.cfg.policy != "none":
                start = time.perf_counter()
                received += self.pixels * sum(len(s) for s in ex.pull(client, t, self.total))
                seconds += time.perf_counter() - start
                current = torch.as_tensor(ex.local_set(client))
                sets.append(current.numpy())
            return current

        result, weight = train_client_iterations(self.fabric, self.module, self.images, self.placeholder, local_set,
                                                 self.aggregate_every, self.batch_size, self.views, generator)
        if not sets:  # no pull this period: measure the set it trained on
            sets.append(current.numpy())
        return result, weight, {"sets": sets, "d2d_bytes": received, "exchange_seconds": seconds,
                                "buffer_state": {EXCHANGE + "pulled": torch.as_tensor(ex.pulled[client])}}
