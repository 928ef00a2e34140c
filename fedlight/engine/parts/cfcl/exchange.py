"""Every device's data under CF-CL's push-pull exchange (Algorithms 1 and 2).

Each device keeps its own data, the reserves its neighbours pushed to it, and the set it
pulled last; its local training set is own u pulled, and each pull replaces the previous
pulled set (the receiver purges remote points, Sec. III-A). The class holds only image
indices: it is given images (for the push) and an embedding function (for the pull), never
labels.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Literal

import numpy as np
import torch

from fedlight.engine.parts.cfcl.graph import neighbours
from fedlight.engine.parts.cfcl.pull import (cluster_embeddings, macro_probabilities, micro_probabilities,
                                    pull_probabilities, sample_pull, selection_temperature)
from fedlight.engine.parts.cfcl.push import reserve_points
from fedlight.methods.triplet import expected_triplet_loss
from fedlight.seeding import derive_seed, numpy_rng

Policy = Literal["smart", "uniform", "none"]
Embed = Callable[[np.ndarray], torch.Tensor]
"""Image indices (n,) -> (n, d) embeddings under the latest global model."""


@dataclass
class PairPlan:
    """What transmitter j knows about receiver i within one aggregation period (eq. 7-10).

    Attributes:
        candidates: (A,) image indices of j's approximation set.
        clusters: (A,) their K-means++ cluster ids.
        macro: (k,) eq. 8-9 cluster probabilities.
        expected_loss: (A,) eq. 10 against i's reserve.
    """

    candidates: np.ndarray
    clusters: np.ndarray
    macro: np.ndarray
    expected_loss: np.ndarray

    def probabilities(self, temperature: float) -> np.ndarray:
        """Eq. 11-12 at selection temperature lambda_t, shape (A,)."""
        micro = micro_probabilities(self.expected_loss, self.clusters, temperature)
        return pull_probabilities(self.macro, micro, self.clusters)


class Exchange:
    """CF-CL's data exchange over a device graph.

    Args:
        parts: own image indices of every device (K arrays).
        adjacency: (K, K) symmetric bool device graph.
        policy: ``smart`` (eq. 8-12), ``uniform`` (points drawn uniformly from the
            transmitter's data) or ``none`` (no exchange: FedAvg).
        reserve: K_reserve, points pushed to each neighbour.
        approx: K_approx, candidate points a transmitter draws each aggregation period.
        clusters: |L|, K-means++ clusters of reserve u approx embeddings.
        pull_size: n, points each neighbour sends per pull.
        seed: run seed.
        kmeans_iters: Lloyd iterations of the push K-means.
    """

    def __init__(self, parts: list[np.ndarray], adjacency: np.ndarray, policy: Policy, reserve: int, approx: int,
                 clusters: int, pull_size: int, seed: int, kmeans_iters: int = 100) -> None:
        self.own = [np.asarray(p, dtype=np.int64) for p in parts]
        self.neighbours = neighbours(adjacency)
        self.policy, self.reserve_size, self.approx_size = policy, reserve, approx
        self.clusters, self.pull_size, self.seed, self.kmeans_iters = clusters, pull_size, seed, kmeans_iters
        # reserve[i]: what device i pushed to every neighbour (D^Reserve_{i->j})
        self.reserve: list[np.ndarray] = [np.empty(0, np.int64) for _ in parts]
        self.pulled: list[np.ndarray] = [np.empty(0, np.int64) for _ in parts]
        self.plans: dict[tuple[int, int], PairPlan] = {}
        self._approx: dict[int, tuple[np.ndarray, torch.Tensor]] = {}
        self._approx_round = -1

    # ------------------------------------------------------------------ push
    def push(self, images: torch.Tensor, devices: list[int] | None = None) -> None:
        """Algorithm 1, lines 3-5: every device's reserve, K-means++ on its raw pixels.

        Args:
            images: (N, C, H, W) uint8 images of the federation.
            devices: the devices whose reserve is needed (default: all).
        """
        if self.policy != "smart":
            return
        for i in range(len(self.own)) if devices is None else devices:
            pixels = images[torch.as_tensor(self.own[i])].reshape(len(self.own[i]), -1).float().div(255).numpy()
            pos = reserve_points(pixels, self.reserve_size, derive_seed(self.seed, "push", i), self.kmeans_iters)
            self.reserve[i] = self.own[i][pos]

    def pushed_to(self, receiver: int) -> int:
        """Points ``receiver`` gets in the push: one reserve from each neighbour (D2D traffic).

        Only the smart policy pushes; the count is known without running the K-means.
        """
        if self.policy != "smart":
            return 0
        return sum(min(self.reserve_size, len(self.own[j])) for j in self.neighbours[receiver])

    # ------------------------------------------------------------------ pull
    def approximation_set(self, transmitter: int, round_: int) -> np.ndarray:
        """Eq. 7: K_approx points drawn uniformly from the transmitter's own data, per period."""
        own = self.own[transmitter]
        rng = numpy_rng(self.seed, "approx", round_, transmitter)
        return np.sort(rng.choice(own, size=min(self.approx_size, len(own)), replace=False))

    def plan(self, receivers: list[int], round_: int, embed: Embed,
             embed_views: Callable[[np.ndarray, int], torch.Tensor], margin: float, fresh: bool = False) -> None:
        """Algorithm 2, lines 2-7, for every (receiver, neighbour) pair, with the global model (or, with
        ``fresh``, the receivers' own latest local model: Fig. 3(e)).

        Plans of earlier periods (or pulls) are replaced pair by pair.

        Args:
            receivers: devices that will pull in this aggregation period.
            round_: the aggregation period gamma.
            embed: global-model embeddings of image indices, (n,) -> (n, d).
            embed_views: embeddings of augmented views of image indices, keyed by a seed.
            margin: the triplet margin m of eq. 10.
            fresh: ``embed`` is not the period's global model: embed the transmitters' candidates
                again rather than reuse the period's global-model embeddings.
        """
        if self.policy != "smart":
            return
        if self._approx_round != round_:  # a transmitter's candidates are embedded once per period
            self._approx, self._approx_round = {}, round_
        approx: dict[int, tuple[np.ndarray, torch.Tensor]] = {} if fresh else self._approx
        for i in receivers:
            reserve = self.reserve[i]
            anchors = embed(reserve)
            views = embed_views(reserve, derive_seed(self.seed, "reserve-view", round_, i))
            for j in self.neighbours[i]:
                if j not in approx:
                    cand = self.approximation_set(j, round_)
                    approx[j] = (cand, embed(cand))
                cand, cand_emb = approx[j]
                rc, ac = cluster_embeddings(anchors.cpu().numpy(), cand_emb.cpu().numpy(), self.clusters,
                                            derive_seed(self.seed, "pull-kmeans", round_, i, j))
                loss = expected_triplet_loss(anchors.float(), views.float(), cand_emb.float(), margin)
                self.plans[(i, j)] = PairPlan(cand, ac, macro_probabilities(rc, ac, self.clusters),
                                              loss.double().cpu().numpy())

    def pull(self, receiver: int, t: int, total: int) -> list[np.ndarray]:
        """Algorithm 1, lines 8-11: ``receiver`` pulls from every neighbour at iteration ``t`` of ``total``.

        The points pulled before are dropped. Returns the points each neighbour sent.
        """
        if self.policy == "none":
            return []
        sent = []
        for j in self.neighbours[receiver]:
            rng = numpy_rng(self.seed, "pull", t, receiver, j)
            if self.policy == "uniform":
                own = self.own[j]
                sent.append(np.sort(rng.choice(own, size=min(self.pull_size, len(own)), replace=False)))
            else:
                plan = self.plans[(receiver, j)]
                chosen = sample_pull(plan.probabilities(selection_temperature(t, total)), self.pull_size, rng)
                sent.append(plan.candidates[chosen])
        self.pulled[receiver] = np.concatenate(sent) if sent else np.empty(0, np.int64)
        return sent

    def local_set(self, device: int) -> np.ndarray:
        """The device's training set now: own data u the points it pulled last."""
        return np.concatenate([self.own[device], self.pulled[device]])
