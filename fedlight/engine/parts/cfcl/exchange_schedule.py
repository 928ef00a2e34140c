"""CF-CL's client schedule (Wagle et al. 2022): D2D iteration periods with pushes and pulls.

A round is one aggregation period of Ta SGD iterations (``local.iterations``); global
iteration t = round * Ta + step. Before a step with t % Tp == 0 (``exchange.pull_every``) the
device pulls from its neighbours, so with Tp dividing Ta every period opens with a pull.
Pull plans (eq. 7-10) use the global model of the period, computed before any client trains;
with ``exchange.importance_model=local`` (Fig. 3(e)) a pull inside the period is planned again
with the receiver's latest local model, which it sends to each neighbour first (ledger: ``d2d``
rows of the model's dtype, the size of its upload, once per neighbour and such pull).
The device's pulled set is kept in the client store (``exchange.pulled``) so a resumed run
continues exactly. Nothing here reads a label for training: the objective must be label-free
(refused otherwise) and training batches carry a placeholder; labels only measure the variance of the
devices' training sets (Fig. 3c). Writes ``graph.json`` and the device graph's picture.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from lightning.fabric import Fabric

from fedlight.atomic_files import atomic_write_json
from fedlight.data.partition import class_counts
from fedlight.data.views import ViewMaker
from fedlight.engine.loop.comm_ledger import payload_bytes
from fedlight.engine.loop.interfaces import ClientSchedule, ClientWork, Report, ScheduleContext, State
from fedlight.engine.parts.cfcl.iteration_loop import train_client_iterations
from fedlight.errors import UserError
from fedlight.engine.parts.cfcl.delay import period_delay
from fedlight.engine.parts.cfcl.exchange import Exchange
from fedlight.engine.parts.cfcl.graph import build_graph, graph_figure
from fedlight.methods.federated_module import FederatedModule
from fedlight.optional import require_sklearn
from fedlight.seeding import numpy_rng

EXCHANGE = "exchange."  # store keys of a device's exchange state


@dataclass(frozen=True)
class ExchangeOptions:
    """CF-CL's device-to-device exchange, off by default (``policy=none``); the sizes default to
    the paper's (Wagle et al. 2022): average degree 3, K_reserve 500, K_approx 1000, Tp 10.

    Attributes:
        policy: ``smart`` (the paper's pulls, eq. 7-10), ``uniform`` (random points) or ``none``.
        graph: the device graph: ``rgg`` (random geometric), ``ring`` or ``complete``.
        avg_degree: the random geometric graph's mean degree.
        reserve: K_reserve, points a device pushes to each neighbour.
        approx: K_approx, a transmitter's candidates per aggregation period.
        clusters: K-means++ clusters of a pull.
        pull_size: n, points each neighbour sends per pull.
        pull_every: Tp, SGD iterations between pulls.
        kmeans_iters: Lloyd iterations of the push's K-means.
        importance_model: whose model scores a smart pull's points: the latest ``global`` one (the
            paper's default) or each receiver's latest ``local`` one (Fig. 3(e)), sent to its
            neighbours at every pull after a period's first step.
    """

    policy: Literal["none", "smart", "uniform"] = "none"
    graph: Literal["rgg", "ring", "complete"] = "rgg"
    avg_degree: float = 3.0
    reserve: int = 500
    approx: int = 1000
    clusters: int = 4
    pull_size: int = 100
    pull_every: int = 10
    kmeans_iters: int = 100
    importance_model: Literal["global", "local"] = "global"

    def __post_init__(self) -> None:
        counts = {k: getattr(self, k) for k in ("reserve", "approx", "clusters", "pull_size", "pull_every", "kmeans_iters")}
        low = [f"exchange.{k}={v}" for k, v in counts.items() if v < 1]
        if low or self.avg_degree <= 0:
            raise UserError(f"{', '.join(low) or f'exchange.avg_degree={self.avg_degree}'} must be > 0; "
                            "e.g. the paper's reserve 500, approx 1000, clusters 4, pull_every 10, avg_degree 3")

    def check(self, devices: int, method: str | None) -> None:
        """Raise a UserError if these options cannot run on ``devices`` devices training ``method``."""
        if self.importance_model == "local" and self.policy != "smart":
            raise UserError(f"exchange.importance_model=local scores the smart pull; exchange.policy={self.policy} "
                            "scores nothing: set exchange.policy=smart or drop exchange.importance_model")
        if self.policy == "smart" and method != "triplet":
            raise UserError("exchange.policy=smart scores points with the triplet loss; set method.name=triplet")
        if self.policy == "smart":
            require_sklearn("exchange.policy=smart (CF-CL's K-means push and pull)")
        n, degree = devices, self.avg_degree
        if self.policy != "none" and n < 2:
            raise UserError(f"exchange.policy={self.policy} needs at least 2 devices; raise clients.num")
        if n >= 2 and self.graph == "rgg" and not n - 1 <= round(n * degree / 2) <= n * (n - 1) // 2:
            raise UserError(f"exchange.avg_degree={degree} cannot make a connected graph on {n} devices; "
                            f"use a value in [{2 * (n - 1) / n:g}, {n - 1}]")


def check_label_free(module: FederatedModule) -> None:
    """Raise a UserError for a method that reads labels: CF-CL's devices train and exchange without them."""
    if module.uses_labels:
        raise UserError(f"local.schedule=exchange: CF-CL's devices train and exchange without labels, and "
                        f"{type(module).__name__} reads them; set method.name (method.objective, for a wrapper) to a "
                        "self-supervised method (triplet)")


class ExchangeSchedule(ClientSchedule):
    """CF-CL's rounds: Ta SGD iterations a device, pulling from its neighbours every Tp.

    Holds the devices of one process.

    Args:
        fabric: devices.
        module: the worker model (label-free, with a ``margin`` when the policy is smart).
        images: (N, C, H, W) uint8 images of the federation on the device.
        train_labels: (N,) labels on the CPU: measurement only (Fig. 3c).
        parts: every device's own image indices.
        views: augmentation (the pull embeds augmented views of the reserve, eq. 10).
        devices: the devices this process trains.
        cfg: the exchange's policy, graph and sizes.
        aggregate_every: Ta, SGD iterations a round.
        rounds: the run's rounds (the pull schedule's horizon).
        batch_size: ``local.batch_size``.
        num_classes: C.
        seed: run seed (graph, push, pulls).
    """

    keeps_clients = True
    state_prefix = EXCHANGE
    side_by_side = False  # the devices share one model's embeddings of the exchange
    batch_refusal = "its devices pull one another's data between iterations (the device-to-device exchange)"

    def __init__(self, fabric: Fabric, module: FederatedModule, images: torch.Tensor, train_labels: np.ndarray,
                 parts: list[torch.Tensor], views: ViewMaker, devices: list[int], cfg: ExchangeOptions,
                 aggregate_every: int, rounds: int, batch_size: int, num_classes: int = 10, seed: int = 0) -> None:
        check_label_free(module)
        self.fabric, self.module, self.images, self.views = fabric, module, images, views
        self.train_labels, self.num_classes = train_labels, num_classes
        self.cfg, self.seed, self.batch_size = cfg, seed, batch_size
        self.aggregate_every, self.total = aggregate_every, rounds * aggregate_every
        kind = cfg.graph if len(parts) > 1 else "complete"  # pooled data (centralized): one device, no links
        self.adjacency, self.positions = build_graph(kind, len(parts), cfg.avg_degree, numpy_rng(seed, "graph"))
        self.exchange = Exchange([p.numpy() for p in parts], self.adjacency, cfg.policy, cfg.reserve, cfg.approx,
                                 cfg.clusters, cfg.pull_size, seed, cfg.kmeans_iters)
        start = time.perf_counter()
        self.exchange.push(images.cpu(), devices)
        self.push_seconds = (time.perf_counter() - start) / max(len(devices), 1)
        self.plan_seconds: dict[int, float] = {}
        self.placeholder = torch.full((len(images),), -1, dtype=torch.long, device=images.device)
        self.pixels = int(np.prod(images.shape[1:]))  # bytes of one uint8 image: 8 bits per pixel

    @classmethod
    def from_context(cls, context: ScheduleContext) -> ExchangeSchedule:
        """``local.schedule=exchange``: rounds of ``local.iterations`` SGD iterations (Ta) with the exchange of
        ``context.options.exchange``, for this process's devices."""
        c = context
        return cls(c.fabric, c.module, c.images, c.train_labels, c.parts, c.views, c.clients, c.options.exchange,
                   c.iterations, c.rounds, c.batch_size, c.num_classes, c.seed)

    @torch.no_grad()
    def _embed(self, ids: np.ndarray, generator: torch.Generator | None = None,
               module: FederatedModule | None = None) -> torch.Tensor:
        """Embeddings (n, d) of images ``ids`` by ``module`` (default: the worker model, holding the
        global model), of augmented views if a generator is given."""
        x = self.images[torch.as_tensor(ids).to(self.images.device)]
        x = self.views.normalize(x) if generator is None else self.views.view(x, 0, generator)
        with self.fabric.autocast():
            return (module or self.module).embed(x).float()

    def _plan(self, receiver: int, round_: int, module: FederatedModule, fresh: bool = False) -> None:
        """Plan ``receiver``'s pulls with ``module`` as it is now (eval mode while it embeds)."""
        training = module.training
        module.eval()
        self.exchange.plan([receiver], round_, lambda ids: self._embed(ids, None, module),
                           lambda ids, seed: self._embed(ids, torch.Generator().manual_seed(seed), module),
                           float(module.margin), fresh=fresh)
        module.train(training)

    def begin_round(self, round_: int, global_state: State, receivers: list[int]) -> None:
        """Plan every pull of the period for ``receivers`` with the global model (Algorithm 2, lines 2-7)."""
        self.plan_seconds = {}
        if self.cfg.policy != "smart":
            return
        self.module.load_partial(global_state)
        for i in receivers:
            start = time.perf_counter()
            self._plan(i, round_, self.module)
            self.plan_seconds[i] = time.perf_counter() - start

    def train(self, module: FederatedModule, client: int, round_: int, generator: torch.Generator,
              private: State, work: float) -> ClientWork:
        """One period of ``client``: pull when due, one SGD step per iteration.

        Its weight is eq. 5's (mean local set size); its report holds the label counts of its
        training set at each pull (measurement) and the exchange's compute seconds. With
        ``importance_model=local`` a pull after the period's first step is planned with ``module``
        as trained so far (at step 0 it still equals the global model), sent to every neighbour.
        """
        ex, tp = self.exchange, self.cfg.pull_every
        by_local_model = self.cfg.importance_model == "local" and self.cfg.policy == "smart"
        models_sent = 0
        if EXCHANGE + "pulled" in private:
            ex.pulled[client] = private[EXCHANGE + "pulled"].numpy()
        sets: list[np.ndarray] = []
        received = self.pixels * ex.pushed_to(client) if round_ == 0 else 0
        seconds = self.plan_seconds.get(client, 0.0) + (self.push_seconds if round_ == 0 else 0.0)
        current = torch.as_tensor(ex.local_set(client))

        def local_set(step: int) -> torch.Tensor:
            nonlocal received, seconds, current, models_sent
            t = round_ * self.aggregate_every + step
            if t % tp == 0 and self.cfg.policy != "none":
                start = time.perf_counter()
                if by_local_model and step > 0:  # the receiver's model has left the global one
                    self._plan(client, round_, module, fresh=True)
                    models_sent += len(ex.neighbours[client])
                received += self.pixels * sum(len(s) for s in ex.pull(client, t, self.total))
                seconds += time.perf_counter() - start
                current = torch.as_tensor(ex.local_set(client))
                sets.append(current.numpy())
            return current

        result, weight = train_client_iterations(self.fabric, module, self.images, self.placeholder, local_set,
                                                 self.aggregate_every, self.batch_size, self.views, generator)
        if not sets:  # no pull this period: measure the set it trained on
            sets.append(current.numpy())
        counts = class_counts(self.train_labels, sets, self.num_classes).tolist()
        sent = [("d2d", dtype, n * models_sent) for dtype, n in sorted(payload_bytes(module.payload()).items())
                if models_sent]
        return ClientWork(result, weight, {"exchange_seconds": seconds, "label_counts": counts},
                          {EXCHANGE + "pulled": torch.as_tensor(ex.pulled[client])}, d2d_bytes=received, sent=sent)

    def columns(self, round_: int, reports: list[Report], ledger_rows: list[list],
                history: list[dict[str, Any]]) -> dict[str, Any]:
        """Iterations so far, variance across devices of their training sets' label counts (mean
        over classes and over the period's pulls, Fig. 3c) and the cumulative delay."""
        reports = [rep for rep in reports if "label_counts" in rep]
        if not reports:
            return {}
        pulls = min(len(rep["label_counts"]) for rep in reports)
        counts = np.array([[rep["label_counts"][p] for rep in reports] for p in range(pulls)], dtype=float)
        before = history[-1]["delay_seconds"] if history else 0.0
        delay = period_delay(ledger_rows, {rep["client"]: rep["exchange_seconds"] for rep in reports})
        return {"iterations": (round_ + 1) * self.aggregate_every,
                "label_var": float(counts.var(axis=1).mean()), "delay_seconds": before + delay}

    def log_open(self, logger: Any, run_dir: Path, fresh: bool) -> None:
        if not fresh:
            return
        atomic_write_json(run_dir / "graph.json", {"kind": self.cfg.graph, "neighbours": self.exchange.neighbours,
                                            "positions": self.positions.tolist()})
        logger.experiment.add_figure("exchange/graph", graph_figure(self.adjacency, self.positions), 0)

    def log_round(self, logger: Any, row: dict[str, Any]) -> dict[str, float]:
        if "label_var" not in row:
            return {}
        return {"exchange/label_var": row["label_var"], "exchange/delay_seconds": row["delay_seconds"]}

    def option_keys(self) -> tuple[str, ...]:
        """``local.iterations`` (Ta) and ``exchange.*``; with no exchange (``policy: none``) only its policy."""
        return ("local.iterations", "exchange" if self.cfg.policy != "none" else "exchange.policy")
