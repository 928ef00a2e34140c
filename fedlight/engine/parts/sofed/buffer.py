"""A fixed-size on-device replay buffer and the policies that decide what it keeps (SOFed, sec. III).

The buffer holds sample ids (indices into the client's stream), each with its last
importance score and its age (iterations spent in the buffer). A policy takes the buffer
and a newly arrived batch and returns the ids to keep; nothing else of the stream is stored.
Scoring is a callable passed in, so the policies are plain tensor logic that a test can
drive with hand-made scores.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch

Scorer = Callable[[torch.Tensor], torch.Tensor]
"""ids (M,) -> scores (M,), e.g. SOFed's eq. 3, 1 - cos(online prediction of x, target projection of flip(x))."""
Featurizer = Callable[[torch.Tensor], torch.Tensor]
"""ids (M,) -> features (M, D), for k-center."""


@dataclass
class ReplayBuffer:
    """Ids, scores and ages of the samples a client keeps; never more than ``size``.

    Attributes:
        size: capacity N.
        ids: (n,) int64 stream ids held, n <= N.
        scores: (n,) float last computed importance scores (importance policy).
        ages: (n,) int64 iterations each sample has stayed in the buffer.
        seen: samples that have arrived so far (reservoir sampling).
    """

    size: int
    ids: torch.Tensor = field(default_factory=lambda: torch.zeros(0, dtype=torch.long))
    scores: torch.Tensor = field(default_factory=lambda: torch.zeros(0))
    ages: torch.Tensor = field(default_factory=lambda: torch.zeros(0, dtype=torch.long))
    seen: int = 0

    def state_dict(self) -> dict[str, torch.Tensor]:
        return {"ids": self.ids, "scores": self.scores, "ages": self.ages, "seen": torch.tensor(self.seen)}

    @classmethod
    def from_state(cls, size: int, state: dict[str, torch.Tensor]) -> "ReplayBuffer":
        return cls(size, state["ids"].clone(), state["scores"].clone(), state["ages"].clone(), int(state["seen"]))


@dataclass
class UpdateStats:
    """What buffer updates did: how many new samples were dropped straight away, how many
    buffered samples were re-scored (SOFed Fig. 6 and Table VI), and (filled in by the caller)
    how many arriving batches took how many seconds of selection."""

    new: int
    dropped_new: int
    buffered: int
    rescored: int
    batches: int = 0
    seconds: float = 0.0


def _keep(buf: ReplayBuffer, ids: torch.Tensor, scores: torch.Tensor, ages: torch.Tensor,
          n_new: int, arrived: int) -> UpdateStats:
    n_old = len(buf.ids)
    buf.ids, buf.scores, buf.ages = ids, scores, ages
    buf.seen += arrived
    return UpdateStats(new=arrived, dropped_new=arrived - n_new, buffered=n_old, rescored=0)


def fifo(buf: ReplayBuffer, new_ids: torch.Tensor) -> UpdateStats:
    """Keep the N most recent samples."""
    ids = torch.cat([buf.ids, new_ids])[-buf.size:]
    kept_new = min(len(new_ids), buf.size)
    ages = torch.cat([buf.ages + 1, torch.zeros(len(new_ids), dtype=torch.long)])[-buf.size:]
    return _keep(buf, ids, torch.zeros(len(ids)), ages, kept_new, len(new_ids))


def reservoir(buf: ReplayBuffer, new_ids: torch.Tensor, generator: torch.Generator) -> UpdateStats:
    """Vitter's reservoir sampling over the whole stream: every sample seen so far is kept with
    equal probability N / seen (not SOFed's Random Replacement: see ``random_replacement``).

    The t-th sample ever seen takes slot t - 1 while t <= N, else slot j ~ U{0, ..., t - 1} if
    j < N. Those draws do not depend on the buffer, so a whole batch is placed at once; when
    several of its samples draw one slot the latest wins, as in the sequential algorithm.
    """
    n, size = len(new_ids), buf.size
    t = buf.seen + torch.arange(1, n + 1)
    slot = torch.where(t <= size, t - 1, (torch.rand(n, generator=generator) * t).long())
    fill = min(size, buf.seen + n)
    ids = torch.cat([buf.ids, torch.zeros(fill - len(buf.ids), dtype=torch.long)])
    ages = torch.cat([buf.ages + 1, torch.zeros(fill - len(buf.ids), dtype=torch.long)])
    hit = slot < size
    latest = torch.full((size,), -1).scatter_reduce(0, slot[hit], torch.arange(n)[hit], reduce="amax")[:fill]
    placed = latest >= 0
    ids[placed], ages[placed] = new_ids[latest[placed]], 0
    return _keep(buf, ids, torch.zeros(fill), ages, int(placed.sum()), n)


def random_replacement(buf: ReplayBuffer, new_ids: torch.Tensor, generator: torch.Generator) -> UpdateStats:
    """SOFed's Random Replacement baseline (Gong et al. 2023, sec. IV "Baselines"): at every
    arriving batch X, keep a uniformly random N of B u X (all of it while it fits).

    Unlike ``reservoir`` (uniform over every sample seen so far), with |X| = N every sample of
    B u X stays with probability 1/2 at each batch, so the buffer leans to recent samples and
    half of each arriving batch is dropped at once on average (the paper's Fig. 6: "around 50%").

    Args:
        buf: the buffer B (updated in place).
        new_ids: (M,) stream ids of the arriving batch X.
        generator: the only source of randomness (the engine's (seed, round, client) generator).
    """
    pool = torch.cat([buf.ids, new_ids])
    ages = torch.cat([buf.ages + 1, torch.zeros(len(new_ids), dtype=torch.long)])
    keep = torch.arange(len(pool))
    if len(pool) > buf.size:
        keep = torch.randperm(len(pool), generator=generator)[:buf.size].sort().values
    kept_new = int((keep >= len(buf.ids)).sum())
    return _keep(buf, pool[keep], torch.zeros(len(keep)), ages[keep], kept_new, len(new_ids))


def kcenter(buf: ReplayBuffer, new_ids: torch.Tensor, featurize: Featurizer) -> UpdateStats:
    """Greedy k-center (Sener and Savarese 2018) over buffer + new batch on the current features:
    start from the point farthest from the mean, then add the point farthest from those chosen."""
    pool = torch.cat([buf.ids, new_ids])
    ages = torch.cat([buf.ages + 1, torch.zeros(len(new_ids), dtype=torch.long)])
    if len(pool) <= buf.size:
        return _keep(buf, pool, torch.zeros(len(pool)), ages, len(new_ids), len(new_ids))
    feats = featurize(pool).float()
    dist = (feats - feats.mean(0)).norm(dim=1)
    chosen = [int(dist.argmax())]
    dist = (feats - feats[chosen[0]]).norm(dim=1)
    for _ in range(buf.size - 1):
        nxt = int(dist.argmax())
        chosen.append(nxt)
        dist = torch.minimum(dist, (feats - feats[nxt]).norm(dim=1))
    keep = torch.tensor(sorted(chosen))
    kept_new = int((keep >= len(buf.ids)).sum())
    return _keep(buf, pool[keep], torch.zeros(len(keep)), ages[keep], kept_new, len(new_ids))


def importance(buf: ReplayBuffer, new_ids: torch.Tensor, score: Scorer, lazy_interval: int = 1) -> UpdateStats:
    """SOFed eq. 4-5: score buffer + new batch, keep the N highest.

    New samples are always scored; a buffered sample is re-scored only when its age is a
    multiple of ``lazy_interval`` (T; 1 re-scores everything every time).
    """
    ages = buf.ages + 1
    stale = (ages % lazy_interval) == 0
    scores = buf.scores.clone()
    if stale.any():
        scores[stale] = score(buf.ids[stale]).float()
    pool = torch.cat([buf.ids, new_ids])
    pool_scores = torch.cat([scores, score(new_ids).float()])
    pool_ages = torch.cat([ages, torch.zeros(len(new_ids), dtype=torch.long)])
    keep = pool_scores.topk(min(buf.size, len(pool))).indices.sort().values
    kept_new = int((keep >= len(buf.ids)).sum())
    stats = _keep(buf, pool[keep], pool_scores[keep], pool_ages[keep], kept_new, len(new_ids))
    stats.rescored = int(stale.sum())
    return stats
